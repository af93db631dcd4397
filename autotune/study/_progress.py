"""What a study shows while it runs: a progress display on a terminal, lines otherwise,
and a debug log file per run whose path is printed when something goes wrong."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

log = logging.getLogger("autotune")


def progress_wanted(explicit: bool | None) -> bool:
    if explicit is not None:
        return explicit
    return sys.stderr.isatty() and not os.environ.get("AUTOTUNE_NO_PROGRESS")


def open_debug_log(folder: Path) -> Path:
    """Send autotune's DEBUG log to a new file in ``folder`` for this run; return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / time.strftime("run-%Y%m%d-%H%M%S.log")
    n = 1
    while path.exists():
        path = folder / time.strftime(f"run-%Y%m%d-%H%M%S-{n}.log")
        n += 1
    handler = _DebugLogHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("autotune")
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    return path


def close_debug_log(path: Path) -> None:
    root = logging.getLogger("autotune")
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename) == path:
            root.removeHandler(handler)
            # (the last lines may not flush on a full disk: nothing is left to do about it)
            with contextlib.suppress(OSError):
                handler.close()


class _RedactingFormatter(logging.Formatter):
    """Every line of the debug log with its secrets replaced (:func:`autotune._redact.redact_text`:
    a storage URL's password, token-looking words, ``NAME=secret``), whoever logged it."""

    def format(self, record: logging.LogRecord) -> str:
        from autotune._redact import redact_text

        return redact_text(super().format(record))


class _DebugLogHandler(logging.FileHandler):
    """The debug log file; when it cannot be written (a full disk) it goes quiet.

    logging's default prints "--- Logging error ---" and a traceback for every record that
    fails; on a full disk that buried the one message that says what happened.
    """

    broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            self.broken = True
            return
        super().handleError(record)


class StudyProgress:
    """A live line on a terminal (rich), plain lines on stderr otherwise.

    Everything autotune prints through rich is literal text: trial lines carry role tags such as
    ``[baseline]`` that rich would otherwise read as markup and drop. ``quiet`` prints nothing
    (the search benchmark's studies).
    """

    def __init__(
        self, total: int, *, enabled: bool, title: str, console: Any = None, quiet: bool = False
    ) -> None:
        self.total = total
        self.enabled = enabled and not quiet
        self.quiet = quiet
        self.title = title
        self._progress: Any = None
        self._task: Any = None
        self.best: str = "-"
        self._console = console  # a rich Console (tests); stderr's by default

    def __enter__(self) -> StudyProgress:
        if self.enabled:
            from rich.console import Console
            from rich.markup import escape
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.fields[title]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[phase]}"),
                TextColumn("best {task.fields[best]}"),
                console=self._console or Console(stderr=True),
                transient=False,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(
                "study", total=self.total, title=escape(self.title), phase="", best=self._best()
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.__exit__(exc_type, exc, tb)

    def phase(self, number: int, text: str) -> None:
        if self._progress is not None:
            from rich.markup import escape

            self._progress.update(self._task, phase=escape(f"trial {number}: {text}"))

    def finished(self, done: int, line: str, best: str | None = None) -> None:
        if best is not None:
            self.best = best
        if self._progress is not None:
            self._progress.update(self._task, completed=done, best=self._best(), phase="")
            self._progress.console.print(line, markup=False, highlight=False)
        elif not self.quiet:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def note(self, line: str) -> None:
        """Print ``line`` (a confirmation measurement, the verdict) below the live line."""
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False)
        elif not self.quiet:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def _best(self) -> str:
        from rich.markup import escape

        return escape(self.best)
