"""A misbehaving server, through the simulator's injected faults, and a machine that gets in the
way (a busy port, an unwritable or full disk): every trial ends with a clear record within its
timeouts, and nothing is launched where the study cannot keep its results."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autotune.study import CRASH_OUTCOMES

from ._lab import Run, StudyLab, attrs_of, no_traceback

Check = Callable[[Any, dict[str, Any]], None]


def _timed_out(trial: Any, attrs: dict[str, Any]) -> None:
    assert trial.state.name == "PRUNED"
    assert attrs["outcome"] == "timeout"
    assert attrs["startup_s"] >= 3.0
    assert "engine.timeouts.startup_s" in attrs["advice"]
    assert attrs["output_tok_s"] is None


def _ok(trial: Any, attrs: dict[str, Any]) -> None:
    assert trial.state.name == "COMPLETE", attrs
    assert attrs["outcome"] == "ok"
    assert attrs["output_tok_s"] > 0
    assert attrs["failed_requests"] == 0


def _crashed_mid_benchmark(trial: Any, attrs: dict[str, Any]) -> None:
    assert trial.state.name == "PRUNED"
    assert attrs["outcome"] in CRASH_OUTCOMES and attrs["outcome"] != "timeout"
    assert "CUDA error" in attrs["failure_line"]
    assert attrs["benchmark_error"]
    # what was measured before the crash is kept
    assert attrs["output_tok_s"] is not None and attrs["output_tok_s"] > 0
    assert attrs["ttft_p99_ms"] is not None
    assert attrs["failed_requests"] >= 1
    assert attrs["startup_s"] is not None


def _requests_failed(trial: Any, attrs: dict[str, Any]) -> None:
    assert trial.state.name in ("COMPLETE", "PRUNED")
    assert attrs["failed_requests"] >= 1, attrs
    if trial.state.name == "COMPLETE":
        assert attrs["outcome"] == "ok" and attrs["output_tok_s"] > 0
    else:
        assert attrs["outcome"] and attrs["failure_line"]


def _stalled(trial: Any, attrs: dict[str, Any]) -> None:
    _requests_failed(trial, attrs)
    # the silent stream was ended by the request timeout (3 s), not the benchmark's (300 s)
    assert attrs["benchmark_s"] < 150, attrs


FAULTS: dict[str, tuple[dict[str, Any], Check]] = {
    "hang_startup": ({"startup_s": 3.0}, _timed_out),
    "slow_start:4": ({"startup_s": 60.0}, _ok),
    "crash_mid_benchmark:2": ({}, _crashed_mid_benchmark),
    "stall_stream:2": ({"request_s": 3.0, "benchmark_s": 300.0}, _stalled),
    "refuse_connections": ({"startup_s": 3.0}, _timed_out),
    "garbage:2": ({}, _requests_failed),
    "http_500:2": ({}, _requests_failed),
    "drop_connection:2": ({}, _requests_failed),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_ends_the_trial_with_a_clear_record(
    lab: StudyLab, fault_tried: Callable[[str], None], fault: str
) -> None:
    fault_tried(fault)
    timeouts, check = FAULTS[fault]
    space = lab.space("faulty", faults=[fault], **timeouts)
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "1", timeout=240)
    assert run.rc == 0, run.show()
    assert "1 of 1 trials finished" in run.out
    no_traceback(run)
    (trial,) = lab.trials("faulty")
    attrs = attrs_of(trial)
    assert attrs["role"] == "baseline"
    assert "--sim-fault" in attrs["command"] and fault in attrs["command"]
    check(trial, attrs)
    assert attrs["stop_forced"] is False  # the server went on SIGTERM
    assert (lab.studies / "faulty-artifacts" / "trials" / "0000" / "server.log").exists()


def test_a_busy_port_is_skipped(lab: StudyLab, fault_tried: Callable[[str], None]) -> None:
    fault_tried("port in use")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        space = lab.space("busy", port=port, configs=[])
        run = lab.cli("study", "start", "--space", str(space), "--n-trials", "2", "--seed", "1")
        assert run.rc == 0, run.show()
    trials = lab.finished("busy")
    assert len(trials) == 2
    for trial in trials:
        attrs = attrs_of(trial)
        assert attrs["outcome"] == "ok", attrs
        assert "--port " in attrs["command"]
        assert f"--port {port} " not in attrs["command"]


# --- a disk that cannot take the study --------------------------------------------------------


def _private_tmpfs(folder: Path, options: str) -> list[str]:
    """A command prefix that runs the tuner with a tmpfs of ``options`` mounted on ``folder``,
    in a mount namespace of its own (nothing is mounted on this machine); skips the test where
    namespaces are not allowed."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare(1) is not installed")
    probe = [unshare, "--user", "--map-root-user", "--mount", "true"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        probe = [unshare, "--mount", "true"]
        if subprocess.run(probe, capture_output=True).returncode != 0:
            pytest.skip("mount namespaces are not allowed here (needed for a tiny tmpfs)")
    folder.mkdir(parents=True, exist_ok=True)
    script = f'mount -t tmpfs -o {options} tmpfs "{folder}" && exec "$@"'
    return [*probe[:-1], "sh", "-c", script, "sh"]


def _refused_before_launch(lab: StudyLab, run: Run, name: str) -> None:
    assert run.rc != 0, run.show()
    no_traceback(run)
    assert not (lab.studies / f"{name}.db").exists()
    assert not list(lab.root.rglob("server.log")), "a server was launched"


def test_unwritable_studies_folder_is_refused_before_launch(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("unwritable studies folder")
    space = lab.space("ro")
    if os.geteuid() != 0:
        lab.studies.mkdir()
        lab.studies.chmod(0o500)
        wrap: list[str] = []
    else:  # root writes anywhere: a read-only filesystem it is
        wrap = _private_tmpfs(lab.studies, "ro,size=1m")
    try:
        run = lab.cli("study", "start", "--space", str(space), "--n-trials", "1", wrap=wrap)
    finally:
        lab.studies.chmod(0o700)
    _refused_before_launch(lab, run, "ro")
    assert "cannot write the study folder" in run.err, run.show()
    assert str(lab.studies) in run.err
    assert "hint:" in run.err


def test_full_disk_is_refused_before_launch(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("disk too full")
    space = lab.space("full")
    wrap = _private_tmpfs(lab.studies, "size=1m")
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "1", wrap=wrap)
    _refused_before_launch(lab, run, "full")
    assert "MiB free on the disk of" in run.err, run.show()
    assert "a study needs at least" in run.err
    assert "free some space or choose another --studies-dir" in run.err
