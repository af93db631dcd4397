"""The report of a load-mix study: winners per load, the throughput-vs-load table, where
speculation stops paying, and the per-load launch; checked against plain Optuna's record."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState
from study._helpers import StudyRun, finished_trials, run_cli
from study._loads import MIX

from autotune.report import build_report, format_report, load_study
from autotune.study._optuna import set_study_system_attr
from autotune.study._space_record import SPACE_TEXT_KEY, stored_space_text


def _measured(run: StudyRun) -> list[FrozenTrial]:
    return [t for t in finished_trials(run.load()) if t.state == TrialState.COMPLETE]


def _at(t: FrozenTrial, label: str) -> float:
    return float(t.user_attrs["loads"][label]["value"])


def _report_json(run: StudyRun) -> dict[str, Any]:
    cli = run_cli("study", "report", *run.cli_args(), "--json", timeout=300)
    assert cli.returncode == 0, cli.describe()
    return dict(json.loads(cli.stdout))


def test_the_winner_of_each_load_is_the_best_trial_there(mix_study: StudyRun) -> None:
    trials = _measured(mix_study)
    base = next(t for t in trials if t.user_attrs["role"] == "baseline")
    loads = _report_json(mix_study)["loads"]
    assert [p["label"] for p in loads["points"]] == [label for label, _ in MIX]
    winners = {w["label"]: w for w in loads["winners"]}
    assert list(winners) == [label for label, _ in MIX]
    for label, weight in MIX:
        best = max(trials, key=lambda t: _at(t, label))
        w = winners[label]
        assert (w["trial"], w["weight"]) == (best.number, weight)
        assert w["value"] == pytest.approx(_at(best, label))
        assert w["baseline"] == pytest.approx(_at(base, label))
        assert w["speedup"] == pytest.approx(_at(best, label) / _at(base, label))


def test_the_curve_shows_the_baseline_and_the_best_configurations_at_every_load(
    mix_study: StudyRun,
) -> None:
    trials = _measured(mix_study)
    base = next(t for t in trials if t.user_attrs["role"] == "baseline")
    ranked = sorted(
        (t for t in trials if t.user_attrs["role"] != "baseline"),
        key=lambda t: float(t.value or 0.0),
        reverse=True,
    )
    loads = _report_json(mix_study)["loads"]
    curve = loads["curve"]
    assert [r["trial"] for r in curve] == [base.number] + [t.number for t in ranked[:3]]
    by_number = {t.number: t for t in trials}
    for row in curve:
        t = by_number[row["trial"]]
        assert row["value"] == pytest.approx(t.value)
        for label, _ in MIX:
            assert row["figures"][label] == pytest.approx(_at(t, label))
            assert row["speedups"][label] == pytest.approx(_at(t, label) / _at(base, label))
    # where speculation stops paying: the first load at which the best falls below the baseline
    top = ranked[0]
    expected = next((k for k, _ in MIX if _at(top, k) < _at(base, k)), None)
    assert loads["best_speculative"] == top.number
    assert loads["stops_paying_at"] == expected


def test_the_per_load_launch_follows_the_winners_it_can(mix_study: StudyRun) -> None:
    """SGLang 0.5.23's adaptive speculation runs top-k 1 only: a winner of another top-k is
    replaced by the best top-k 1 trial (or the baseline) at that load."""
    trials = {t.number: t for t in _measured(mix_study)}
    loads = _report_json(mix_study)["loads"]
    schedule = loads["schedule"]
    winners = {w["label"]: w["trial"] for w in loads["winners"]}

    def runnable(t: FrozenTrial) -> bool:
        return (
            t.user_attrs["role"] == "baseline"
            or t.user_attrs["config"].get("speculative_eagle_topk") == 1
        )

    for label, _ in MIX:
        followed = trials[schedule["follows"][label]]
        assert runnable(followed)
        if runnable(trials[winners[label]]):
            assert followed.number == winners[label]
        else:
            assert label in schedule["substitutes"]
            best = max((t for t in trials.values() if runnable(t)), key=lambda t: _at(t, label))
            assert followed.number == best.number

    def steps(t: FrozenTrial) -> int:
        return (
            0
            if t.user_attrs["role"] == "baseline"
            else t.user_attrs["config"]["speculative_num_steps"]
        )

    followed = {label: trials[schedule["follows"][label]] for label, _ in MIX}
    if len({t.number for t in followed.values()}) == 1:
        assert schedule["command"] is None and "launch" in schedule["reason"]
        return
    assert schedule["reason"] is None, schedule
    assert schedule["command"].endswith(
        "--speculative-adaptive --speculative-adaptive-config adaptive-spec.json"
    )
    assert "--speculative-eagle-topk 1" in schedule["command"]
    slots = json.loads(schedule["files"]["adaptive-spec.json"])
    assert slots == {label[1:]: {"candidate_steps": [steps(followed[label])]} for label, _ in MIX}


def test_the_text_report_names_each_load_and_the_release_can_be_unable(
    mix_study: StudyRun, tmp_path: Path
) -> None:
    cli = run_cli("study", "report", *mix_study.cli_args(), timeout=300)
    assert cli.returncode == 0, cli.describe()
    text = cli.stdout
    assert "load mix: c1 0.5, c4 0.3, c8 0.2" in text
    winners = {w["label"]: w["trial"] for w in _report_json(mix_study)["loads"]["winners"]}
    lines = text.splitlines()
    start = lines.index("winner per load:")
    for i, (label, _) in enumerate(MIX):
        assert lines[start + 1 + i].split()[:3] == [label, "trial", str(winners[label])]
    assert "output_tok_s by load" in text
    assert "per-load launch" in text
    # the same study as if its engine spoke SGLang 0.5.3, which has no adaptive speculation
    copy = tmp_path / "old"
    copy.mkdir()
    with sqlite3.connect(mix_study.db) as src, sqlite3.connect(copy / mix_study.db.name) as dst:
        src.backup(dst)
    study = optuna.load_study(
        study_name=mix_study.name, storage=f"sqlite:///{copy / mix_study.db.name}"
    )
    space_text = stored_space_text(study)
    assert space_text is not None
    old = re.sub(r"dialect: ['\"]?0\.5\.23['\"]?", "dialect: '0.5.3'", space_text)
    assert old != space_text
    set_study_system_attr(study, SPACE_TEXT_KEY, old)
    loaded, paths = load_study(mix_study.name, studies_dir=copy)
    report = build_report(loaded, paths)
    assert report.loads is not None and report.loads.schedule is not None
    assert report.loads.schedule.command is None
    assert "has no --speculative-adaptive" in format_report(report)
