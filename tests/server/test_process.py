"""ServerProcess: real child processes, real signals, real log files."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from autotune._errors import ServerError
from autotune._launch import LaunchSpec
from autotune.server import TOKEN_ENV, LogFollower, ServerProcess

from ._support import read_pids, running, script, wait_until

Starter = Callable[..., ServerProcess]


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the test's own, outside any server's tree, that must survive every stop."""
    proc = subprocess.Popen(
        script("sleeper.py", "--ignore-term"),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def test_stop_kills_the_whole_tree_and_nothing_else(
    tmp_path: Path, bystander: subprocess.Popen[bytes], start_server: Starter
) -> None:
    pidfile = tmp_path / "pids"
    proc = start_server(script("tree_child.py", pidfile), log_path=tmp_path / "s.log")
    wait_until(pidfile.exists)
    pids = read_pids(pidfile)
    assert pids[0] == proc.pid
    assert os.getpgid(pids[2]) != proc.pgid  # the setsid grandchild left the group
    assert os.getpgid(pids[3]) != proc.pgid  # so did the daemon, an orphan by now
    assert all(running(p) for p in pids)

    outcome = proc.stop(term_timeout_s=0.3, kill_timeout_s=10)

    assert outcome.forced
    assert outcome.survivors == ()
    assert outcome.signal == "SIGKILL"
    assert outcome.exit_code == -9
    assert set(pids) <= set(outcome.pids)
    assert not any(running(p) for p in pids)
    assert bystander.poll() is None and bystander.pid not in outcome.pids


def test_stop_finds_a_daemon_whose_parent_already_exited(
    tmp_path: Path, start_server: Starter
) -> None:
    pidfile = tmp_path / "pids"
    proc = start_server(
        script("tree_child.py", pidfile, "--main-exits"), log_path=tmp_path / "s.log"
    )
    assert proc.wait(20) == 0
    pids = read_pids(pidfile)
    assert not running(pids[0])
    assert all(running(p) for p in pids[1:])

    outcome = proc.stop(term_timeout_s=0.2, kill_timeout_s=10)

    assert outcome.exit_code == 0 and outcome.signal is None
    assert outcome.forced and outcome.survivors == ()
    assert not any(running(p) for p in pids)


def test_graceful_stop_needs_no_kill(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    with ServerProcess.start(script("sleeper.py", "--exit-on-term", 0), log_path=log) as proc:
        follower = LogFollower(log)
        wait_until(lambda: "sleeping" in follower.read_new_lines())  # handler installed
        outcome = proc.stop(term_timeout_s=20, kill_timeout_s=5)
    assert outcome.exit_code == 0
    assert outcome.signal is None
    assert not outcome.forced
    assert outcome.log_path == log


def test_default_sigterm_is_reported_by_name(tmp_path: Path, start_server: Starter) -> None:
    log = tmp_path / "s.log"
    proc = start_server(script("sleeper.py"), log_path=log)
    follower = LogFollower(log)
    wait_until(lambda: "sleeping" in follower.read_new_lines())
    outcome = proc.stop(term_timeout_s=20, kill_timeout_s=5)
    assert (outcome.exit_code, outcome.signal, outcome.forced) == (-15, "SIGTERM", False)


def test_stop_is_idempotent(tmp_path: Path, start_server: Starter) -> None:
    proc = start_server(script("sleeper.py"), log_path=tmp_path / "s.log")
    first = proc.stop(term_timeout_s=5, kill_timeout_s=5)
    assert proc.stopped and proc.outcome is first
    assert proc.stop() is first


def test_context_manager_stops_when_the_block_raises(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    with (
        pytest.raises(RuntimeError, match="trial failed"),
        ServerProcess.start(
            script("sleeper.py", "--ignore-term"),
            log_path=log,
            term_timeout_s=0.1,
            kill_timeout_s=10,
        ) as proc,
    ):
        follower = LogFollower(log)
        wait_until(lambda: "sleeping" in follower.read_new_lines())  # SIGTERM now ignored
        assert proc.poll() is None
        raise RuntimeError("trial failed")
    assert proc.outcome is not None and proc.outcome.forced
    assert not running(proc.pid)


def test_log_has_stdout_and_stderr_and_launch_environment(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "server.log"  # the directory is created
    spec = LaunchSpec(
        argv=tuple(script("echo_child.py", "hello", 3)),
        env={"AUTOTUNE_TEST_VALUE": "from-spec"},
        port=1234,
    )
    with ServerProcess.launch(spec, log_path=log) as proc:
        assert proc.wait(20) == 3
        assert proc.poll() == 3
    assert proc.port == 1234
    text = log.read_text()
    assert "stdout says hello" in text
    assert "stderr says hello" in text
    assert "value=from-spec" in text
    assert "stdin=''" in text  # stdin is /dev/null, never the tuner's terminal


def test_a_second_launch_appends_and_its_lines_start_at_its_offset(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with ServerProcess.start(script("echo_child.py", "first", 0), log_path=log) as one:
        one.wait(20)
    with ServerProcess.start(script("echo_child.py", "second", 0), log_path=log) as two:
        two.wait(20)
    assert one.log_offset == 0 and two.log_offset > 0
    lines = LogFollower(log, start_offset=two.log_offset).read_new_lines(final=True)
    assert "stdout says second" in lines
    assert not any("first" in line for line in lines)
    assert "stdout says first" in log.read_text()


def test_child_environment_carries_the_launch_token(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    with ServerProcess.start(script("sleeper.py"), log_path=log) as proc:
        follower = LogFollower(log)
        wait_until(lambda: "sleeping" in follower.read_new_lines())
        import psutil

        env = psutil.Process(proc.pid).environ()
        assert env[TOKEN_ENV] == proc.token
        assert env["PYTHONUNBUFFERED"] == "1"
        assert proc.tree_pids() == {proc.pid}
    assert TOKEN_ENV not in os.environ


def test_missing_executable_is_a_server_error(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    with pytest.raises(ServerError) as info:
        ServerProcess.start(["/nonexistent/python3", "-m", "sglang.launch_server"], log_path=log)
    message = str(info.value)
    assert "/nonexistent/python3" in message and str(log) in message
    assert info.value.hint
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_non_executable_file_is_a_server_error(tmp_path: Path) -> None:
    plain = tmp_path / "not-a-program"
    plain.write_text("#!/bin/sh\necho hi\n")
    plain.chmod(0o644)
    with pytest.raises(ServerError, match="permission denied") as info:
        ServerProcess.start([str(plain)], log_path=tmp_path / "s.log")
    assert isinstance(info.value.__cause__, PermissionError)


def test_missing_working_directory_is_a_server_error(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="working directory"):
        ServerProcess.start(
            script("sleeper.py"), log_path=tmp_path / "s.log", cwd=tmp_path / "missing"
        )


def test_unwritable_log_is_a_server_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ServerError, match="log") as info:
        ServerProcess.start(script("sleeper.py"), log_path=blocker / "server.log")
    assert isinstance(info.value.__cause__, OSError)


def test_secrets_are_redacted_from_start_errors(tmp_path: Path) -> None:
    with pytest.raises(ServerError) as info:
        ServerProcess.start(
            ["/nonexistent/python3", "--api-key", "sk-verysecretvalue123"],
            log_path=tmp_path / "s.log",
        )
    assert "sk-verysecretvalue123" not in str(info.value)
    assert info.value.command is not None
    assert "sk-verysecretvalue123" not in info.value.command


def test_empty_command_is_a_server_error(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="empty"):
        ServerProcess.start([], log_path=tmp_path / "s.log")


# --- a stop that finishes what it starts ---------------------------------------------------------


def _started(tmp_path: Path, start_server: Starter, *args: object) -> ServerProcess:
    log = tmp_path / "s.log"
    proc = start_server(script("sleeper.py", *args), log_path=log)
    follower = LogFollower(log)
    wait_until(lambda: "sleeping" in follower.read_new_lines())  # its handler is installed
    return proc


def test_a_stopped_server_acts_on_term_because_cont_follows_it(
    tmp_path: Path, start_server: Starter
) -> None:
    proc = _started(tmp_path, start_server, "--exit-on-term", 3)
    os.kill(proc.pid, signal.SIGSTOP)  # hung: a stopped process acts on no signal but KILL/CONT
    wait_until(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED)

    outcome = proc.stop(term_timeout_s=30, kill_timeout_s=10)

    assert not outcome.forced, "TERM alone should have worked once the process was continued"
    assert outcome.exit_code == 3
    assert outcome.elapsed_s < 15  # far below the 30 s TERM timeout (slack for a loaded machine)
    assert not running(proc.pid)


def test_a_stopped_server_that_ignores_term_is_killed_and_awaited(
    tmp_path: Path, start_server: Starter
) -> None:
    proc = _started(tmp_path, start_server, "--ignore-term")
    os.kill(proc.pid, signal.SIGSTOP)

    outcome = proc.stop(term_timeout_s=0.5, kill_timeout_s=10)

    assert outcome.forced and outcome.signal == "SIGKILL"
    assert outcome.survivors == ()
    assert not running(proc.pid)


def test_urgent_skips_the_rest_of_the_term_wait(tmp_path: Path, start_server: Starter) -> None:
    proc = _started(tmp_path, start_server, "--ignore-term")
    asked_at = time.monotonic() + 0.5

    outcome = proc.stop(
        term_timeout_s=300, kill_timeout_s=10, urgent=lambda: time.monotonic() >= asked_at
    )

    assert outcome.forced and outcome.signal == "SIGKILL" and outcome.survivors == ()
    assert outcome.elapsed_s < 60  # not the 300 s TERM timeout
    assert not running(proc.pid)


def test_a_ctrl_c_during_the_stop_does_not_abandon_it(
    tmp_path: Path, start_server: Starter
) -> None:
    """A KeyboardInterrupt (Python's own SIGINT handler) in the middle of the TERM wait: the stop
    escalates to SIGKILL, waits for the process to be gone, then lets the interrupt through."""
    proc = _started(tmp_path, start_server, "--ignore-term")
    os.kill(proc.pid, signal.SIGSTOP)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            proc.stop(term_timeout_s=300, kill_timeout_s=10)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert not running(proc.pid)
    assert proc.stopped and proc.outcome is not None
    assert proc.outcome.forced and proc.outcome.survivors == ()
