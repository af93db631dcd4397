"""``autotune dashboard``: optuna-dashboard on a study that ``autotune study start`` ran, served
by a real subprocess and read over HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
from study._helpers import StudyRun, run_cli

from ._browser import serve_dashboard as _dashboard
from .conftest import SEED_TRIALS


def test_dashboard_serves_the_study_and_its_artifacts(seed_study: StudyRun) -> None:
    plain = seed_study.load()
    with _dashboard(*seed_study.cli_args()) as (url, _):
        listed = httpx.get(f"{url}/api/studies", timeout=10).json()["study_summaries"]
        assert [s["study_name"] for s in listed] == ["seed"]
        study_id = listed[0]["study_id"]

        detail = httpx.get(f"{url}/api/studies/{study_id}", timeout=30).json()
        trials = detail["trials"]
        assert [t["number"] for t in trials] == list(range(SEED_TRIALS))
        states = {t["number"]: t["state"] for t in trials}
        assert states == {t.number: t.state.name.capitalize() for t in plain.trials}
        attrs = {a["key"]: a["value"] for a in trials[0]["user_attrs"]}
        assert attrs["role"] == "baseline" and attrs["outcome"] == "ok"

        baseline = trials[0]
        names = {a["filename"]: a for a in baseline["artifacts"]}
        assert set(names) == {"server.log", "benchmark.json"}
        log = names["server.log"]
        got = httpx.get(
            f"{url}/artifacts/{study_id}/{baseline['trial_id']}/{log['artifact_id']}", timeout=10
        )
        assert got.status_code == 200
        stored = (seed_study.artifacts_dir / log["artifact_id"]).read_text(encoding="utf-8")
        assert got.text == stored and stored.strip()

        refused = trials[3]
        assert refused["state"] == "Pruned" and refused["artifacts"] == []


def test_dashboard_picks_the_only_study_of_the_folder(seed_study: StudyRun) -> None:
    with _dashboard("--studies-dir", str(seed_study.studies_dir)) as (url, proc):
        listed = httpx.get(f"{url}/api/studies", timeout=10).json()["study_summaries"]
        assert [s["study_name"] for s in listed] == ["seed"]
        assert proc.poll() is None


def test_dashboard_without_a_study_says_which_to_give(tmp_path: Path) -> None:
    run = run_cli("dashboard", "--studies-dir", str(tmp_path), "--port", "1", timeout=60)
    assert run.returncode == 2, run.describe()
    assert "which study? 0 study databases" in run.stderr
    assert "--study-name" in run.stderr and "Traceback" not in run.stderr

    named = run_cli(
        "dashboard",
        "--study-name",
        "absent",
        "--studies-dir",
        str(tmp_path),
        "--port",
        "1",
        timeout=60,
    )
    assert named.returncode == 2, named.describe()
    assert "no study database" in named.stderr and "absent.db" in named.stderr
    assert not (tmp_path / "absent.db").exists()


def test_dashboard_refuses_a_busy_port(seed_study: StudyRun) -> None:
    with _dashboard(*seed_study.cli_args()) as (url, _):
        port = url.rsplit(":", 1)[1]
        second = run_cli("dashboard", *seed_study.cli_args(), "--port", port, timeout=60)
    assert second.returncode == 2, second.describe()
    assert f"port {port}" in second.stderr and "already in use" in second.stderr
