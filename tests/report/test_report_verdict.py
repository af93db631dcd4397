"""The report of a confirmed study: its first line is the verdict with the digits that decide it,
and it sets the choice's latency beside the baseline's, in text and in JSON."""

from __future__ import annotations

import dataclasses
import json

from study._helpers import StudyRun

from autotune.report import StudyReport, build_report, format_report, load_study
from autotune.space import ConfirmSpec
from autotune.study._verdict import ArmFigure, judge


def _confirmed(run: StudyRun, low: float) -> StudyReport:
    """The seed study's report as if its confirmation had found trial 1 at x1.05 [low, 1.10]."""
    study, paths = load_study("seed", studies_dir=run.studies_dir)
    report = build_report(study, paths)
    row = next(r for r in report.rows if r.number == 1)
    arm = ArmFigure(
        key="trial 1",
        trial=1,
        config=row.config,
        searched=row.value,
        ratio=1.05,
        low=low,
        high=1.10,
        runs=4,
    )
    verdict = judge([arm], rounds=4, starts=8, gpu_hours=1.5, spec=ConfirmSpec())
    return dataclasses.replace(report, verdict=verdict, best=row)


def test_the_first_line_is_the_verdict_with_its_deciding_digits(seed_study: StudyRun) -> None:
    pays, noise = _confirmed(seed_study, 1.004), _confirmed(seed_study, 0.995)
    assert pays.verdict is not None and pays.verdict.kind == "pays"
    assert noise.verdict is not None and noise.verdict.kind == "noise"
    first = format_report(pays).splitlines()[0]
    assert first == pays.verdict.headline
    assert "x1.05 [1.004, 1.10]" in first
    assert "x1.05 [0.995, 1.10]" in format_report(noise).splitlines()[0]
    data = json.loads(json.dumps(pays.to_dict()))
    assert data["verdict"]["headline"] == first
    assert (data["verdict"]["leader"]["low"], data["verdict"]["kind"]) == (1.004, "pays")
