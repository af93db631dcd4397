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


_SERVE_AND_ASK = """
import json, subprocess, sys, time
import httpx
port, folder = sys.argv[1], sys.argv[2]
argv = [sys.executable, "-m", "autotune", "dashboard", "--study-name", "seed",
        "--studies-dir", folder, "--port", port]
proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
answer = None
try:
    for _ in range(300):
        if proc.poll() is not None:
            break
        try:
            got = httpx.get(f"http://127.0.0.1:{port}/api/studies", timeout=2)
        except httpx.TransportError:
            got = None
        if got is not None and got.status_code == 200:
            answer = got.json()
            break
        time.sleep(0.2)
finally:
    if proc.poll() is None:
        proc.terminate()
    out, err = proc.communicate(timeout=20)
print(json.dumps({"answer": answer, "out": out, "err": err}))
"""


def test_a_study_in_a_read_only_folder_is_served_read_only(
    seed_study: StudyRun, tmp_path: Path
) -> None:
    """A study folder that cannot be written (a read-only filesystem: as root, chmod is no
    bar) opens, as `study report` opens it."""
    import json
    import shutil
    import subprocess
    import sys

    from study._helpers import free_port
    from study.test_faults import _private_tmpfs

    staged = tmp_path / "staged"
    shutil.copytree(seed_study.studies_dir, staged)
    folder = tmp_path / "frozen"
    wrap = _private_tmpfs(
        folder,
        "size=50m",
        before=f'cp -a "{staged}/." "{folder}/" && mount -o remount,ro "{folder}" && ',
    )
    script = tmp_path / "serve_and_ask.py"
    script.write_text(_SERVE_AND_ASK)
    done = subprocess.run(
        [*wrap, sys.executable, str(script), str(free_port()), str(folder)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["answer"] is not None, result
    assert [s["study_name"] for s in result["answer"]["study_summaries"]] == ["seed"]
    assert "read-only" in result["out"] + result["err"], result
    assert "Traceback" not in result["err"], result
