"""Ctrl-C and SIGTERM to a running study: the server is stopped, the running trial is recorded
honestly and queued again, the tuner exits with 130 and a message; resuming runs it again."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from autotune.study._interrupts import Interrupts

from ._lab import CONFIGS, StudyLab, attrs_of, no_traceback

#: A simulated start-up of a few seconds: long enough to be interrupted, short enough to rerun.
SLOW = "slow_start:20"


def _server_log(lab: StudyLab, name: str, number: int) -> Path:
    return lab.studies / f"{name}-artifacts" / "trials" / f"{number:04d}" / "server.log"


def _logged(path: Path, text: str) -> Callable[[], bool]:
    return lambda: path.exists() and text in path.read_text(errors="replace")


def _interrupted_trial(lab: StudyLab, name: str, signame: str) -> dict[str, object]:
    trials = lab.trials(name)
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert len(failed) == 1, [(t.number, t.state.name) for t in trials]
    assert not [t for t in trials if t.state.name == "RUNNING"]
    attrs = attrs_of(failed[0])
    assert attrs["outcome"] == "interrupted"
    assert attrs["failure_line"] == f"interrupted by {signame}"
    assert failed[0].params == CONFIGS[0]
    waiting = [t for t in trials if t.state.name == "WAITING"]
    assert any(t.user_attrs.get("role") == "rerun" for t in waiting), "not queued again"
    return attrs


def _assert_clean_exit(run_rc: int, err: str, signame: str, name: str) -> None:
    assert run_rc == 130, err
    assert "Traceback" not in err
    assert f"stopped by {signame}" in err
    assert f"autotune study resume --study-name {name}" in err


@pytest.mark.parametrize(
    ("signum", "phase"),
    [
        pytest.param(signal.SIGINT, "startup", id="SIGINT-startup"),
        pytest.param(signal.SIGTERM, "startup", id="SIGTERM-startup"),
        pytest.param(signal.SIGINT, "benchmark", id="SIGINT-benchmark"),
    ],
)
def test_signal_stops_the_server_records_the_trial_and_resume_reruns_it(
    lab: StudyLab, fault_tried: Callable[[str], None], signum: int, phase: str
) -> None:
    signame = signal.Signals(signum).name
    fault_tried(f"{signame} during {phase}")
    name = f"sig-{phase}"
    # during the start-up: a slow one; during the benchmark: a stream that stalls until stopped
    faults = [SLOW] if phase == "startup" else ["stall_stream:1"]
    space = lab.space(name, faults=faults, baseline=False, configs=CONFIGS[:2], request_s=300)
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "2", "--seed", "1")
    server = lab.wait_server()
    if phase == "benchmark":
        log = _server_log(lab, name, 0)
        lab.wait_for("the benchmark", _logged(log, "POST /generate"))
    assert tuner.poll() is None
    tuner.send_signal(signum)
    run = lab.finish(tuner, timeout=60)
    _assert_clean_exit(run.rc, run.err, signame, name)
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    lab.check_no_servers("after the interrupted tuner exited")
    _interrupted_trial(lab, name, signame)

    # the engine section may change between runs: resume without the fault
    clean = lab.space(name, baseline=False, configs=CONFIGS[:2], file="clean.yaml")
    args = ["study", "resume", "--study-name", name]
    resumed = lab.cli(*args, *(["--space", str(clean)] if phase == "benchmark" else []))
    assert resumed.rc == 0, resumed.show()
    no_traceback(resumed)
    assert "2 of 2 trials finished" in resumed.out
    finished = lab.finished(name)
    assert len(finished) == 2
    rerun = [t for t in finished if t.user_attrs.get("role") == "rerun"]
    assert len(rerun) == 1
    assert rerun[0].params == CONFIGS[0]
    assert rerun[0].user_attrs["autotune:rerun_of"] == 0
    assert sorted(str(t.params) for t in finished) == sorted(str(c) for c in CONFIGS[:2])


def test_second_signal_during_cleanup_kills_the_server_at_once(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("second SIGINT during clean-up")
    # A server whose launcher ignores SIGTERM: a normal stop waits stop_s (120 s) for it.
    python = sys.executable
    wrapper = lab.write(
        "stubborn-python",
        f"#!/bin/sh\ntrap '' TERM\n{python} \"$@\"\nexec sleep 600\n",
    )
    wrapper.chmod(0o755)
    name = "stubborn"
    space = lab.space(
        name, faults=[SLOW], baseline=False, configs=CONFIGS[:1], stop_s=120, python=str(wrapper)
    )
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "1")
    lab.wait_for("the server's start-up", _logged(_server_log(lab, name, 0), "Load weight"))
    tuner.send_signal(signal.SIGINT)
    # the simulated server obeys SIGTERM; its launcher does not: the clean-up now waits
    lab.wait_for(
        "the stop to begin",
        lambda: all("autotune.sim" not in " ".join(p.cmdline()) for p in lab.servers()),
    )
    time.sleep(1.0)
    assert tuner.poll() is None, "the tuner did not wait for its server to stop"
    assert lab.servers(), "the launcher should still be running"
    tuner.send_signal(signal.SIGINT)
    run = lab.finish(tuner, timeout=60)  # well before the 120 s stop timeout
    _assert_clean_exit(run.rc, run.err, "SIGINT", name)
    lab.check_no_servers("after the forced stop")
    attrs = _interrupted_trial(lab, name, "SIGINT")
    assert attrs["role"] == "enqueued"


def test_a_signal_during_a_launch_takes_effect_once_the_server_is_recorded() -> None:
    """Ctrl-C between the start of a server and its record would leave a server nobody knows
    of: it is held back until the block that launches and records the server ends."""
    interrupts = Interrupts()
    done = []
    with interrupts.installed(), pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler runs here, and must not interrupt the block
            done.append("recorded")
        done.append("not reached")
    assert done == ["recorded"]
    assert interrupts.signal_name == "SIGINT"
    with interrupts.installed(), interrupts.deferred():
        pass  # nothing pending any more
