"""A server process: started in its own session, logged to a file, stopped with its whole tree."""

from __future__ import annotations

import logging
import os
import secrets
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from autotune._errors import ServerError
from autotune.server._closing import Closing
from autotune.server._launcher import PrefixLauncher, PrefixStop
from autotune.server._outcome import ProcessOutcome, signal_name
from autotune.server._tree import TOKEN_ENV, ProcessTree, StopReport

if TYPE_CHECKING:
    from autotune._launch import LaunchSpec

log = logging.getLogger(__name__)


def _always() -> bool:
    return True


class ServerProcess(Closing):
    """One launched server: its process, its log file, and everything it started.

    The command runs in a new session (so it leads a new process group) with stdin from
    ``/dev/null`` and stdout and stderr appended to one log file. Its environment is a copy of
    this process's environment with the launch's additions on top; ``PYTHONUNBUFFERED=1`` is
    added unless either sets it (so Python servers write each log line as it happens), and
    :data:`TOKEN_ENV` carries a value unique to this launch.

    With a launch ``prefix`` (the first elements of the command: ``docker exec BOX``), what
    runs is the prefix and then a launcher that starts the rest as a process-group leader, with
    the launch's environment additions (secret ones excepted: set those where the server runs),
    and records its pid there; the stop goes through the prefix first
    (:class:`~autotune.server._launcher.PrefixLauncher`), then to the prefix's own processes.

    Use it as a context manager: the server and all its descendants are stopped when the block
    ends, whatever ends it::

        with ServerProcess.launch(spec, log_path=path) as proc:
            result = wait_for_startup(proc, ...)
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        *,
        argv: tuple[str, ...],
        log_path: Path,
        log_offset: int,
        token: str,
        started_at: float,
        port: int | None,
        term_timeout_s: float,
        kill_timeout_s: float,
        launcher: PrefixLauncher | None = None,
    ) -> None:
        self._popen = popen
        self._launcher = launcher
        #: How the stop through the launch prefix went (None: no prefix, or not stopped yet).
        self.prefix_stop: PrefixStop | None = None
        self.argv = argv
        self.log_path = log_path
        #: Size of the log file before this launch: its lines start there.
        self.log_offset = log_offset
        self.token = token
        #: :func:`time.monotonic` at launch.
        self.started_at = started_at
        self.port = port
        self.term_timeout_s = term_timeout_s
        self.kill_timeout_s = kill_timeout_s
        self._pgid = popen.pid  # the leader of a new session: its group id is its pid
        try:
            self._create_time = psutil.Process(popen.pid).create_time()
        except psutil.Error:
            self._create_time = time.time()  # gone already: only for identity records
        self._tree = ProcessTree(
            root_pid=popen.pid,
            root_create_time=self._create_time,
            pgid=self._pgid,
            token=token,
            reap=popen.poll,
        )
        self._outcome: ProcessOutcome | None = None

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        log_path: Path | str,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        port: int | None = None,
        term_timeout_s: float = 30.0,
        kill_timeout_s: float = 10.0,
        prefix: Sequence[str] = (),
        secret_env: frozenset[str] = frozenset(),
        token: str | None = None,
    ) -> ServerProcess:
        """Start ``argv`` (never through a shell); its output is appended to ``log_path``.

        ``term_timeout_s`` and ``kill_timeout_s`` are what the context manager's stop uses.
        ``prefix``: the leading elements of ``argv`` that are a launch prefix (see the class
        docstring); ``secret_env``: names of ``env`` never put on the launcher's command line;
        ``token``: the launch's token (see :func:`new_token`; None: a new one), which every
        process of the server carries in its environment.

        Raises:
            ServerError: the command cannot be started (executable missing or not executable,
                working directory missing, log file not writable).
        """
        from autotune._redact import redact_argv

        args = tuple(str(a) for a in argv)
        path = Path(log_path)
        if not args:
            raise ServerError(
                "cannot start the server: the command is empty",
                log_path=path,
                hint="the engine built no command line; check the engine section of the space",
            )
        if cwd is not None and not Path(cwd).is_dir():
            raise _start_error(
                f"working directory {cwd} does not exist",
                args,
                path,
                hint="create the directory or choose another working directory",
            )
        child_env = dict(os.environ)
        child_env.update(env or {})
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        token = token or new_token()
        child_env[TOKEN_ENV] = token
        run = args
        launcher = None
        if prefix:
            launcher, run = PrefixLauncher.around(args, tuple(prefix), env or {}, secret_env, token)
        else:
            _check_executable(args, path, child_env.get("PATH"))
            run = as_subreaper(args)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            log = path.open("ab")
        except OSError as e:
            raise ServerError(
                f"cannot open the server log for writing: {e.strerror or e}",
                command=redact_argv(args),
                log_path=path,
                hint="choose a writable log directory (or free disk space)",
            ) from e
        with log:
            offset = log.tell()
            started_at = time.monotonic()
            try:
                popen = subprocess.Popen(
                    run,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=child_env,
                    cwd=None if cwd is None else str(cwd),
                    start_new_session=True,
                    close_fds=True,
                )
            except FileNotFoundError as e:
                raise _start_error(
                    f"executable {args[0]!r} not found",
                    args,
                    path,
                    hint="check the engine's python path (or launch prefix) in the space file",
                ) from e
            except PermissionError as e:
                raise _start_error(
                    f"permission denied running {args[0]!r}",
                    args,
                    path,
                    hint=f"make {args[0]} executable (chmod +x) or point to an interpreter",
                ) from e
            except OSError as e:
                raise _start_error(
                    str(e.strerror or e),
                    args,
                    path,
                    hint="check the command line and the working directory",
                ) from e
        return cls(
            popen,
            argv=args,
            log_path=path,
            log_offset=offset,
            token=token,
            started_at=started_at,
            port=port,
            term_timeout_s=term_timeout_s,
            kill_timeout_s=kill_timeout_s,
            launcher=launcher,
        )

    @classmethod
    def launch(
        cls,
        spec: LaunchSpec,
        *,
        log_path: Path | str,
        cwd: Path | str | None = None,
        term_timeout_s: float = 30.0,
        kill_timeout_s: float = 10.0,
        token: str | None = None,
    ) -> ServerProcess:
        """Start the server that ``spec`` describes (its argv, environment additions and port);
        ``token``: as for :meth:`start`."""
        return cls.start(
            spec.argv,
            log_path=log_path,
            env=spec.env,
            cwd=cwd,
            port=spec.port,
            term_timeout_s=term_timeout_s,
            kill_timeout_s=kill_timeout_s,
            prefix=spec.prefix,
            secret_env=spec.secret_env,
            token=token,
        )

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def pgid(self) -> int:
        return self._pgid

    @property
    def create_time(self) -> float:
        """The main process's start time as the operating system records it (epoch seconds)."""
        return self._create_time

    @property
    def launch_prefix(self) -> tuple[str, ...]:
        """The launch prefix the server runs through (empty: started directly)."""
        return self._launcher.prefix if self._launcher is not None else ()

    @property
    def pid_file(self) -> str | None:
        """Where, inside the launch prefix, the launcher writes the server's pid."""
        return self._launcher.pid_file if self._launcher is not None else None

    @property
    def stopped(self) -> bool:
        return self._outcome is not None

    @property
    def outcome(self) -> ProcessOutcome | None:
        """What :meth:`stop` returned, once it has run."""
        return self._outcome

    def poll(self) -> int | None:
        """The main process's return code once it has exited (negative: a signal), else None.

        Also notes the processes it has started, so that they can be stopped later even if
        they leave its process group and their parent exits.
        """
        code = self._popen.poll()
        if code is None:
            self._tree.remember(min_interval_s=1.0)
        return code

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the main process to exit; its return code, or None."""
        try:
            return self._popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def tree_pids(self) -> set[int]:
        """The pids of the main process and every descendant alive now."""
        return set(self._tree.members())

    def stop(
        self,
        term_timeout_s: float | None = None,
        kill_timeout_s: float | None = None,
        *,
        urgent: Callable[[], bool] | None = None,
    ) -> ProcessOutcome:
        """Stop the server and everything it started; safe to call again (same outcome).

        SIGTERM (and SIGCONT, for a stopped process) goes to the process group and to
        descendants that left it; after ``term_timeout_s`` whatever is still alive gets SIGKILL,
        and the stop waits up to ``kill_timeout_s`` more for it to go. ``urgent`` (a second
        Ctrl-C) skips the rest of the TERM wait: SIGKILL at once. A signal handler that raises
        (a plain Ctrl-C) does not abandon the stop either: the stop runs to its end and the
        exception follows. Only processes of this launch are signalled: its process group, its
        descendants, and processes carrying this launch's token; through a launch prefix, the
        group whose leader the launcher recorded there (checked by token and start time).
        """
        if self._outcome is not None:
            return self._outcome
        term = self.term_timeout_s if term_timeout_s is None else term_timeout_s
        kill = self.kill_timeout_s if kill_timeout_s is None else kill_timeout_s
        pending: BaseException | None = None
        hurry = urgent
        while True:
            try:
                report = self._stop_all(term, kill, hurry)
                break
            except KeyboardInterrupt as e:  # a handler that raises: escalate, never abandon
                pending = pending or e
                hurry = _always
        if pending is not None:
            self._finish_stop(report, kill)
            raise pending
        return self._finish_stop(report, kill)

    def _stop_all(self, term: float, kill: float, urgent: Callable[[], bool] | None) -> StopReport:
        """The stop through the launch prefix (if any), then of this host's processes."""
        if self._launcher is None:
            return self._tree.stop(term_timeout_s=term, kill_timeout_s=kill, urgent=urgent)
        inside = self._launcher.stop(
            term, kill, urgent=urgent, launching=lambda: self._popen.poll() is None
        )
        self.prefix_stop = inside
        if inside.result in ("unreachable", "survived"):
            from autotune._redact import redact_argv

            log.error(
                "the server could not be stopped through %s (%s); stop it by hand: its pid is "
                "in %s there",
                " ".join(redact_argv(self._launcher.prefix)),
                inside.detail or "it survived SIGKILL",
                self._launcher.pid_file,
            )
        # the launcher exits with its server: what is left here gets the rest of the TERM time
        left = max(term - inside.elapsed_s, min(term, 2.0))
        report = self._tree.stop(term_timeout_s=left, kill_timeout_s=kill, urgent=urgent)
        return StopReport(
            elapsed_s=inside.elapsed_s + report.elapsed_s,
            forced=report.forced or inside.forced,
            survivors=report.survivors,
            pids=report.pids,
        )

    def _finish_stop(self, report: StopReport, kill: float) -> ProcessOutcome:
        code = self._popen.poll()
        if code is None:
            code = self.wait(min(kill, 1.0))
        outcome = ProcessOutcome(
            exit_code=code,
            signal=signal_name(code),
            elapsed_s=report.elapsed_s,
            log_path=self.log_path,
            forced=report.forced,
            survivors=report.survivors,
            pids=report.pids,
            runtime_s=time.monotonic() - self.started_at,
        )
        self._outcome = outcome
        return outcome

    def close(self) -> None:
        """Stop the server (:meth:`stop`), as leaving its ``with`` block does."""
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._outcome is not None else "running"
        return f"ServerProcess(pid={self.pid}, {state}, log={self.log_path})"


def _start_error(why: str, args: tuple[str, ...], log_path: Path, *, hint: str) -> ServerError:
    """The server could not be started: ``why``, with its command (secrets redacted) and log."""
    from autotune._redact import redact_argv

    command = redact_argv(args)
    return ServerError(
        f"cannot start the server: {why}: {shlex.join(command)}",
        command=command,
        log_path=log_path,
        hint=hint,
    )


#: Run as the server's main process, before it becomes the server (``exec``): makes it the
#: "child subreaper" of its tree (Linux ``PR_SET_CHILD_SUBREAPER``, kept across ``exec``), then
#: runs the server's command in its place (same pid, same argv from then on).
_SUBREAPER = (
    "import ctypes, os, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "try:\n"
    "    os.execvp(sys.argv[1], sys.argv[1:])\n"
    "except OSError as e:\n"
    "    sys.stderr.write(f'autotune: cannot run {sys.argv[1]!r}: {e.strerror}\\n')\n"
    "    sys.exit(127)\n"
)


def as_subreaper(args: tuple[str, ...]) -> tuple[str, ...]:
    """``args`` run by a main process that adopts its tree's orphans (Linux only; elsewhere
    ``args`` as they are).

    A server's worker that leaves the server's process group and session (``setsid``) and
    clears its environment (the launch's token with it) is still found by the stop as long as
    it descends from the main process; once its own parent exits, the kernel gives it to the
    nearest subreaper above it. The main process being that subreaper, such a worker stays in
    the tree (see :mod:`autotune.server._tree`) instead of going to ``init``, where nothing
    could tell it from any other process. The interpreter runs isolated (``-I``): the server's
    ``PYTHON*`` variables are the server's.
    """
    import sys

    if not sys.platform.startswith("linux"):
        return args
    return (sys.executable, "-I", "-c", _SUBREAPER, *args)


def _check_executable(args: tuple[str, ...], log_path: Path, search: str | None) -> None:
    """What ``Popen`` would have said of the server's executable, said before the launch
    (through :func:`as_subreaper` the ``exec`` happens in the child).

    Raises:
        ServerError: not found, or not executable.
    """
    import errno
    import shutil

    exe = args[0]
    if os.sep in exe:
        found = exe if os.path.isfile(exe) else None
    else:
        found = shutil.which(exe, mode=os.F_OK, path=search)
    if found is None:
        raise _start_error(
            f"executable {exe!r} not found",
            args,
            log_path,
            hint="check the engine's python path (or launch prefix) in the space file",
        ) from FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), exe)
    if not os.access(found, os.X_OK):
        raise _start_error(
            f"permission denied running {exe!r}",
            args,
            log_path,
            hint=f"make {exe} executable (chmod +x) or point to an interpreter",
        ) from PermissionError(errno.EACCES, os.strerror(errno.EACCES), exe)


def new_token() -> str:
    """A launch token: recorded before a launch (:meth:`ProcessIdentity.pending`), it finds the
    server's processes even when the tuner dies before it could record their pid."""
    return secrets.token_hex(16)
