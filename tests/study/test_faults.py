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

from ._lab import CONFIGS, Run, StudyLab, attrs_of, no_traceback

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


def _private_tmpfs(folder: Path, options: str, *, before: str = "", after: str = "") -> list[str]:
    """A command prefix that runs the tuner with a tmpfs of ``options`` mounted on ``folder``,
    in a mount namespace of its own (nothing is mounted on this machine); skips the test where
    namespaces are not allowed. ``before``: shell commands run once it is mounted (``... &&``);
    ``after``: run once the tuner exited, while the tmpfs is still there (it vanishes with the
    namespace: copy out what the test reads)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare(1) is not installed")
    probe = [unshare, "--user", "--map-root-user", "--mount", "true"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        probe = [unshare, "--mount", "true"]
        if subprocess.run(probe, capture_output=True).returncode != 0:
            pytest.skip("mount namespaces are not allowed here (needed for a tiny tmpfs)")
    folder.mkdir(parents=True, exist_ok=True)
    script = f'mount -t tmpfs -o {options} tmpfs "{folder}" || exit 97; {before}'
    script += f'"$@"; rc=$?; {after}; exit $rc' if after else 'exec "$@"'
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


# --- a disk that fills up while the study runs --------------------------------------------------

#: A tmpfs just above the free space a study needs to start (MIN_FREE_BYTES, 200 MiB), filled
#: to the last byte (zeros, in memory) as soon as the second trial begins.
FILLED_LATER = "size=230m"


def _fill_when(folder: Path, trigger: Path) -> str:
    """Shell: in the background, fill ``folder``'s disk once ``trigger`` exists (waiting 150 s
    at most; its output away from the tuner's, whose end the test waits for)."""
    return (
        f'( i=0; while [ ! -e "{trigger}" ] && [ $i -lt 3000 ]; do sleep 0.05; i=$((i+1)); '
        f'done; [ -e "{trigger}" ] && dd if=/dev/zero of="{folder}/filler" bs=1M ) '
        ">/dev/null 2>&1 & "
    )


def _stopped_once_cleanly(run: Run, name: str) -> None:
    assert run.rc == 1, run.show()
    no_traceback(run)
    assert "Logging error" not in run.err, run.show()
    assert run.err.count("autotune: error:") == 1, run.show()
    assert "the disk filled up during study" in run.err, run.show()
    assert f"autotune study resume --study-name {name}" in run.err
    assert "free some space" in run.err


def test_disk_filling_up_mid_study_stops_it_with_one_message(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    """The study's own disk (database, artifacts, logs) fills during trial 1: before, about ten
    ENOSPC tracebacks and the trial left RUNNING. Now one message; the trial is recorded where
    the database still takes it, else ``study resume`` recovers it, and nothing finished is
    lost."""
    fault_tried("disk filling up mid-study")
    space = lab.space("filling", configs=CONFIGS[:2])
    saved = lab.root / "saved"
    saved.mkdir()
    trigger = lab.studies / "filling-artifacts" / "trials" / "0001"
    wrap = _private_tmpfs(
        lab.studies,
        FILLED_LATER,
        before=_fill_when(lab.studies, trigger),
        after=f'rm -f "{lab.studies}/filler"; cp -a "{lab.studies}/." "{saved}/"',
    )
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "3", wrap=wrap)
    _stopped_once_cleanly(run, "filling")
    shutil.copytree(saved, lab.studies, dirs_exist_ok=True)  # what the full disk held
    trials = {t.number: t for t in lab.trials("filling")}
    assert trials[0].state.name == "COMPLETE"  # finished before the disk filled: kept
    one = trials[1]
    if one.state.name == "FAIL":  # the database took the record
        assert one.user_attrs["outcome"] == "interrupted"
        assert "trial 1 was recorded as interrupted" in run.err
    else:  # it did not: the trial is left to resume, which recovers it
        assert one.state.name == "RUNNING", one
        assert "`study resume` recovers it" in run.err

    again = lab.cli("study", "resume", "--study-name", "filling")
    assert again.rc == 0, again.show()
    no_traceback(again)
    assert "3 of 3 trials finished" in again.out
    states = [t.state.name for t in lab.trials("filling")]
    assert "RUNNING" not in states and "WAITING" not in states, states
    reruns = [t for t in lab.finished("filling") if t.user_attrs.get("autotune:rerun_of") == 1]
    assert len(reruns) == 1, "trial 1 did not run again"


def test_artifact_disk_filling_up_records_the_trial(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    """The artifacts' disk fills during trial 1 while the database's does not: one message, and
    the trial recorded as interrupted with its re-run queued (nothing left RUNNING).

    Where the server's own log meets the full disk first, the tuner sees no error: the server
    never logs that it is ready and the trial is recorded as a start-up timeout. That outcome is
    accepted here (recorded, no traceback, nothing RUNNING); checking the free space before each
    launch, as ``study start`` does once, would turn it into the clean stop too (follow-up)."""
    fault_tried("artifact disk filling up mid-study")
    space = lab.space("arts", configs=CONFIGS[:2])
    artifacts = lab.root / "artifacts"
    wrap = _private_tmpfs(
        artifacts, FILLED_LATER, before=_fill_when(artifacts, artifacts / "trials" / "0001")
    )
    run = lab.cli(
        "study", "start", "--space", str(space), "--n-trials", "3",
        "--artifacts-dir", str(artifacts), wrap=wrap,
    )  # fmt: skip
    if run.rc == 0:  # the server's log filled first: timeouts, recorded (see the docstring)
        no_traceback(run)
        states = [t.state.name for t in lab.trials("arts")]
        assert states.count("RUNNING") == 0 and len(lab.finished("arts")) == 3, states
        return
    _stopped_once_cleanly(run, "arts")
    assert "trial 1 was recorded as interrupted and runs again on resume" in run.err
    # (naming the disk that filled, not the database's, is best effort: see _stop_on_full_disk)
    trials = {t.number: t for t in lab.trials("arts")}
    assert trials[0].state.name == "COMPLETE"
    assert trials[1].state.name == "FAIL"
    assert trials[1].user_attrs["outcome"] == "interrupted"
    assert "disk filled up" in trials[1].user_attrs["failure_line"]
    waiting = [t for t in trials.values() if t.state.name == "WAITING"]
    # the re-run of trial 1, once, beside the space's configurations still queued
    assert [t.user_attrs.get("autotune:rerun_of") for t in waiting].count(1) == 1
    assert not [t for t in trials.values() if t.state.name == "RUNNING"]
