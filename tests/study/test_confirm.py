"""Confirmation after the search: the best candidates and the baseline re-measured interleaved,
the verdict with its interval, kept across Ctrl-C, continued by ``autotune study confirm``."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import optuna
import yaml

from autotune.searchbench import Oracle, run_study
from autotune.searchbench._benchmark import prepare
from autotune.study._setup import make_engine

from ._lab import CONFIGS, StudyLab

REPO = Path(__file__).resolve().parents[2]
CONFIRM = {"candidates": 2, "min_rounds": 2, "max_rounds": 3}
#: Long enough a run that HTTP's own jitter stays small beside the speed-up (~2x).
STEADY = {"num_prompts": 6, "output_len": 96}


def _state(lab: StudyLab, name: str) -> dict[str, Any]:
    study = optuna.load_study(study_name=name, storage=lab.storage(lab.sqlite_url(name)))
    state = study.user_attrs.get("autotune:confirmation")
    assert isinstance(state, dict), study.user_attrs.keys()
    return state


def _measured(lab: StudyLab, name: str) -> int:
    """Confirmation runs recorded so far (0 before the study or its confirmation exists)."""
    try:
        return len(_state(lab, name)["measurements"])
    except Exception:  # no database yet, or no confirmation in it yet
        return 0


def test_a_study_is_confirmed_after_its_search_and_the_report_leads_with_the_verdict(
    lab: StudyLab,
) -> None:
    space = lab.space("conf", configs=CONFIGS, confirm=CONFIRM, noise=0.02, workload=STEADY)
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "4", "--seed", "2")
    assert run.rc == 0, run.show()
    state = _state(lab, "conf")
    verdict = state["verdict"]
    # the baseline and the two best distinct measured configurations, by the search's figures
    finished = lab.finished("conf")
    ranked = sorted(
        (t for t in finished if t.user_attrs["role"] != "baseline" and t.value is not None),
        key=lambda t: -t.value,
    )
    assert state["arms"] == ["baseline", *(f"trial {t.number}" for t in ranked[:2])]
    # each round measured every arm still standing once, the baseline in every round
    rounds = sorted({m["round"] for m in state["measurements"]})
    assert rounds == list(range(verdict["rounds"])), state["measurements"]
    assert 2 <= verdict["rounds"] <= 3
    for r in rounds:
        arms = [m["arm"] for m in state["measurements"] if m["round"] == r]
        assert "baseline" in arms and len(arms) == len(set(arms)), arms
    # the order turns from round to round, so drift does not always hit the same arm first
    firsts = [next(m["arm"] for m in state["measurements"] if m["round"] == r) for r in rounds]
    assert len(set(firsts)) > 1, firsts
    # the fast profile gains about 2x: speculation pays, beyond noise
    assert verdict["kind"] == "pays", verdict
    leader = verdict["leader"]
    assert leader["ratio"] > 1.3 and 1.0 < leader["low"] <= leader["ratio"] <= leader["high"]
    assert verdict["choice"] == leader["trial"]
    assert verdict["headline"].startswith("EAGLE-3 pays: x")
    assert verdict["headline"] in run.out
    # where the dashboard's study page shows them: the verdict and the trial it chose
    study = optuna.load_study(study_name="conf", storage=lab.storage(lab.sqlite_url("conf")))
    attrs = study.user_attrs
    assert (attrs["verdict"], attrs["confirmed_trial"]) == (verdict["headline"], leader["trial"])
    assert verdict["gpu_hours"] > 0 and verdict["starts"] == len(state["measurements"])
    # the ratio is the geometric mean of the rounds' ratios to the same round's baseline
    by_round: dict[int, dict[str, float]] = {}
    for m in state["measurements"]:
        by_round.setdefault(m["round"], {})[m["arm"]] = m["value"]
    key = f"trial {leader['trial']}"
    ratios = [v[key] / v["baseline"] for v in by_round.values() if key in v]
    product = 1.0
    for x in ratios:
        product *= x
    assert abs(leader["ratio"] - product ** (1 / len(ratios))) < 1e-9

    report = lab.cli("study", "report", "--study-name", "conf")
    assert report.rc == 0, report.show()
    lines = report.out.splitlines()
    assert lines[0] == verdict["headline"]
    assert f"confirmed choice: trial {verdict['choice']} " in report.out
    assert "interleaved rounds" in report.out
    data = json.loads(lab.cli("study", "report", "--study-name", "conf", "--json").out)
    assert data["verdict"]["kind"] == "pays" and data["best"]["number"] == verdict["choice"]


def test_ctrl_c_during_the_confirmation_keeps_its_runs_and_confirm_goes_on(
    lab: StudyLab,
) -> None:
    space = lab.space("conf-int", configs=CONFIGS, confirm={**CONFIRM, "max_rounds": 4}, noise=0.02)
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "3", "--seed", "2")

    lab.wait_for("a confirmation run", lambda: _measured(lab, "conf-int") >= 2, timeout=300)
    lab.wait_server()  # the next confirmation run is starting: stop it there
    tuner.send_signal(signal.SIGINT)
    stopped = lab.finish(tuner)
    assert stopped.rc == 130, stopped.show()
    assert "during the confirmation" in stopped.err
    assert "autotune study confirm --study-name conf-int" in stopped.err
    assert "Traceback" not in stopped.err
    lab.check_no_servers("after Ctrl-C during the confirmation")
    before = _state(lab, "conf-int")["measurements"]
    assert before and "verdict" not in _state(lab, "conf-int")

    again = lab.cli("study", "confirm", "--study-name", "conf-int")
    assert again.rc == 0, again.show()
    state = _state(lab, "conf-int")
    assert state["measurements"][: len(before)] == before  # nothing measured twice or lost
    assert state["verdict"]["kind"] in ("pays", "noise", "costs")
    assert state["verdict"]["headline"] in again.out
    assert len(lab.finished("conf-int")) == 3  # confirmation runs are not trials


def test_confirm_refuses_rounds_below_the_minimum(lab: StudyLab) -> None:
    space = lab.space("conf-bad", configs=CONFIGS[:1])
    assert lab.cli("study", "start", "--space", str(space), "--n-trials", "2").rc == 0
    bad = lab.cli(
        "study", "confirm", "--study-name", "conf-bad", "--min-rounds", "4", "--max-rounds", "3"
    )
    assert bad.rc == 2, bad.show()
    assert "--max-rounds 3 is below the minimum of 4 rounds" in bad.err
    assert "Traceback" not in bad.err
    study = optuna.load_study(
        study_name="conf-bad", storage=lab.storage(lab.sqlite_url("conf-bad"))
    )
    assert "autotune:confirmation" not in study.user_attrs


# --- the verdict on the simulator's model: right where speculation pays, and where it costs ---


def _oracle_study(tmp_path: Path, edit: dict[str, Any], budget: int, seed: int = 0) -> Any:
    doc = yaml.safe_load((REPO / "search_spaces" / "eagle3-h100.yaml").read_text())
    doc.update(edit)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    space, model = prepare(str(path), None)
    oracle = Oracle(model, space.workload, metric=space.objective.metric)
    trace = run_study(space, make_engine(space), oracle, "default", seed, budget, folder=tmp_path)
    base = oracle.answer(space.baseline_config()).value
    return trace, base


def test_the_verdict_is_costs_where_every_candidate_is_slower_than_no_speculation(
    tmp_path: Path,
) -> None:
    # wide trees at concurrency 64 on the H100: every configuration is far slower than none
    edit = {
        "workload": {"name": "c64", "concurrency": 64, "num_prompts": 64, "warmup": 0,
                     "input_len": 256, "output_len": 128, "seed": 1},
        "parameters": {
            "speculative_num_steps": {"type": "int", "low": 6, "high": 8},
            "speculative_num_draft_tokens": {"type": "int", "low": 48, "high": 64},
        },
        "fixed": {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 8},
        "enqueue": {"baseline": {}},
    }  # fmt: skip
    trace, base = _oracle_study(tmp_path, edit, budget=5)
    conf = trace.confirmation
    assert conf is not None
    true = {t.number: t.true_value for t in trace.trials}
    assert true[conf.leader] < base  # the model: slower than no speculation
    assert conf.kind == "costs" and conf.choice is None, conf
    assert conf.gpu_hours > 0 and conf.starts >= 2 * 3


def test_a_server_left_by_a_killed_confirmation_is_stopped_by_the_next(lab: StudyLab) -> None:
    space = lab.space("conf-kill", configs=CONFIGS, confirm=CONFIRM, noise=0.02)
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "3", "--seed", "2")

    lab.wait_for("a confirmation run", lambda: _measured(lab, "conf-kill") >= 1, timeout=300)
    server = lab.wait_server()  # a confirmation run's server: its tuner dies under it
    tuner.kill()
    tuner.wait(timeout=30)
    assert server.is_running()
    study = optuna.load_study(
        study_name="conf-kill", storage=lab.storage(lab.sqlite_url("conf-kill"))
    )
    assert isinstance(study.user_attrs.get("autotune:confirm_process"), dict)

    again = lab.cli("study", "confirm", "--study-name", "conf-kill")  # no server may outlive it
    assert again.rc == 0, again.show()
    assert not server.is_running()
    assert _state(lab, "conf-kill")["verdict"]["kind"] in ("pays", "noise", "costs")
