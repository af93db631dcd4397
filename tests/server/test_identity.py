"""Process identity: finding a server again, never touching a process that reuses its pid."""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from autotune._errors import StorageError
from autotune.server import (
    ProcessIdentity,
    ServerProcess,
    argv_digest,
    find_live,
    identity_of,
    stop_identity,
)

from ._support import read_pids, running, script, wait_until


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess.start(
        script("sleeper.py"), log_path=tmp_path / "s.log", port=30123, term_timeout_s=5
    ) as proc:
        yield proc


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A process outside any server, standing for whoever got a recorded pid next."""
    proc = subprocess.Popen(script("sleeper.py"), start_new_session=True, stdout=subprocess.DEVNULL)
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def test_identity_of_a_running_server(sleeper: ServerProcess) -> None:
    identity = identity_of(sleeper)
    assert identity.pid == sleeper.pid and identity.pgid == sleeper.pgid
    assert identity.port == 30123
    assert identity.hostname == socket.gethostname()
    assert identity.argv_sha == argv_digest(sleeper.argv)
    assert identity.argv_sha != argv_digest([*sleeper.argv, "--port", "1"])
    assert identity.token == sleeper.token


def test_identity_survives_json(sleeper: ServerProcess) -> None:
    identity = identity_of(sleeper)
    again = ProcessIdentity.from_dict(json.loads(json.dumps(identity.to_dict())))
    assert again == identity


@pytest.mark.parametrize(
    "change",
    [{"pid": "12"}, {"create_time": None}, {"hostname": 5}, {"pid": True}],
)
def test_a_malformed_record_is_a_storage_error(
    sleeper: ServerProcess, change: dict[str, object]
) -> None:
    record = {**identity_of(sleeper).to_dict(), **change}
    with pytest.raises(StorageError, match="wrong type"):
        ProcessIdentity.from_dict(record)


def test_an_incomplete_record_is_a_storage_error(sleeper: ServerProcess) -> None:
    record = identity_of(sleeper).to_dict()
    del record["create_time"]
    with pytest.raises(StorageError, match="create_time"):
        ProcessIdentity.from_dict(record)


def test_find_live_finds_our_running_child(sleeper: ServerProcess) -> None:
    found = find_live(identity_of(sleeper))
    assert found is not None and found.pid == sleeper.pid


def test_find_live_on_a_stopped_server_is_none(sleeper: ServerProcess) -> None:
    identity = identity_of(sleeper)
    sleeper.stop()
    assert find_live(identity) is None
    assert stop_identity(identity) is None


def test_a_reused_pid_is_never_touched(stranger: subprocess.Popen[bytes]) -> None:
    real = psutil.Process(stranger.pid)
    identity = ProcessIdentity(
        pid=stranger.pid,
        pgid=stranger.pid,
        create_time=real.create_time() - 5.0,  # "our" server started earlier than this process
        port=30000,
        hostname=socket.gethostname(),
        argv_sha=argv_digest(["python", "-m", "sglang.launch_server"]),
        token="0" * 32,
    )
    assert find_live(identity) is None
    assert stop_identity(identity, term_timeout_s=0.5, kill_timeout_s=0.5) is None
    assert stranger.poll() is None


def test_a_server_on_another_host_is_not_ours(sleeper: ServerProcess) -> None:
    identity = dataclasses.replace(identity_of(sleeper), hostname="some-other-host")
    assert find_live(identity) is None
    assert stop_identity(identity) is None
    assert sleeper.poll() is None


def test_stop_identity_of_our_own_child(
    tmp_path: Path, start_server: Callable[..., ServerProcess]
) -> None:
    pidfile = tmp_path / "pids"
    proc = start_server(script("tree_child.py", pidfile), log_path=tmp_path / "s.log")
    wait_until(pidfile.exists)
    pids = read_pids(pidfile)
    outcome = stop_identity(identity_of(proc), term_timeout_s=0.2, kill_timeout_s=10)
    assert outcome is not None
    assert outcome.forced and outcome.survivors == ()
    assert set(pids) <= set(outcome.pids)
    assert proc.wait(10) == -signal.SIGKILL
    assert not any(running(p) for p in pids)


def test_orphan_of_a_killed_tuner_is_found_and_stopped(tmp_path: Path) -> None:
    pidfile, record = tmp_path / "pids", tmp_path / "identity.json"
    tuner = subprocess.Popen(
        script("orphan_tuner.py", tmp_path / "server.log", pidfile, record),
        start_new_session=True,
    )
    try:
        wait_until(lambda: pidfile.exists() and record.exists())
        tuner.kill()  # kill -9 of the tuner: the server is left behind
        tuner.wait(timeout=10)
        identity = ProcessIdentity.from_dict(json.loads(record.read_text()))
        pids = read_pids(pidfile)
        assert identity.pid == pids[0] and identity.port == 31999
        assert psutil.Process(identity.pid).ppid() != tuner.pid  # an orphan now
        assert find_live(identity) is not None

        outcome = stop_identity(identity, term_timeout_s=0.2, kill_timeout_s=10)

        assert outcome is not None and outcome.forced and outcome.survivors == ()
        assert outcome.exit_code is None and outcome.log_path is None
        assert not any(running(p) for p in pids)
        assert find_live(identity) is None
        assert stop_identity(identity) is None
    finally:
        tuner.kill()
        tuner.wait(timeout=10)
        if record.exists():  # whatever failed above, leave no server behind
            stop_identity(
                ProcessIdentity.from_dict(json.loads(record.read_text())),
                term_timeout_s=0.1,
                kill_timeout_s=10,
            )


def test_a_record_stored_before_the_launch_finds_the_server_by_its_token(
    tmp_path: Path, start_server: Callable[..., ServerProcess]
) -> None:
    """The pending record, stored before the launch (no pid yet), stops every process of the
    server launched with its token, even one that ignores SIGTERM and left the group; it never
    names a live process by pid, and touches no process that carries another token."""
    from autotune.server import new_token

    token = new_token()
    record = json.loads(json.dumps(ProcessIdentity.pending(token, 31998).to_dict()))
    pending = ProcessIdentity.from_dict(record)
    assert pending.pid == -1 and pending.token == token and pending.port == 31998
    assert find_live(pending) is None
    pidfile, other_pids = tmp_path / "pids", tmp_path / "other"
    proc = start_server(script("tree_child.py", pidfile), log_path=tmp_path / "s.log", token=token)
    other = start_server(script("tree_child.py", other_pids), log_path=tmp_path / "o.log")
    wait_until(lambda: pidfile.exists() and other_pids.exists())
    pids = read_pids(pidfile)

    outcome = stop_identity(pending, term_timeout_s=0.2, kill_timeout_s=10)

    assert outcome is not None and outcome.forced and outcome.survivors == ()
    assert set(pids) <= set(outcome.pids)
    assert proc.wait(10) == -signal.SIGKILL
    assert not any(running(p) for p in pids)
    assert all(running(p) for p in read_pids(other_pids))
    assert other.poll() is None
    assert stop_identity(pending) is None
