"""A server started through a launch prefix into a container is the one stopped.

The container is a real PID namespace whose ``exec`` has ``docker exec``'s process model
(:mod:`tests.server._box`): the command is no descendant of the client and outlives it.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune._errors import ServerError
from autotune.server import ProcessIdentity, ServerProcess, identity_of, stop_identity
from autotune.server._launcher import PrefixLauncher

from ._box import Box
from ._support import script, wait_until


def _through(box: Box, *argv: object) -> list[str]:
    return [*box.prefix, *(str(a) for a in argv)]


def _inside(box: Box, needle: str) -> list[str]:
    return [line for line in box.processes() if needle in line]


def test_the_box_keeps_a_command_whose_client_is_stopped(
    box: Box, tmp_path: Path, start_server: Callable[..., ServerProcess]
) -> None:
    """What the launcher is for: stopping the prefix's own process leaves the server running."""
    proc = start_server(_through(box, *script("sleeper.py")), log_path=tmp_path / "s.log")
    wait_until(lambda: bool(_inside(box, "sleeper.py")))
    proc.stop(term_timeout_s=5, kill_timeout_s=5)
    assert _inside(box, "sleeper.py"), "the box should have kept the command"


@pytest.mark.parametrize("enter", ["exec", "nsenter"])
def test_teardown_stops_the_server_inside_and_everything_it_started(
    box: Box, tmp_path: Path, enter: str
) -> None:
    pids = tmp_path / "pids"  # the box shares this host's files, as a bind mount would
    prefix = box.prefix if enter == "exec" else box.nsenter
    argv = [*prefix, *script("tree_child.py", pids)]
    with ServerProcess.start(
        argv, log_path=tmp_path / "s.log", prefix=prefix, term_timeout_s=0.5
    ) as proc:
        wait_until(pids.exists)
        inside = box.processes()
        # the launcher, the main process, a grandchild, one that left the group, a daemon
        assert len(inside) == 5, inside
        assert proc.poll() is None
    assert proc.prefix_stop is not None and proc.prefix_stop.result == "killed"
    assert proc.outcome is not None and proc.outcome.forced  # every one of them ignores TERM
    assert box.wait_empty() == []
    assert proc.pid_file is not None and not Path(proc.pid_file).exists()  # cleaned up


def test_a_server_that_obeys_sigterm_is_stopped_without_a_kill(box: Box, tmp_path: Path) -> None:
    argv, log = _through(box, *script("sleeper.py", "--exit-on-term", "7")), tmp_path / "s.log"
    with ServerProcess.start(argv, log_path=log, prefix=box.prefix) as proc:
        wait_until(lambda: "sleeping" in log.read_text())  # its TERM handler is in place
    assert proc.prefix_stop is not None and proc.prefix_stop.result == "stopped"
    assert proc.outcome is not None and not proc.outcome.forced
    assert proc.outcome.exit_code == 7  # the launcher exits with its server's status
    assert box.wait_empty() == []
    assert proc.pid_file is not None and not Path(proc.pid_file).exists()


def test_a_stop_right_after_the_launch_still_finds_the_server(box: Box, tmp_path: Path) -> None:
    """A Ctrl-C before the launcher has recorded the server: the stop waits for the record."""
    argv = _through(box, *script("sleeper.py"))
    proc = ServerProcess.start(argv, log_path=tmp_path / "s.log", prefix=box.prefix)
    outcome = proc.stop(term_timeout_s=20, kill_timeout_s=10)  # (slack for a busy host)
    assert proc.prefix_stop is not None and proc.prefix_stop.ran
    assert outcome.survivors == ()
    assert box.wait_empty() == []


@pytest.mark.parametrize("secret", [False, True], ids=["plain", "secret"])
def test_the_launch_environment_reaches_the_server_inside_but_secrets_do_not(
    box: Box, tmp_path: Path, secret: bool
) -> None:
    log = tmp_path / "s.log"
    argv = _through(box, *script("echo_child.py", "hello", "3"))
    env = {"AUTOTUNE_TEST_VALUE": "from-the-space"}
    hidden = frozenset(env) if secret else frozenset()
    proc = ServerProcess.start(argv, log_path=log, env=env, prefix=box.prefix, secret_env=hidden)
    assert proc.wait(30) == 3
    proc.stop()
    text = log.read_text()
    assert "stdout says hello" in text and "stderr says hello" in text
    assert ("value=<unset>" if secret else "value=from-the-space") in text
    assert "from-the-space" not in " ".join(proc.argv)  # the command as shown stays the space's


def test_the_server_of_a_killed_tuner_is_stopped_from_its_record(box: Box, tmp_path: Path) -> None:
    pids, record = tmp_path / "pids", tmp_path / "identity.json"
    tuner = subprocess.Popen(
        script("orphan_tuner.py", tmp_path / "server.log", pids, record, *box.prefix),
        start_new_session=True,
    )
    try:
        wait_until(lambda: pids.exists() and record.exists())
        tuner.kill()  # kill -9: no clean-up at all
        tuner.wait(timeout=10)
        assert len(box.processes()) == 5  # the launcher and the server's tree still run
        identity = ProcessIdentity.from_dict(json.loads(record.read_text()))
        assert identity.launch_prefix == tuple(box.prefix) and identity.pid_file
        assert ProcessIdentity.from_dict(identity.to_dict()) == identity

        # a second worker on another machine: only the prefix leads to the server
        elsewhere = dataclasses.replace(identity, hostname=f"not-{identity.hostname}")
        outcome = stop_identity(elsewhere, term_timeout_s=0.3, kill_timeout_s=10)

        assert outcome is not None and outcome.forced
        assert box.wait_empty() == []
        assert stop_identity(identity, term_timeout_s=0.3) is None
    finally:
        tuner.kill()
        tuner.wait(timeout=10)


def _start_in_box(box: Box) -> tuple[subprocess.Popen[bytes], int, str]:
    """A process inside that is no server of ours: its pid and start time as seen inside."""
    client = subprocess.Popen(_through(box, "sleep", "600"))
    wait_until(lambda: bool(_inside(box, "sleep 600")))
    (line,) = _inside(box, "sleep 600")
    pid = int(line.split()[0])
    stat = box.run("cat", f"/proc/{pid}/stat").stdout
    return client, pid, stat.rsplit(")", 1)[1].split()[19]


def test_a_pid_file_of_another_launch_or_a_reused_pid_is_never_acted_on(box: Box) -> None:
    client, pid, start = _start_in_box(box)
    token = secrets.token_hex(16)
    launcher = PrefixLauncher(box.prefix, token)
    path = Path(launcher.pid_file)  # the box shares /tmp with this host
    try:
        path.write_text(f"{pid} {start} {secrets.token_hex(16)}\n")
        assert launcher.stop(0.2, 1).result == "other"  # another launch's file
        path.write_text(f"{pid} {int(start) - 1} {token}\n")
        assert launcher.stop(0.2, 1).result == "gone"  # the pid now names another process
        assert not path.exists()
        assert _inside(box, "sleep 600"), "a process that reuses a recorded pid was signalled"
        path.write_text(f"{pid} {start} {token}\n")  # the same file, had it been ours
        assert launcher.stop(5, 5).result == "stopped"
        assert box.wait_empty() == []
    finally:
        client.kill()
        client.wait(timeout=10)
        path.unlink(missing_ok=True)


def test_a_prefix_that_cannot_run_is_reported_not_ignored(tmp_path: Path) -> None:
    missing = PrefixLauncher([str(tmp_path / "no-such-prefix")], secrets.token_hex(16))
    result = missing.stop(0.1, 0.1)
    assert result.result == "unreachable" and "cannot run" in result.detail
    failing = PrefixLauncher([sys.executable, "-c", "import sys; sys.exit(5)"], "t")
    result = failing.stop(0.1, 0.1)
    assert result.result == "unreachable" and "exited with 5" in result.detail


def test_a_secret_in_the_prefix_is_not_recorded_and_the_stop_needs_none(
    box: Box, tmp_path: Path
) -> None:
    prefix = ["env", "HF_TOKEN=hf_abcdefghijklmnopqrstuvwx", *box.prefix]
    argv = [*prefix, *script("sleeper.py")]
    proc = ServerProcess.start(argv, log_path=tmp_path / "s.log", prefix=prefix)
    try:
        wait_until(lambda: bool(_inside(box, "sleeper.py")))
        identity = identity_of(proc)
        assert identity.launch_prefix == ("env", "HF_TOKEN=***", *box.prefix)
        assert "hf_abcdefghijklmnopqrstuvwx" not in json.dumps(identity.to_dict())
        outcome = stop_identity(identity, term_timeout_s=5, kill_timeout_s=5)
        assert outcome is not None and not outcome.forced
        assert box.wait_empty() == []
    finally:
        proc.stop(term_timeout_s=0.1, kill_timeout_s=5)


@pytest.mark.parametrize(
    "argv", [["docker", "exec", "box"], ["podman", "exec", "box", "python3"]], ids=str
)
def test_a_command_that_does_not_go_on_after_its_prefix_is_refused(
    tmp_path: Path, argv: list[str]
) -> None:
    with pytest.raises(ServerError, match="does not go on after its launch prefix"):
        ServerProcess.start(argv, log_path=tmp_path / "s.log", prefix=["docker", "exec", "box"])
    assert not (tmp_path / "s.log").exists()  # nothing launched


def test_no_server_starts_where_its_pid_file_cannot_be_written(tmp_path: Path) -> None:
    launcher = PrefixLauncher([], secrets.token_hex(16), pid_file="/nonexistent-dir/server.pid")
    marker = tmp_path / "started"
    argv = launcher.wrap([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], {})
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 126
    assert "cannot write the server's pid file /nonexistent-dir/server.pid" in done.stderr
    assert not marker.exists()
