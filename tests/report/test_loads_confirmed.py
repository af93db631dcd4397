"""The report of a confirmed load-mix study: the winners and the per-load launch follow the
confirmation, not the search's single measurements.

The study is the H100 mix space (concurrency 1, 16, 64) run by the tuner's loop into a SQLite
file, with the simulator's model as its evaluator (2% noise) and the confirmation on; the
report is ``autotune study report --json`` on that file. At concurrency 1 the winner is a tree
(top-k 4 or 8), which SGLang 0.5.23's adaptive speculation cannot run: the launch follows, there,
the top-k 1 candidate with the best confirmed figure at that load."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from study._helpers import run_cli

from autotune.searchbench._benchmark import prepare
from autotune.searchbench._oracle import Oracle, OracleEvaluator
from autotune.study._runner import StudyRunner
from autotune.study._setup import StudyOptions, finish_setup, make_engine, set_target
from autotune.study._space_record import store_space
from autotune.study._storage import StudyPaths

pytestmark = pytest.mark.timeout(600)

MIX = Path(__file__).resolve().parents[2] / "search_spaces" / "eagle3-h100-mix.yaml"
#: (steps, top-k, draft tokens): two chains, three deep trees that win at concurrency 1.
SETTINGS = [(4, 1, 5), (5, 4, 16), (5, 8, 24), (6, 8, 32), (3, 1, 4), (6, 1, 7)]


def _confirmed_study(folder: Path) -> str:
    space, model = prepare(str(MIX), None)
    configs = tuple(
        {"speculative_num_steps": s, "speculative_eagle_topk": k,
         "speculative_num_draft_tokens": d, "cuda_graph_max_bs": 128,
         "mem_fraction_static": 0.85}
        for s, k, d in SETTINGS
    )  # fmt: skip
    confirm = dataclasses.replace(space.confirm, candidates=1, max_rounds=5)
    space = dataclasses.replace(space, enqueued=configs, confirm=confirm)
    engine = make_engine(space)
    url = f"sqlite:///{folder / 'mix.db'}"
    study = optuna.create_study(study_name="mix", storage=url, direction="maximize")
    options = StudyOptions(study_name="mix", seed=0, n_trials=len(configs) + 1,
                           progress=False, confirm=True, informed=False)  # fmt: skip
    finish_setup(study, space, engine, options)
    store_space(study, space, None)  # as `study start` records it, for the report
    paths = StudyPaths("mix", url, folder / "mix-artifacts", folder / "mix-logs")
    summary = StudyRunner(
        study, space, engine, paths, options, set_target(study, len(configs) + 1),
        evaluator=OracleEvaluator(Oracle.for_space(model, space), seed=5, noise=0.02),
        quiet=True,
    ).run()  # fmt: skip
    assert summary.verdict is not None and summary.verdict.loads
    return url


def _report(folder: Path) -> dict[str, Any]:
    cli = run_cli(
        "study", "report", "--study-name", "mix", "--studies-dir", str(folder), "--json",
        timeout=300,
    )  # fmt: skip
    assert cli.returncode == 0, cli.describe()
    return dict(json.loads(cli.stdout))


def test_the_per_load_launch_follows_the_confirmed_winners(tmp_path: Path) -> None:
    url = _confirmed_study(tmp_path)
    report = _report(tmp_path)
    verdict, loads = report["verdict"], report["loads"]
    trials = {t.number: t for t in optuna.load_study(study_name="mix", storage=url).trials}
    arms = {a["trial"]: a for a in verdict["arms"]}
    choices = {c["label"]: c for c in verdict["loads"]}
    assert set(choices) == {"c1", "c16", "c64"}
    baseline = next(n for n, t in trials.items() if t.user_attrs.get("role") == "baseline")

    def chosen(label: str) -> int:
        c = choices[label]
        return int(c["trial"]) if c["ratio"] >= 1.0 else baseline

    winners = {w["label"]: w for w in loads["winners"]}
    for label in choices:
        assert winners[label]["confirmed"] and winners[label]["trial"] == chosen(label)
    schedule = loads["schedule"]

    def topk(n: int) -> int:
        return 1 if n == baseline else int(trials[n].params["speculative_eagle_topk"])

    # concurrency 1 is won by a tree; the launch takes the top-k 1 candidate confirmed best there
    assert topk(chosen("c1")) > 1
    fits = {n: a["at_loads"]["c1"] for n, a in arms.items() if topk(n) == 1 and a["at_loads"]}
    fits[baseline] = 1.0
    best = max(fits, key=lambda n: fits[n])
    assert schedule["follows"]["c1"] == best, (schedule, fits)
    assert "of its confirmed figure there" in schedule["substitutes"]["c1"]
    for label in ("c16", "c64"):
        if topk(chosen(label)) == 1:
            assert schedule["follows"][label] == chosen(label)
    followed = {label: schedule["follows"][label] for label in choices}
    if len(set(followed.values())) == 1:
        assert schedule["command"] is None and "launch" in schedule["reason"]
        return
    assert schedule["reason"] is None, schedule
    assert schedule["command"].endswith(
        "--speculative-adaptive --speculative-adaptive-config adaptive-spec.json"
    )
    steps = {
        label: 0 if n == baseline else int(trials[n].params["speculative_num_steps"])
        for label, n in followed.items()
    }
    slots = json.loads(schedule["files"]["adaptive-spec.json"])
    assert slots == {label[1:]: {"candidate_steps": [k]} for label, k in steps.items()}
    text = run_cli("study", "report", "--study-name", "mix", "--studies-dir", str(tmp_path))
    assert "winner per load (confirmed" in text.stdout and "per-load launch" in text.stdout
