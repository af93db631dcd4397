"""wait_for_startup ends promptly, with status ``interrupted``, once a stop is asked for."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from autotune.server import Readiness, ServerProcess, find_free_port, wait_for_startup

from ._support import SubstringClassifier, script

HOST = "127.0.0.1"
#: A server whose log never says it is ready.
NEVER_READY = Readiness(ready_lines=(), probes=())


def test_a_stop_asked_for_ends_the_wait_at_once(tmp_path: Path) -> None:
    port = find_free_port(HOST)
    argv = script("sleeper.py")  # never ready: the wait would run to its 300 s deadline
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    with ServerProcess.start(argv, log_path=tmp_path / "s.log", port=port) as proc:
        started = time.monotonic()
        result = wait_for_startup(
            proc,
            classifier=SubstringClassifier(),
            readiness=NEVER_READY,
            url=f"http://{HOST}:{port}",
            timeout_s=300,
            cancelled=stop.is_set,
        )
        waited = time.monotonic() - started
        assert proc.poll() is None  # left running: stopping it is the caller's
    assert result.status == "interrupted" and not result.ready
    assert waited < 60  # far below the 300 s deadline, with room for a loaded machine


def test_already_cancelled_returns_before_anything_is_read(tmp_path: Path) -> None:
    port = find_free_port(HOST)
    with ServerProcess.start(script("sleeper.py"), log_path=tmp_path / "s.log", port=port) as p:
        result = wait_for_startup(
            p,
            classifier=SubstringClassifier(),
            readiness=NEVER_READY,
            url=f"http://{HOST}:{port}",
            timeout_s=300,
            cancelled=lambda: True,
        )
    assert result.status == "interrupted"
