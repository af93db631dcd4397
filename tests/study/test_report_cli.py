"""``autotune study status``, ``list`` and ``report`` as a user runs them, on a small study of the
H100 space, checked against what plain Optuna reads from the same SQLite file."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import optuna
import pytest

from ._helpers import StudyRun, best_measured, finished_trials, run_cli, small_space, start_study

TRIALS = 5


@pytest.fixture(scope="module")
def h100_study(tmp_path_factory: pytest.TempPathFactory) -> StudyRun:
    root = tmp_path_factory.mktemp("h100")
    return start_study(small_space(root), "h100", TRIALS, root / "studies", "--seed", "2")


def test_start_prints_where_to_look(h100_study: StudyRun) -> None:
    out = h100_study.start.stdout
    assert f"h100: {TRIALS} of {TRIALS} trials finished" in out
    assert "autotune study report --study-name h100" in out
    assert "autotune dashboard --study-name h100" in out


def test_status(h100_study: StudyRun) -> None:
    study = h100_study.load()
    best = best_measured(study)
    assert best is not None and best.value is not None

    run = run_cli("study", "status", *h100_study.cli_args())

    assert run.returncode == 0, run.describe()
    lines = run.stdout.splitlines()
    assert lines[0] == (
        f"h100: {TRIALS}/{TRIALS} finished, 0 running, 0 interrupted; "
        f"best output_tok_s {best.value:.2f}"
    )
    expected = []
    for t in finished_trials(study)[-5:]:
        value = "" if t.value is None else f" {t.value:.2f}"
        expected.append(
            f"  trial {t.number} [{t.user_attrs['role']}] {t.user_attrs['outcome']}{value}"
        )
    # the study's tuner ended: not running (issue 42: running, dead or confirming, said)
    assert lines[1].startswith("  not running: its last tuner ended at "), run.describe()
    assert lines[2:] == expected


def test_list(h100_study: StudyRun, tmp_path: Path) -> None:
    best = best_measured(h100_study.load())
    assert best is not None and best.value is not None

    run = run_cli("study", "list", "--studies-dir", str(h100_study.studies_dir))
    assert run.returncode == 0, run.describe()
    assert run.stdout.splitlines() == [
        f"h100: {TRIALS} finished, 0 running, best {best.value:.2f}  ({h100_study.storage_url})"
    ]

    # a second database in the folder: a study made with Optuna alone, nothing run yet
    other = h100_study.studies_dir / "other.db"
    try:
        optuna.create_study(study_name="plain", storage=f"sqlite:///{other}")
        both = run_cli("study", "list", "--studies-dir", str(h100_study.studies_dir))
        assert both.returncode == 0, both.describe()
        assert both.stdout.splitlines() == [
            f"h100: {TRIALS} finished, 0 running, best {best.value:.2f}  "
            f"({h100_study.storage_url})",
            f"plain: 0 finished, 0 running, best -  (sqlite:///{other})",
        ]
    finally:
        other.unlink(missing_ok=True)

    empty = run_cli("study", "list", "--studies-dir", str(tmp_path / "none"))
    assert empty.returncode == 0, empty.describe()
    assert empty.stdout.strip() == "no studies found"

    typo = run_cli("study", "list", "--storage", f"sqlite:///{tmp_path / 'typo.db'}")
    assert typo.returncode != 0
    assert "no study database" in typo.stderr
    assert not (tmp_path / "typo.db").exists()


def test_report_json(h100_study: StudyRun) -> None:
    study = h100_study.load()
    trials = finished_trials(study)
    best = best_measured(study)
    assert best is not None

    run = run_cli("study", "report", *h100_study.cli_args(), "--json")

    assert run.returncode == 0, run.describe()
    data = json.loads(run.stdout)
    assert data["study_name"] == "h100"
    assert data["storage_url"] == h100_study.storage_url
    assert (data["metric"], data["direction"]) == ("output_tok_s", "maximize")
    assert (data["finished"], data["target"], data["running"], data["failed"]) == (
        TRIALS,
        TRIALS,
        0,
        0,
    )
    assert data["baseline_value"] == trials[0].value
    assert data["outcomes"] == dict(Counter(t.user_attrs["outcome"] for t in trials))
    assert data["refused_before_launch"] == study.user_attrs.get("autotune:refused", {})

    assert data["best"]["number"] == best.number
    assert data["best"]["value"] == best.value
    assert data["best"]["speedup"] == best.user_attrs["speedup"]
    assert data["best"]["config"] == best.user_attrs["config"]
    assert data["best_command"] == best.user_attrs["command"]
    assert data["best_sglang_command"] == best.user_attrs["sglang_command"]
    assert " -m sglang.launch_server " in data["best_sglang_command"]
    assert " -m autotune.sim " in data["best_command"]

    rows = data["rows"]
    assert [r["number"] for r in rows] == [t.number for t in trials]
    for row, t in zip(rows, trials, strict=True):
        assert row["outcome"] == t.user_attrs["outcome"]
        assert row["role"] == t.user_attrs["role"]
        assert row["value"] == t.value
        assert row["accept_length"] == t.user_attrs["accept_length"]
    assert rows[0]["role"] == "baseline" and rows[0]["accept_length"] is None


def test_report_text_names_the_best_and_its_command(h100_study: StudyRun) -> None:
    best = best_measured(h100_study.load())
    assert best is not None and best.value is not None

    run = run_cli("study", "report", *h100_study.cli_args())

    assert run.returncode == 0, run.describe()
    lines = run.stdout.splitlines()
    speedup = best.user_attrs["speedup"]
    assert (
        f"best: trial {best.number} ({best.user_attrs['role']}): {best.value:.2f} output_tok_s"
        f"  x{speedup:.2f} over the baseline"
    ) in lines
    assert lines[lines.index("launch it with:") + 1] == f"    {best.user_attrs['sglang_command']}"


def test_report_of_an_unknown_study(h100_study: StudyRun, tmp_path: Path) -> None:
    wrong = run_cli("study", "report", "--study-name", "nope", "--studies-dir", str(tmp_path))
    assert wrong.returncode != 0
    assert "no study database" in wrong.stderr and "autotune study list" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    assert not (tmp_path / "nope.db").exists()

    status = run_cli("study", "status", "--study-name", "nope", "--storage", h100_study.storage_url)
    assert status.returncode != 0
    assert "no study named 'nope'" in status.stderr and "studies there: h100" in status.stderr
