"""The report of a study (build_report, format_report, the tables, list_studies) on studies that
``autotune study start`` ran into real SQLite files, checked against plain Optuna."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from study._helpers import (
    SEED_FAILURES,
    StudyRun,
    best_measured,
    finished_trials,
    small_space,
    start_study,
)

from autotune._errors import StorageError
from autotune.report import (
    best_trials_table,
    build_report,
    crash_table,
    format_report,
    list_studies,
    load_study,
)

from .conftest import SEED_TRIALS


def _copy_db(run: StudyRun, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / run.db.name
    with sqlite3.connect(run.db) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    return target


def test_report_matches_the_trials(seed_study: StudyRun) -> None:
    study, paths = load_study("seed", studies_dir=seed_study.studies_dir)
    report = build_report(study, paths)
    plain = seed_study.load()
    trials = finished_trials(plain)

    assert report.study_name == "seed"
    assert report.storage_url == seed_study.storage_url
    assert (report.metric, report.direction) == ("output_tok_s", "maximize")
    assert (report.finished, report.target, report.running, report.failed) == (
        SEED_TRIALS,
        SEED_TRIALS,
        0,
        0,
    )
    assert report.outcomes == dict(Counter(t.user_attrs["outcome"] for t in trials))
    assert [r.number for r in report.rows] == list(range(SEED_TRIALS))
    assert report.baseline_value == trials[0].value
    assert report.refused_before_launch == plain.user_attrs.get("autotune:refused", {})

    best = best_measured(plain)
    assert best is not None and report.best is not None
    assert report.best.number == best.number
    assert report.best.value == best.value
    assert report.best.config == best.user_attrs["config"]
    assert report.best_command == best.user_attrs["command"]
    assert report.best_sglang_command == best.user_attrs["sglang_command"]
    assert "-m sglang.launch_server" in report.best_sglang_command


def test_rows_carry_the_failures(seed_study: StudyRun) -> None:
    study, paths = load_study("seed", studies_dir=seed_study.studies_dir)
    report = build_report(study, paths)
    rows = {r.number: r for r in report.rows}
    for number, (outcome, config) in enumerate(SEED_FAILURES, start=2):
        row = rows[number]
        assert row.outcome == outcome
        assert not row.measured and not row.feasible
        assert row.value is None and row.speedup is None
        assert {k: row.config[k] for k in config} == config
        assert row.failure_line
        assert row.advice
    assert "SM120" in rows[3].failure_line  # refused: the reason, not a log line
    assert rows[3].startup_s is None
    assert rows[2].startup_s is not None and rows[2].startup_s > 0
    assert rows[0].accept_length is None and rows[0].speedup == 1.0
    assert rows[1].accept_length is not None and rows[1].accept_length >= 1.0
    assert report.crashes() == {k: v for k, v in report.outcomes.items() if k != "ok"}
    assert set(report.crashes()) >= {"oom_kv_pool", "infeasible", "oom_cuda_graph"}


def test_top_trials_are_ranked(seed_study: StudyRun) -> None:
    study, paths = load_study("seed", studies_dir=seed_study.studies_dir)
    report = build_report(study, paths)
    measured = [r for r in report.rows if r.outcome == "ok"]

    everything = report.top(100)
    assert sorted(r.number for r in everything) == sorted(r.number for r in measured)
    values = [r.value for r in everything]
    assert values == sorted(values, reverse=True)
    assert everything[0] == report.best
    assert report.top(2) == everything[:2]


def test_report_serialises(seed_study: StudyRun) -> None:
    study, paths = load_study("seed", studies_dir=seed_study.studies_dir)
    data = json.loads(json.dumps(build_report(study, paths).to_dict()))
    assert data["best"]["number"] == best_measured(seed_study.load()).number  # type: ignore[union-attr]
    assert len(data["rows"]) == SEED_TRIALS
    assert data["rows"][3]["outcome"] == "infeasible"


def test_format_report(seed_study: StudyRun) -> None:
    study, paths = load_study("seed", studies_dir=seed_study.studies_dir)
    report = build_report(study, paths)
    text = format_report(report)
    lines = text.splitlines()
    best = report.best
    assert best is not None and best.value is not None and report.baseline_value is not None

    # not confirmed (the session study turns confirmation off): the first line says so
    assert report.verdict is None
    assert lines[0].startswith("not confirmed: the best of single measurements below")
    assert lines[0].endswith("run `autotune study confirm --study-name seed`")
    assert lines[1] == f"study seed  ({seed_study.storage_url})"
    assert lines[2] == f"trials: {SEED_TRIALS} finished of {SEED_TRIALS}"
    assert lines[3] == f"baseline (no speculation): {report.baseline_value:.2f} output_tok_s"
    assert lines[4].startswith(f"best: trial {best.number} ({best.role}): {best.value:.2f}")
    for key, value in best.config.items():
        assert f"    {key} = {value}" in lines
    assert lines[lines.index("launch it with:") + 1] == f"    {report.best_sglang_command}"
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(report.outcomes.items()))
    assert f"outcomes: {outcomes}" in lines


def test_tables(seed_study: StudyRun) -> None:
    study, paths = load_study("seed", studies_dir=seed_study.studies_dir)
    report = build_report(study, paths)

    best = best_trials_table(report, n=3)
    assert [int(row[0]) for row in best.rows] == [r.number for r in report.top(3)]
    assert best.columns[:5] == ("trial", "role", "output_tok_s", "speed-up", "accept length")
    assert "mem_fraction_static" in best.columns and "allreduce" in best.columns
    markdown = best.to_markdown().splitlines()
    assert markdown[2].startswith("| trial | role | output_tok_s |")
    assert len(markdown) == 4 + len(best.rows)
    assert f"{report.best.value:.2f}" in best.rows[0]  # type: ignore[union-attr]

    crashes = crash_table(report)
    by_outcome = {row[0]: row for row in crashes.rows}
    assert set(by_outcome) == set(report.crashes())
    assert by_outcome["infeasible"][2].split(", ")[0] == "3"
    assert "oom_kv_pool" in by_outcome and by_outcome["oom_kv_pool"][3]
    text = str(crashes).splitlines()
    assert text[1].split() == [
        "outcome",
        "trials",
        "trial",
        "numbers",
        "what",
        "to",
        "do",
        "evidence",
    ]


def test_report_of_a_study_that_measured_nothing(tmp_path: Path) -> None:
    crash = dict(SEED_FAILURES[0][1])
    space = small_space(
        tmp_path,
        "eagle3.yaml",
        time_scale=0.0005,
        edit={"enqueue": {"baseline": False, "configs": [crash]}},
    )
    run = start_study(space, "crashed", 1, tmp_path / "studies", "--no-informed")

    study, paths = load_study("crashed", studies_dir=run.studies_dir)
    report = build_report(study, paths)
    assert report.best is None and report.baseline_value is None
    assert report.outcomes == {"oom_kv_pool": 1}
    text = format_report(report)
    assert "baseline: not measured" in text
    assert "best: no configuration was measured yet" in text
    assert "launch it with" not in text
    assert best_trials_table(report).rows == ()
    assert "(none)" in str(best_trials_table(report))
    assert [row[:3] for row in crash_table(report).rows] == [("oom_kv_pool", "1", "0")]


def test_running_and_interrupted_trials_are_counted(seed_study: StudyRun, tmp_path: Path) -> None:
    db = _copy_db(seed_study, tmp_path / "copy")
    plain = optuna.load_study(study_name="seed", storage=f"sqlite:///{db}")
    plain.ask()  # another worker's trial, still running
    interrupted = plain.ask()
    interrupted.set_user_attr("outcome", "interrupted")
    plain.tell(interrupted, state=TrialState.FAIL)
    never_ran = plain.ask()
    never_ran.set_user_attr("outcome", "surplus")
    plain.tell(never_ran, state=TrialState.FAIL)

    study, paths = load_study("seed", studies_dir=db.parent)
    report = build_report(study, paths)
    assert (report.finished, report.running, report.failed) == (SEED_TRIALS, 1, 1)
    first = format_report(report).splitlines()[2]
    assert first == f"trials: {SEED_TRIALS} finished of {SEED_TRIALS}, 1 running, 1 interrupted"


def test_load_study_errors(seed_study: StudyRun, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="no study database") as missing:
        load_study("absent", studies_dir=tmp_path / "nowhere")
    assert "autotune study list" in str(missing.value)
    assert not (tmp_path / "nowhere" / "absent.db").exists()

    db = _copy_db(seed_study, tmp_path / "renamed")
    db.rename(db.with_name("other.db"))
    with pytest.raises(StorageError, match="no study named 'other'") as wrong:
        load_study("other", studies_dir=db.parent)
    assert "studies there: seed" in str(wrong.value)


def test_list_studies(seed_study: StudyRun, tmp_path: Path) -> None:
    study, paths = load_study("seed", studies_dir=seed_study.studies_dir)
    best = build_report(study, paths).best
    assert best is not None

    infos = list_studies(studies_dir=seed_study.studies_dir)
    assert [(i.name, i.finished, i.running, i.direction) for i in infos] == [
        ("seed", SEED_TRIALS, 0, "maximize")
    ]
    assert infos[0].best_value == best.value
    assert infos[0].storage_url == seed_study.storage_url
    assert list_studies(storage=seed_study.storage_url) == infos

    assert list_studies(studies_dir=tmp_path / "empty") == []
    with pytest.raises(StorageError, match="no study database"):
        list_studies(storage=f"sqlite:///{tmp_path / 'typo.db'}")
    assert not (tmp_path / "typo.db").exists()


def test_report_of_a_latency_objective(tmp_path: Path) -> None:
    space = small_space(tmp_path, edit={"objective": {"metric": "itl_p99_ms"}})
    run = start_study(space, "latency", 3, tmp_path / "studies", "--seed", "1")

    study, paths = load_study("latency", studies_dir=run.studies_dir)
    report = build_report(study, paths)
    plain = run.load()
    best = best_measured(plain)
    assert best is not None and report.best is not None
    assert (report.metric, report.direction) == ("itl_p99_ms", "minimize")
    assert report.best.number == best.number
    values = [r.value for r in report.top()]
    assert values == sorted(values) and values[0] == min(
        t.value for t in finished_trials(plain) if t.value is not None
    )
    baseline = report.baseline_value
    assert baseline is not None and report.best.value is not None
    assert report.best.speedup == pytest.approx(baseline / report.best.value, abs=2e-4)
    assert (
        f"best: trial {best.number} ({report.best.role}): {report.best.value:.2f} itl_p99_ms"
        in (format_report(report))
    )
