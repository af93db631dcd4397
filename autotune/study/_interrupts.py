"""Ctrl-C, SIGTERM, SIGHUP and SIGQUIT during a study.

Each is a stop (:data:`STOP_SIGNALS`): SIGHUP comes when the terminal closes or the ssh session
drops, SIGQUIT from Ctrl-\\; both would otherwise end the tuner at once and leave the running
server holding the GPUs until someone resumes.

The signal handler raises nothing: an exception raised from a handler lands wherever the main
thread happens to be, possibly inside a garbage-collection callback or a ``finally`` that then
swallows it, and the study would run on. The handler only notes the signal (a counter and the
signal's name; no lock is taken, so it cannot deadlock with the code it interrupts); the waits of
a trial ask :meth:`Interrupts.stop_requested` at every poll and end early (the start-up wait, the
benchmark, the tuner's pauses), and the runner then records the running trial as interrupted
(FAIL, queued again for ``study resume``) and raises :class:`~autotune._errors.Interrupted` in
ordinary code.

A stop of the server, once begun, always finishes (TERM, then KILL after the stop timeout); a
first signal does not shorten it. A second signal escalates: the handler sends SIGKILL to the
running server's process group at once (after checking that it is still the same process), and
the stop, which asks :meth:`Interrupts.urgent`, goes straight to SIGKILL for whatever is left and
waits for it to be gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from autotune._errors import Cancelled

log = logging.getLogger("autotune.study")

#: How often the waits of :class:`Interrupts` look at the flag.
POLL_S = 0.05

#: The signals that stop a study (those the platform has).
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)


class Interrupts:
    """Signal handling of one study run; use :meth:`installed` around the run."""

    def __init__(self) -> None:
        self.count = 0
        self.signal_name: str | None = None
        self._server: dict[str, Any] | None = None

    def watch_server(self, identity: dict[str, Any] | None) -> None:
        """The server a second signal should kill (its :class:`ProcessIdentity` record)."""
        self._server = identity

    @property
    def interrupted(self) -> bool:
        return self.count > 0

    def stop_requested(self) -> bool:
        """Whether a signal asked the run to stop (the ``cancelled`` callback of the waits)."""
        return self.count > 0

    def urgent(self) -> bool:
        """Whether a second signal asked for the running server to be killed now."""
        return self.count > 1

    def check(self) -> None:
        """Raise :class:`Cancelled` when a stop was asked for (in ordinary code, never from the
        handler)."""
        if self.count > 0:
            raise Cancelled(f"stopped by {self.signal_name or 'a signal'}")

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, less when a stop is asked for; whether one was."""
        deadline = time.monotonic() + max(seconds, 0.0)
        while not self.stop_requested():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(POLL_S, left))
        return True

    def _handle(self, signum: int, frame: types.FrameType | None) -> None:
        # Never raise from here (see the module docstring).
        self.count += 1
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        if self.count == 1:
            self.signal_name = name
            _warn("%s received: stopping the running server and recording the trial", name)
            return
        _warn("%s received again: killing the running server now", name)
        self._kill_server()

    def _kill_server(self) -> None:
        if self._server is None:
            return
        try:
            from autotune.server import ProcessIdentity, find_live

            identity = ProcessIdentity.from_dict(self._server)
            if find_live(identity) is not None:
                os.killpg(identity.pgid, signal.SIGKILL)
        except Exception as e:  # never raise from a signal handler
            with contextlib.suppress(Exception):
                log.debug("forced kill failed: %s", e)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A block that a signal does not interrupt (a server being launched and recorded:
        it is then known, and stopped, rather than left running unrecorded).

        Nothing interrupts any block any more; kept so that callers can mark the block, and
        a stop asked for during it takes effect at its end (:class:`Cancelled`).
        """
        yield
        self.check()

    @contextmanager
    def installed(self, *, linger: bool = False) -> Iterator[Interrupts]:
        """Handle the :data:`STOP_SIGNALS` inside the block; the previous handlers afterwards.

        ``linger`` (a command on its way out): when a stop was asked for, the signals are
        ignored from then on instead, so that one more Ctrl-C of an impatient user cannot turn
        the orderly exit (130, with its message) into a traceback or a death by signal (Python
        puts its own handlers back to the default while it shuts down; an ignored signal stays
        ignored). Only for a process that exits after the block.
        """
        previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        try:
            yield self
        finally:
            self._server = None
            for sig, handler in previous.items():
                quiet = linger and self.interrupted
                signal.signal(sig, signal.SIG_IGN if quiet else handler)


def _warn(message: str, name: str) -> None:
    with contextlib.suppress(Exception):
        log.warning(message, name)
