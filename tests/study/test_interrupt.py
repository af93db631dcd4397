"""Ctrl-C, SIGTERM, SIGHUP and SIGQUIT to a running study: the server is stopped, the running
trial is recorded honestly and queued again, the tuner exits with 130 and a message; resuming
runs it again."""

from __future__ import annotations

import contextlib
import gc
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from autotune._errors import Cancelled
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
        # a closed terminal or a dropped ssh session; Ctrl-\ (issue 42: both left the server)
        pytest.param(signal.SIGHUP, "startup", id="SIGHUP-startup"),
        pytest.param(signal.SIGQUIT, "startup", id="SIGQUIT-startup"),
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
    of: it takes effect when the block that launches and records the server ends."""
    interrupts = Interrupts()
    done = []
    with interrupts.installed(), pytest.raises(Cancelled):
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler runs here, and must not interrupt the block
            done.append("recorded")
        done.append("not reached")
    assert done == ["recorded"]
    assert interrupts.signal_name == "SIGINT"
    with Interrupts().installed() as fresh, fresh.deferred():
        pass  # nothing pending


def test_the_handler_raises_nothing_even_inside_a_gc_callback() -> None:
    """A signal landing in a garbage-collection callback: an exception raised there would be
    printed ("Exception ignored in ...") and lost; the flag is not."""
    interrupts = Interrupts()
    raised: list[BaseException] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and not interrupts.interrupted:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                deadline = time.monotonic() + 2.0
                while not interrupts.interrupted and time.monotonic() < deadline:
                    time.sleep(0.01)
            except BaseException as e:  # what the old handler did
                raised.append(e)

    gc.callbacks.append(callback)
    try:
        with interrupts.installed():
            gc.collect()
            assert interrupts.interrupted
            assert interrupts.sleep(30.0)  # returns at once: a stop was asked for
            with pytest.raises(Cancelled):
                interrupts.check()
    finally:
        gc.callbacks.remove(callback)
    assert raised == []


def test_a_pause_of_the_tuner_ends_as_soon_as_a_signal_comes() -> None:
    interrupts = Interrupts()
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    with interrupts.installed():
        started = time.monotonic()
        timer.start()
        try:
            assert interrupts.sleep(60.0)
        finally:
            timer.cancel()
        assert time.monotonic() - started < 30
    assert interrupts.signal_name == "SIGTERM" and not interrupts.urgent()


# --- a stop that finishes what it starts, and signals that are never lost ----------------------


def _edit_space(path: Path, **workload: object) -> Path:
    """Change the workload of a space written by :meth:`StudyLab.space`."""
    import yaml

    data = yaml.safe_load(path.read_text())
    data["workload"].update(workload)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _port_of(server: psutil.Process) -> int:
    argv = server.cmdline()
    return int(argv[argv.index("--port") + 1])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _stubborn_launcher(lab: StudyLab) -> Path:
    """A launcher that ignores SIGTERM and outlives the simulated server (``sleep 600``)."""
    wrapper = lab.write(
        "stubborn-python",
        f"#!/bin/sh\ntrap '' TERM\n{sys.executable} \"$@\"\nexec sleep 600\n",
    )
    wrapper.chmod(0o755)
    return wrapper


def test_a_hung_server_and_one_ctrl_c_during_its_stop_leave_no_server(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    """The issue's case: a hung server (SIGSTOP) and one Ctrl-C while the tuner is stopping it.
    The Ctrl-C must not cut the stop short: the tuner waits out the TERM, kills, and only then
    exits, with nothing of the server left (process listing) and its port free."""
    fault_tried("SIGINT while stopping a hung (SIGSTOP) server")
    name = "hung-stop"
    space = lab.space(
        name, baseline=False, configs=CONFIGS[:2], stop_s=8, python=str(_stubborn_launcher(lab))
    )
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "2")
    lab.wait_server()

    def launched() -> tuple[psutil.Process, psutil.Process] | None:
        for proc in lab.servers():
            with contextlib.suppress(psutil.Error):
                if any("stubborn-python" in part for part in proc.cmdline()):
                    children = proc.children()
                    if children:
                        return proc, children[0]
        return None

    launcher, server = lab.wait_for("the launcher and its server", launched)
    port = _port_of(server)
    # the benchmark of trial 0 ends, the stop begins: the simulated server obeys TERM and goes,
    # its launcher ignores TERM and stays for the stop's TERM timeout
    lab.wait_for("the stop to begin", lambda: _gone(server) or _gone(launcher), timeout=120)
    assert not _gone(launcher), "trial 0's stop was over before it could be caught"
    left = lab.servers()
    assert launcher.pid in [p.pid for p in left]
    for proc in left:
        proc.suspend()  # hung: SIGSTOP
    tuner.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert tuner.poll() is None, "the Ctrl-C cut the stop short"
    run = lab.finish(tuner, timeout=90)
    assert run.rc == 130, run.err
    assert "Traceback" not in run.err
    assert "stopped by SIGINT between trials" in run.err
    assert all(_gone(p) for p in left), "the hung launcher survived the tuner"
    lab.check_no_servers("after the tuner exited")
    assert _port_free(port)
    trials = lab.trials(name)
    assert not [t for t in trials if t.state.name == "RUNNING"]
    # trial 0 was measured before the signal: kept; the study did not go on to trial 1
    assert [t.number for t in lab.finished(name)] == [0]


def test_a_hung_server_and_ctrl_c_during_the_benchmark_leave_no_server(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("SIGSTOP of the server during the benchmark, then SIGINT")
    name = "hung-bench"
    space = lab.space(
        name, faults=["stall_stream:1"], baseline=False, configs=CONFIGS[:2], request_s=300
    )
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "2")
    server = lab.wait_server()
    port = _port_of(server)
    lab.wait_for("the benchmark", _logged(_server_log(lab, name, 0), "POST /generate"))
    server.suspend()
    tuner.send_signal(signal.SIGINT)
    run = lab.finish(tuner, timeout=60)
    _assert_clean_exit(run.rc, run.err, "SIGINT", name)
    assert _gone(server)
    lab.check_no_servers("after the tuner exited")
    assert _port_free(port)
    _interrupted_trial(lab, name, "SIGINT")


@pytest.mark.parametrize("seed", [1, 2])
def test_ctrl_c_at_a_random_moment_of_the_start_up_always_stops_the_study(
    lab: StudyLab, fault_tried: Callable[[str], None], seed: int
) -> None:
    """A Ctrl-C is never lost: wherever it lands in the start-up (launch, log following, HTTP
    probes), the tuner exits promptly and the trial is recorded as interrupted."""
    fault_tried(f"SIGINT at a random moment of the start-up ({seed})")
    name = f"sig-random-{seed}"
    space = lab.space(name, faults=[SLOW], baseline=False, configs=CONFIGS[:2])
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "2")
    lab.wait_server()
    time.sleep(random.Random(seed).uniform(0.0, 1.5))
    assert tuner.poll() is None
    tuner.send_signal(signal.SIGINT)
    sent = time.monotonic()
    run = lab.finish(tuner, timeout=60)
    assert time.monotonic() - sent < 60
    _assert_clean_exit(run.rc, run.err, "SIGINT", name)
    lab.check_no_servers("after the interrupted tuner exited")
    _interrupted_trial(lab, name, "SIGINT")


def test_a_burst_of_signals_anywhere_in_a_trial_stops_the_study(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    """Signals at random moments of the first trial, three in a row: the study never runs to
    its end, the tuner exits cleanly and no server is left."""
    fault_tried("a burst of SIGINT at a random moment")
    name = "sig-burst"
    space = lab.space(name, baseline=False, configs=CONFIGS)
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "3")
    lab.wait_server()
    time.sleep(random.Random(7).uniform(0.0, 1.0))
    for _ in range(3):
        if tuner.poll() is None:
            tuner.send_signal(signal.SIGINT)
        time.sleep(0.05)
    run = lab.finish(tuner, timeout=60)
    assert run.rc == 130, run.err
    assert "Traceback" not in run.err and "stopped by SIGINT" in run.err
    lab.check_no_servers("after the interrupted tuner exited")
    trials = lab.trials(name)
    assert not [t for t in trials if t.state.name == "RUNNING"]
    assert len(lab.finished(name)) < 3, "the study ran to its end"


def test_a_benchmark_hung_by_a_stopped_server_is_a_timeout(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    """Item 8: a server stopped (SIGSTOP) in the middle of the benchmark: every stream goes
    silent, the trial's outcome is ``timeout`` (not ``other_crash``), and the hung server is
    still stopped at once (SIGCONT follows the TERM)."""
    fault_tried("SIGSTOP of the server during the benchmark")
    name = "bench-hang"
    # a real-time workload long enough to be caught in the middle (start-up kept short)
    space = lab.space(
        name,
        faults=["slow_start:0.005"],
        baseline=False,
        configs=CONFIGS[:1],
        time_scale=1.0,
        request_s=3,
        stop_s=60,
    )
    _edit_space(space, num_prompts=4, output_len=400)
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "1")
    server = lab.wait_server()
    lab.wait_for("the benchmark", _logged(_server_log(lab, name, 0), "POST /generate"))
    server.suspend()
    run = lab.finish(tuner, timeout=50)  # well before the 60 s TERM timeout
    assert run.rc == 0, run.err
    assert "Traceback" not in run.err
    lab.check_no_servers("after the study")
    (trial,) = lab.trials(name)
    attrs = attrs_of(trial)
    assert attrs["outcome"] == "timeout", attrs
    assert trial.state.name == "PRUNED"
