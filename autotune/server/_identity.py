"""The record of a launched server that outlives the tuner, and the stop that uses it.

:class:`ProcessIdentity` names a launch so that a resumed study, or a second worker's
clean-up, can stop a server orphaned by a ``kill -9`` of the tuner: on this host by the main
process's pid and start time, its process group and the launch's token (a reused pid is never
signalled, see :mod:`autotune.server._tree`); for a server started through a launch prefix
(``docker exec BOX``, ``srun ...``) also through that prefix, by the pid file its launcher wrote
there (:mod:`autotune.server._launcher`).
"""

from __future__ import annotations

import hashlib
import logging
import socket
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import psutil

from autotune._errors import StorageError
from autotune.server._launcher import PrefixLauncher
from autotune.server._outcome import ProcessOutcome
from autotune.server._tree import SAME_START_S, ProcessTree

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessIdentity:
    """A launched server's main process, recorded so that it can be found again later."""

    pid: int
    pgid: int
    create_time: float
    port: int | None
    hostname: str
    argv_sha: str
    token: str | None = None
    #: The launch prefix the server was started through (empty: started directly).
    launch_prefix: tuple[str, ...] = ()
    #: Where the launcher wrote the server's pid, inside the prefix.
    pid_file: str | None = None

    @classmethod
    def pending(cls, token: str, port: int | None) -> ProcessIdentity:
        """The record of a server about to be launched with ``token``, stored before the
        launch: no pid, group or start time yet (-1, -1 and 0, which match no process), so a
        stop finds only the processes that carry the token (and their descendants)."""
        return cls(
            pid=-1,
            pgid=-1,
            create_time=0.0,
            port=port,
            hostname=socket.gethostname(),
            argv_sha="",
            token=token,
        )

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["launch_prefix"] = list(self.launch_prefix)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ProcessIdentity:
        """Read a record written by :meth:`to_dict`.

        Raises:
            StorageError: the record is not a mapping, or a field is missing or mistyped.
        """
        if not isinstance(data, Mapping):
            raise StorageError(
                f"the recorded server process is not a mapping: {data!r}",
                hint=_UNUSABLE_RECORD,
            )
        return cls(
            pid=_field(data, "pid", int),
            pgid=_field(data, "pgid", int),
            create_time=float(_field(data, "create_time", (int, float))),
            port=_field(data, "port", int, optional=True),
            hostname=_field(data, "hostname", str),
            argv_sha=_field(data, "argv_sha", str),
            token=_field(data, "token", str, optional=True),
            launch_prefix=_prefix(data),
            pid_file=_field(data, "pid_file", str, optional=True),
        )


_UNUSABLE_RECORD = "the record cannot be used to find the server; stop it by hand if it still runs"


def _field(
    data: Mapping[str, object],
    name: str,
    kind: type | tuple[type, ...],
    *,
    optional: bool = False,
) -> Any:
    value = data.get(name)
    if value is None:
        if optional:
            return None
        if name not in data:
            raise StorageError(
                f"the recorded server process has no {name!r}: {dict(data)!r}",
                hint=_UNUSABLE_RECORD,
            )
    if isinstance(value, bool) or not isinstance(value, kind):
        raise StorageError(
            f"the recorded server process has a {name!r} of the wrong type: {value!r}",
            hint=_UNUSABLE_RECORD,
        )
    return value


def _prefix(data: Mapping[str, object]) -> tuple[str, ...]:
    value = _field(data, "launch_prefix", (list, tuple), optional=True) or ()
    if not all(isinstance(part, str) for part in value):
        raise StorageError(
            f"the recorded server process has a launch prefix that is not text: {value!r}",
            hint=_UNUSABLE_RECORD,
        )
    return tuple(value)


def argv_digest(argv: Sequence[str]) -> str:
    """A SHA-256 of the command line (arguments joined by NUL)."""
    return hashlib.sha256("\0".join(argv).encode("utf-8", "surrogateescape")).hexdigest()


class _Running(Protocol):
    """What :func:`identity_of` reads of a started server (a :class:`ServerProcess`)."""

    @property
    def pid(self) -> int: ...
    @property
    def pgid(self) -> int: ...
    @property
    def create_time(self) -> float: ...
    @property
    def port(self) -> int | None: ...
    @property
    def argv(self) -> Sequence[str]: ...
    @property
    def token(self) -> str: ...
    @property
    def launch_prefix(self) -> tuple[str, ...]: ...
    @property
    def pid_file(self) -> str | None: ...


def identity_of(proc: _Running) -> ProcessIdentity:
    """The record of a running server, to store before waiting on it (secrets in its launch
    prefix, ``-e HF_TOKEN=...``, are redacted: the stop through the prefix needs none)."""
    from autotune._redact import redact_argv

    return ProcessIdentity(
        pid=proc.pid,
        pgid=proc.pgid,
        create_time=proc.create_time,
        port=proc.port,
        hostname=socket.gethostname(),
        argv_sha=argv_digest(proc.argv),
        token=proc.token,
        launch_prefix=tuple(redact_argv(proc.launch_prefix)),
        pid_file=proc.pid_file,
    )


def find_live(identity: ProcessIdentity) -> psutil.Process | None:
    """The recorded main process if it still runs on this host and is the same process.

    ``None`` when it has exited, is a zombie, runs on another host, or when its pid now belongs
    to a process that started at another time (a reused pid).
    """
    if identity.hostname != socket.gethostname() or identity.pid <= 0:
        return None
    try:
        proc = psutil.Process(identity.pid)
        if abs(proc.create_time() - identity.create_time) > SAME_START_S:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.Error:
        return None
    return proc


def stop_identity(
    identity: ProcessIdentity, term_timeout_s: float = 30.0, kill_timeout_s: float = 10.0
) -> ProcessOutcome | None:
    """Stop a recorded server and its processes (SIGTERM, then SIGKILL), if any still run.

    A server started through a launch prefix is stopped through that prefix first, from any
    host (its pid file names it by the launch's token: elsewhere nothing matches). Then, on the
    recording host, its process group is signalled only while the recorded main process (same
    pid, same start time) or one of its processes still holds it; processes carrying the
    launch's token are stopped even when the main process is gone. A process that merely reuses
    the recorded pid is never touched. ``None`` when nothing of the server ran any more.
    """
    inside = None
    if identity.launch_prefix and identity.token is not None:
        launcher = PrefixLauncher(identity.launch_prefix, identity.token, identity.pid_file)
        inside = launcher.stop(term_timeout_s, kill_timeout_s)
        if inside.result in ("unreachable", "survived"):
            log.error(
                "could not stop the server through %s (%s): stop it by hand; its pid is in %s",
                " ".join(identity.launch_prefix),
                inside.detail or inside.result,
                launcher.pid_file,
            )
    report = None
    if identity.hostname == socket.gethostname():
        tree = ProcessTree(
            root_pid=identity.pid,
            root_create_time=identity.create_time,
            pgid=identity.pgid,
            token=identity.token,
        )
        if tree.members(include_tokens=True):
            report = tree.stop(term_timeout_s=term_timeout_s, kill_timeout_s=kill_timeout_s)
    if report is None and (inside is None or not inside.ran):
        return None
    return ProcessOutcome(
        exit_code=None,
        signal=None,
        elapsed_s=(report.elapsed_s if report else 0.0) + (inside.elapsed_s if inside else 0.0),
        log_path=None,
        forced=bool(report and report.forced) or bool(inside and inside.forced),
        survivors=report.survivors if report else (),
        pids=report.pids if report else (),
    )
