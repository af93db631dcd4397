"""Ctrl-C and SIGTERM during a study.

The first SIGINT or SIGTERM interrupts whatever the tuner is doing (KeyboardInterrupt; while a
server is being launched and recorded, as soon as that is done); the running trial then stops
its server (TERM, then KILL after the stop timeout), is recorded as
FAIL with the reason, and is queued to run again on resume. A second signal while that clean-up
runs does not interrupt the clean-up: it kills the running server at once (SIGKILL to its
process group, after checking it is still the same process) so the tuner can exit promptly.
"""

from __future__ import annotations

import logging
import os
import signal
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("autotune.study")


class Interrupts:
    """Signal handling of one study run; use :meth:`installed` around the run."""

    def __init__(self) -> None:
        self.count = 0
        self.signal_name: str | None = None
        self._server: dict[str, Any] | None = None
        self._deferring = False
        self._pending = False

    def watch_server(self, identity: dict[str, Any] | None) -> None:
        """The server a second signal should kill (its :class:`ProcessIdentity` record)."""
        self._server = identity

    @property
    def interrupted(self) -> bool:
        return self.count > 0

    def _handle(self, signum: int, frame: types.FrameType | None) -> None:
        self.count += 1
        name = signal.Signals(signum).name
        if self.count == 1:
            self.signal_name = name
            log.warning("%s received: stopping the running server and recording the trial", name)
            if self._deferring:
                self._pending = True
                return
            raise KeyboardInterrupt(name)
        log.warning("%s received again: killing the running server now", name)
        self._kill_server()

    def _kill_server(self) -> None:
        if self._server is None:
            return
        from autotune.server import ProcessIdentity, find_live

        try:
            identity = ProcessIdentity.from_dict(self._server)
            if find_live(identity) is not None:
                os.killpg(identity.pgid, signal.SIGKILL)
        except (OSError, ValueError, Exception) as e:  # never raise from a signal handler
            log.debug("forced kill failed: %s", e)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold a first signal back until the block ends (a server being launched and recorded:
        it is then known, and stopped, rather than left running unrecorded)."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt(self.signal_name)

    @contextmanager
    def installed(self) -> Iterator[Interrupts]:
        previous = {
            sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
