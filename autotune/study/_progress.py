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

    One bar for the whole study: the search's trials, then the confirmation's runs, with the
    phase named (``search``, ``confirm round 2 (3 to 10)``) and an estimate of the time left:
    the starts still planned (the search's trials left, then ``confirm_runs``: the candidates
    and the baseline for the confirmation's least rounds; once there, the rest of each round)
    times the mean wall time of the starts measured so far, labelled as an estimate.

    Everything autotune prints through rich is literal text: trial lines carry role tags such as
    ``[baseline]`` that rich would otherwise read as markup and drop. ``quiet`` prints nothing
    (the search benchmark's studies).
    """

    def __init__(
        self,
        total: int,
        *,
        enabled: bool,
        title: str,
        console: Any = None,
        quiet: bool = False,
        confirm_runs: int = 0,
        searched: int = 0,
        clock: Any = time.monotonic,
    ) -> None:
        self.total = total
        self.enabled = enabled and not quiet
        self.quiet = quiet
        self.title = title
        self._progress: Any = None
        self._task: Any = None
        self.best: str = "-"
        self._console = console  # a rich Console (tests); stderr's by default
        self._clock = clock
        #: The search's trials finished (``searched``: before this run), and the most it runs
        #: (lowered where it stops early).
        self.searched = searched
        self.search_total = max(total, searched)
        #: Confirmation runs ended, and still planned (see the class docstring).
        self.confirmed = 0
        self.confirm_left = confirm_runs
        self.phase_name = "search"
        self._durations: list[float] = []
        self._run_started: float | None = None

    # --- what the bar says -----------------------------------------------------------------
    @property
    def planned(self) -> int:
        """Every start of the study as now planned: done, running and to come."""
        return self.search_total + self.confirmed + self.confirm_left

    @property
    def done(self) -> int:
        return self.searched + self.confirmed

    def remaining_s(self) -> float | None:
        """The estimate of the wall time left (None until a start was timed)."""
        if not self._durations:
            return None
        mean = sum(self._durations) / len(self._durations)
        left = max(self.planned - self.done, 0)
        running = 0.0
        if self._run_started is not None and left:
            running = min(self._clock() - self._run_started, mean)  # the current one's part
        return max(left * mean - running, 0.0)

    def estimate(self) -> str:
        left = self.remaining_s()
        if left is None:
            return "time left: estimated after the first start"
        minutes = left / 60
        text = (
            f"{left:.0f} s"
            if left < 90
            else f"{minutes:.0f} min"
            if minutes < 90
            else (f"{minutes / 60:.1f} h")
        )
        return f"~{text} left (estimate)"

    # --- events ----------------------------------------------------------------------------
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
                TextColumn("{task.fields[stage]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}"),
                TextColumn("{task.fields[phase]}"),
                TextColumn("best {task.fields[best]}"),
                console=self._console or Console(stderr=True),
                transient=False,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(
                "study",
                total=self.planned,
                title=escape(self.title),
                stage=escape(self.phase_name),
                eta=escape(self.estimate()),
                phase="",
                best=self._best(),
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

    def started(self) -> None:
        """A server start (a trial's or a confirmation run's) begins: timed until it ends."""
        self._run_started = self._clock()
        self._refresh()

    def _ended(self) -> None:
        if self._run_started is not None:
            self._durations.append(self._clock() - self._run_started)
            self._run_started = None

    def phase(self, number: int, text: str) -> None:
        if self._progress is not None:
            from rich.markup import escape

            self._progress.update(self._task, phase=escape(f"trial {number}: {text}"))

    def finished(self, done: int, line: str, best: str | None = None) -> None:
        """A trial of the search ended (``done``: the study's finished trials)."""
        if best is not None:
            self.best = best
        self._ended()
        self.searched = done
        self.search_total = max(self.search_total, done)
        self._refresh(phase="")
        self._print(line)

    def search_stopped(self, why: str) -> None:
        """The search ends before its target, for ``why``: said now, and the bar shortened."""
        line = f"search stopped at {self.searched} of {self.search_total} trials: {why}"
        self.search_total = self.searched
        self._refresh()
        self._print(line)

    def confirming(
        self, round_: int, rounds: tuple[int, int], left_in_round: int, arms: int
    ) -> None:
        """A confirmation run begins: round ``round_`` (0-based) of ``rounds`` (least, most),
        with ``left_in_round`` runs of it to go counting this one, ``arms`` measured each
        round."""
        least, most = rounds
        self.search_total = self.searched
        self.confirm_left = left_in_round + arms * max(least - round_ - 1, 0)
        self.phase_name = f"confirm round {round_ + 1} ({least} to {most})"
        self.started()

    def confirm_ended(self) -> None:
        """A confirmation run ended, however it ended."""
        self._ended()
        self.confirmed += 1
        self.confirm_left = max(self.confirm_left - 1, 0)
        self._refresh()

    def note(self, line: str) -> None:
        """Print ``line`` (a confirmation measurement, the verdict) below the live line."""
        self._print(line)

    def _print(self, line: str) -> None:
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False)
        elif not self.quiet:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def _refresh(self, **fields: Any) -> None:
        if self._progress is None:
            return
        from rich.markup import escape

        self._progress.update(
            self._task,
            total=self.planned,
            completed=self.done,
            stage=escape(self.phase_name),
            eta=escape(self.estimate()),
            best=self._best(),
            **fields,
        )

    def _best(self) -> str:
        from rich.markup import escape

        return escape(self.best)
