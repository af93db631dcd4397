"""Issue 42: a server whose worker calls setsid and clears its environment (so neither the
process group nor the launch token finds it) and whose parent then exits is still stopped, by
the tuner that runs it and by a resume after the tuner was killed (-9): the server's main
process adopts its tree's orphans (it is their subreaper), so the worker stays in the tree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from autotune.server import ProcessIdentity, ServerProcess, stop_identity

from ._support import read_pids, running, script, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux subreaper")


def _escaped(pidfile: Path, server_pid: int) -> int:
    wait_until(lambda: pidfile.exists() and bool(pidfile.read_text().strip()))
    (worker,) = read_pids(pidfile)
    proc = psutil.Process(worker)
    assert os.getsid(worker) != os.getsid(server_pid)  # its own session
    assert "AUTOTUNE_SERVER_TOKEN" not in proc.environ()  # no token
    wait_until(lambda: psutil.Process(worker).ppid() == server_pid)  # adopted by the server
    return worker


def test_the_tuner_stops_a_worker_that_left_the_session_and_cleared_its_environment(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "worker.pid"
    proc = ServerProcess.start(script("escaping_worker.py", pidfile), log_path=tmp_path / "s.log")
    try:
        worker = _escaped(pidfile, proc.pid)
    finally:
        proc.stop()
    wait_until(lambda: not running(worker), 10)
    assert not running(proc.pid)


def test_a_resume_stops_it_after_the_tuner_was_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "worker.pid"
    record = tmp_path / "identity.json"
    tuner_code = textwrap.dedent(
        f"""
        import json, time
        from autotune.server import ServerProcess, identity_of
        proc = ServerProcess.start({script("escaping_worker.py", pidfile)!r},
                                   log_path={str(tmp_path / "s.log")!r})
        open({str(record)!r}, "w").write(json.dumps(identity_of(proc).to_dict()))
        time.sleep(600)
        """
    )
    tuner = subprocess.Popen([sys.executable, "-c", tuner_code], env=dict(os.environ))
    try:
        wait_until(lambda: record.exists() and bool(record.read_text()), 30)
        identity = ProcessIdentity.from_dict(json.loads(record.read_text()))
        worker = _escaped(pidfile, identity.pid)
    finally:
        tuner.send_signal(signal.SIGKILL)
        tuner.wait(timeout=30)
    assert running(identity.pid) and running(worker)  # the tuner's death stopped nothing

    stopped = stop_identity(identity, term_timeout_s=5, kill_timeout_s=5)
    assert stopped is not None
    wait_until(lambda: not running(worker), 10)
    assert not running(identity.pid)
