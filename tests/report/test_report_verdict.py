"""The report of a confirmed study: its first line is the verdict with the digits that decide it,
and it sets the choice's latency beside the baseline's, in text and in JSON."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import optuna
from study._helpers import StudyRun

from autotune.report import StudyReport, build_report, format_report, load_study
from autotune.space import ConfirmSpec
from autotune.study._record import STUDY_CONFIRMATION
from autotune.study._verdict import ArmFigure, judge

FAMILIES = ("ttft", "tpot", "itl", "e2e")


def _confirmed(run: StudyRun, low: float, folder: Path) -> StudyReport:
    """The report of a copy of the seed study whose confirmation found trial 1 at
    x1.05 [low, 1.10] (the verdict written where ``study confirm`` writes it)."""
    folder.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(run.db) as src, sqlite3.connect(folder / run.db.name) as dst:
        src.backup(dst)
    plain = optuna.load_study(study_name="seed", storage=f"sqlite:///{folder / run.db.name}")
    trial = plain.trials[1]
    arm = ArmFigure(
        key="trial 1",
        trial=1,
        config=trial.user_attrs["config"],
        searched=trial.value,
        ratio=1.05,
        low=low,
        high=1.10,
        runs=4,
    )
    verdict = judge([arm], rounds=4, starts=8, gpu_hours=1.5, spec=ConfirmSpec())
    plain.set_user_attr(STUDY_CONFIRMATION, {"verdict": verdict.to_dict()})
    study, paths = load_study("seed", studies_dir=folder)
    return build_report(study, paths)


def test_the_first_line_is_the_verdict_with_its_deciding_digits(
    seed_study: StudyRun, tmp_path: Path
) -> None:
    pays = _confirmed(seed_study, 1.004, tmp_path / "pays")
    noise = _confirmed(seed_study, 0.995, tmp_path / "noise")
    assert pays.verdict is not None and pays.verdict.kind == "pays"
    assert noise.verdict is not None and noise.verdict.kind == "noise"
    first = format_report(pays).splitlines()[0]
    assert first == pays.verdict.headline
    assert "x1.05 [1.004, 1.10]" in first
    assert "x1.05 [0.995, 1.10]" in format_report(noise).splitlines()[0]
    data = json.loads(json.dumps(pays.to_dict()))
    assert data["verdict"]["headline"] == first
    assert (data["verdict"]["leader"]["low"], data["verdict"]["kind"]) == (1.004, "pays")


def _figure(attrs: dict[str, Any], name: str) -> float | None:
    value = attrs.get(name)
    return None if value is None else float(value)


def test_the_choice_is_compared_with_the_baseline(seed_study: StudyRun, tmp_path: Path) -> None:
    report = _confirmed(seed_study, 1.004, tmp_path)
    trials = seed_study.load().trials
    choice, baseline = trials[1].user_attrs, trials[0].user_attrs
    comparison = report.comparison
    assert comparison is not None
    assert (comparison.what, comparison.trial, comparison.baseline_trial) == (
        "confirmed choice",
        1,
        0,
    )
    names = [f"{f}_{s}_ms" for f in FAMILIES for s in ("median", "p99")]
    assert set(names) | {"output_tok_s", "accept_length"} <= set(comparison.figures)
    for name in names:
        assert comparison.figures[name] == {
            "choice": _figure(choice, name),
            "baseline": _figure(baseline, name),
        }
        assert comparison.figures[name]["choice"] is not None

    data = json.loads(json.dumps(report.to_dict()))
    assert data["comparison"]["figures"]["ttft_p99_ms"]["baseline"] == _figure(
        baseline, "ttft_p99_ms"
    )

    text = format_report(report).splitlines()
    rows = {line.split()[0]: line.split() for line in text if line.startswith("    ")}
    for name in names:
        assert rows[name][1:3] == [
            f"{comparison.figures[name]['choice']:.1f}"
            if (comparison.figures[name]["choice"] or 0) >= 10
            else f"{comparison.figures[name]['choice']:.3f}",
            f"{comparison.figures[name]['baseline']:.1f}"
            if (comparison.figures[name]["baseline"] or 0) >= 10
            else f"{comparison.figures[name]['baseline']:.3f}",
        ]


def test_an_unconfirmed_report_compares_its_best(seed_study: StudyRun) -> None:
    study, paths = load_study("seed", studies_dir=seed_study.studies_dir)
    report = build_report(study, paths)
    assert report.best is not None and report.comparison is not None
    speculative = [r for r in report.top(100) if r.role != "baseline"]
    what = "best" if report.best.role != "baseline" else "best speculative"
    assert (report.comparison.what, report.comparison.trial) == (what, speculative[0].number)
