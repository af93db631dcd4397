"""The exceptions autotune raises.

One base, :class:`AutotuneError`, and a few flat subclasses that carry the context a user needs
to act: the file and location of a bad space, the command and log of a server that failed, the URL
of a benchmark that could not run. Foreign errors (OSError, httpx, SQLAlchemy, YAML) are translated
at the boundary with ``raise ... from e``. Only the CLI entry point turns these into a message and
an exit code.
"""

from __future__ import annotations

from pathlib import Path


class AutotuneError(Exception):
    """Base class of every error autotune reports to a user.

    ``hint`` says what to do next; it is printed on its own line under the message.
    """

    exit_code: int = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class ConfigError(AutotuneError):
    """A search space, profile, workload or option is invalid.

    ``source`` names the file (or option) and ``location`` the line or key inside it.
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        source: str | Path | None = None,
        location: str | None = None,
        hint: str | None = None,
    ) -> None:
        where = ""
        if source is not None:
            where = str(source)
            if location:
                where += f":{location}"
            where += ": "
        elif location:
            where = f"{location}: "
        super().__init__(f"{where}{message}", hint=hint)
        self.source = None if source is None else str(source)
        self.location = location


class EngineError(AutotuneError):
    """The engine cannot be used as asked: not installed, a knob its release lacks, a bad launch."""

    def __init__(
        self,
        message: str,
        *,
        command: list[str] | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.command = command


class ServerError(AutotuneError):
    """A server process failed to start, crashed, or could not be stopped."""

    def __init__(
        self,
        message: str,
        *,
        command: list[str] | None = None,
        exit_code: int | None = None,
        log_path: Path | None = None,
        hint: str | None = None,
    ) -> None:
        if log_path is not None:
            message = f"{message} (log: {log_path})"
        super().__init__(message, hint=hint)
        self.command = command
        self.process_exit_code = exit_code
        self.log_path = log_path


class BenchmarkError(AutotuneError):
    """A benchmark could not produce a measurement."""

    def __init__(self, message: str, *, url: str | None = None, hint: str | None = None) -> None:
        if url is not None:
            message = f"{message} (server: {url})"
        super().__init__(message, hint=hint)
        self.url = url


class BenchmarkTimeout(BenchmarkError):
    """A benchmark ran out of time: every request stalled, timed out or was cut at the deadline
    (a hung or far too slow server), so nothing could be measured."""


class StorageError(AutotuneError):
    """The study storage cannot be opened or written, or a study does not match its space."""

    def __init__(self, message: str, *, url: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.url = url


class Interrupted(AutotuneError):
    """The user stopped the run (Ctrl-C or SIGTERM); what was running has been recorded."""

    exit_code = 130


class Cancelled(AutotuneError):
    """A wait or a measurement was ended early because the run is being stopped (a signal).

    Raised in ordinary code (never from a signal handler) by the waits that watch for a stop;
    the study records what was running and turns it into :class:`Interrupted`.
    """

    exit_code = 130


class BundleError(AutotuneError):
    """A bundle of wheels for an offline box cannot be built or installed.

    ``kind`` names what went wrong, for scripts and tests: ``freeze``, ``no-wheel`` (no wheel
    satisfies every requirement on a package; ``requirers`` says who asked), ``tags`` (a wheel
    that does not fit the target), ``pip``, ``cuda``, ``manifest``, ``missing-part``,
    ``part-size``, ``checksum``, ``python``, ``archive``, ``unsafe-member``, ``import-check``,
    ``option``, ``output`` (a folder that cannot be written). ``path`` is the file concerned,
    ``expected`` / ``found`` the values compared.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        path: Path | None = None,
        expected: str | None = None,
        found: str | None = None,
        requirers: tuple[str, ...] = (),
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.kind = kind
        self.path = path
        self.expected = expected
        self.found = found
        self.requirers = requirers
