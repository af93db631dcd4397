"""A study whose servers run inside a container (a launch prefix into a real PID namespace):
no server is left there after a trial, after Ctrl-C, or after a ``kill -9`` of the tuner once
the study is resumed."""

from __future__ import annotations

import shlex
import signal
import sys
from collections.abc import Iterator

import pytest
from server._box import Box

from ._lab import CONFIGS, StudyLab, attrs_of, no_traceback
from ._scenarios import PROCESS, _running

SLOW = "slow_start:20"


@pytest.fixture
def box() -> Iterator[Box]:
    made = Box()
    try:
        yield made
    finally:
        made.close()


def _servers_inside(box: Box) -> list[str]:
    """The simulated servers inside (not their launcher, whose arguments name them too)."""
    found = box.processes()
    return [line for line in found if "autotune.sim" in line and "autotune-launcher" not in line]


def test_a_trial_runs_its_server_inside_and_leaves_nothing_there(lab: StudyLab, box: Box) -> None:
    name = "boxed"
    space = lab.space(name, baseline=False, configs=CONFIGS[:1], launch_prefix=box.prefix)
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "1")
    lab.wait_for("a server inside the box", lambda: _servers_inside(box))
    run = lab.finish(tuner, timeout=120)
    assert run.rc == 0, run.err
    (trial,) = lab.finished(name)
    assert attrs_of(trial)["outcome"] == "ok"
    assert attrs_of(trial)["command"].startswith(shlex.join(box.prefix) + " ")
    assert box.wait_empty() == []


def test_ctrl_c_stops_the_server_inside(lab: StudyLab, box: Box) -> None:
    name = "boxed-int"
    space = lab.space(
        name, faults=[SLOW], baseline=False, configs=CONFIGS[:1], launch_prefix=box.prefix
    )
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "1")
    lab.wait_for("a server inside the box", lambda: _servers_inside(box))
    tuner.send_signal(signal.SIGINT)
    run = lab.finish(tuner, timeout=60)
    assert run.rc == 130, run.err
    assert "Traceback" not in run.err and "stopped by SIGINT" in run.err
    assert box.wait_empty() == []
    (failed,) = [t for t in lab.trials(name) if t.state.name == "FAIL"]
    assert attrs_of(failed)["outcome"] == "interrupted"


def test_resume_after_kill_9_stops_the_server_left_inside(lab: StudyLab, box: Box) -> None:
    name = "boxed-kill"
    space = lab.space(
        name, faults=[SLOW], baseline=False, configs=CONFIGS[:2], launch_prefix=box.prefix
    )
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "2")
    lab.wait_for("a server inside the box", lambda: _servers_inside(box))
    lab.wait_for("the server's process record", lambda: _running(lab, name, None, PROCESS))
    tuner.kill()
    tuner.wait(timeout=30)
    # the tuner is gone; the server inside is not, and nothing on this host leads to it
    assert _servers_inside(box)
    (stale,) = [t for t in lab.trials(name) if t.state.name == "RUNNING"]
    assert stale.system_attrs[PROCESS]["launch_prefix"] == box.prefix

    run = lab.cli("study", "resume", "--study-name", name)

    assert run.rc == 0, run.show()
    no_traceback(run)
    assert "its server was still running and has been stopped" in run.err, run.show()
    assert "2 of 2 trials finished" in run.out
    assert box.wait_empty() == []


def test_a_second_ctrl_c_kills_a_server_inside_that_ignores_sigterm_at_once(
    lab: StudyLab, box: Box
) -> None:
    # inside, the simulated server obeys SIGTERM; its interpreter's wrapper does not
    python = sys.executable
    wrapper = lab.write(
        "stubborn-python", f"#!/bin/sh\ntrap '' TERM\n{python} \"$@\"\nexec sleep 600\n"
    )
    wrapper.chmod(0o755)
    name = "boxed-stubborn"
    space = lab.space(
        name,
        faults=[SLOW],
        baseline=False,
        configs=CONFIGS[:1],
        stop_s=120,
        python=str(wrapper),
        launch_prefix=box.prefix,
    )
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "1")
    log = lab.studies / f"{name}-artifacts" / "trials" / "0000" / "server.log"
    lab.wait_for(  # its SIGTERM handler is in place
        "the server's start-up", lambda: log.exists() and "Load weight" in log.read_text()
    )
    tuner.send_signal(signal.SIGINT)
    lab.wait_for("the simulated server to obey SIGTERM", lambda: not _servers_inside(box))
    assert tuner.poll() is None, "the tuner did not wait for the rest of its server to stop"
    assert [line for line in box.processes() if "sleep 600" in line]
    tuner.send_signal(signal.SIGINT)
    run = lab.finish(tuner, timeout=60)  # well before the 120 s stop timeout
    assert run.rc == 130, run.err
    assert box.wait_empty() == []
