"""Server processes: launch, log, watch the start-up, stop the whole tree, confirm release.

This is the one part of autotune that owns subprocesses. A server runs in its own session with
its output in a log file (:class:`ServerProcess`); :func:`wait_for_startup` follows that log and
decides ready, crashed or timed out as soon as it can; stopping signals the process group and
every descendant, TERM then KILL. What readiness looks like (:class:`Readiness`: ready lines and
HTTP probes) and what a crash looks like (a :class:`LineClassifier`) are the engine's, passed in
by the caller. :class:`ProcessIdentity` records a launch so that a resumed study can stop a
server left behind by a tuner that was killed; :class:`GpuMonitor` confirms that a stopped
server's GPU memory was freed; the port functions pick and check ports. A server started through
a launch prefix (``docker exec BOX``, ``srun ...``) runs under a small launcher that records its
pid inside the prefix, and is stopped through the same prefix (:class:`PrefixStop` says how).
"""

from __future__ import annotations

from autotune.server._follow import LogFollower
from autotune.server._gpu import GpuMonitor, GpuReleaseResult, GpuUsage
from autotune.server._identity import (
    ProcessIdentity,
    argv_digest,
    find_live,
    identity_of,
    stop_identity,
)
from autotune.server._launcher import PrefixStop
from autotune.server._logcap import CUT_MARK, LOG_CAP_BYTES, cap_log
from autotune.server._outcome import ProcessOutcome, signal_name
from autotune.server._ports import find_free_port, port_in_use, wait_port_released
from autotune.server._process import ServerProcess, new_token
from autotune.server._startup import (
    UNEXPLAINED_EXIT,
    Classification,
    LineClassifier,
    Probe,
    Readiness,
    StartupResult,
    StartupStatus,
    wait_for_startup,
)
from autotune.server._tree import TOKEN_ENV

__all__ = [
    "CUT_MARK",
    "LOG_CAP_BYTES",
    "TOKEN_ENV",
    "UNEXPLAINED_EXIT",
    "Classification",
    "GpuMonitor",
    "GpuReleaseResult",
    "GpuUsage",
    "LineClassifier",
    "LogFollower",
    "PrefixStop",
    "Probe",
    "ProcessIdentity",
    "ProcessOutcome",
    "Readiness",
    "ServerProcess",
    "StartupResult",
    "StartupStatus",
    "argv_digest",
    "cap_log",
    "find_free_port",
    "find_live",
    "identity_of",
    "new_token",
    "port_in_use",
    "signal_name",
    "stop_identity",
    "wait_for_startup",
    "wait_port_released",
]
