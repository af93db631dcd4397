"""How a server's process tree ended."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessOutcome:
    """How a server's process tree ended.

    ``exit_code`` is the main process's status as :mod:`subprocess` reports it (negative: the
    number of the signal that ended it), or ``None`` when it is not known (a process that is not
    a child of this one, or one that could not be reaped). ``signal`` names that signal.
    ``elapsed_s`` is how long stopping took, ``runtime_s`` the time from launch to the end of the
    stop (``None`` when the launch time is not known). ``forced`` says SIGKILL was needed;
    ``survivors`` lists processes still alive after it (normally none); ``pids`` every process of
    the tree that was seen while stopping.
    """

    exit_code: int | None
    signal: str | None
    elapsed_s: float
    log_path: Path | None
    forced: bool
    survivors: tuple[int, ...] = ()
    pids: tuple[int, ...] = ()
    runtime_s: float | None = None


def signal_name(returncode: int | None) -> str | None:
    """``"SIGKILL"`` for a return code of -9, ``None`` for a normal exit or an unknown one."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
