"""What a study shows while it runs: a progress display on a terminal, lines otherwise,
and a debug log file per run whose path is printed when something goes wrong."""

from __future__ import annotations

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
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("autotune")
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    return path


def close_debug_log(path: Path) -> None:
    root = logging.getLogger("autotune")
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename) == path:
            handler.close()
            root.removeHandler(handler)


class StudyProgress:
    """A live line on a terminal (rich), plain lines on stderr otherwise."""

    def __init__(self, total: int, *, enabled: bool, title: str) -> None:
        self.total = total
        self.enabled = enabled
        self.title = title
        self._progress: Any = None
        self._task: Any = None
        self.best: str = "-"

    def __enter__(self) -> StudyProgress:
        if self.enabled:
            from rich.console import Console
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
                console=Console(stderr=True),
                transient=False,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(
                "study", total=self.total, title=self.title, phase="", best=self.best
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
            self._progress.update(self._task, phase=f"trial {number}: {text}")

    def finished(self, done: int, line: str, best: str | None = None) -> None:
        if best is not None:
            self.best = best
        if self._progress is not None:
            self._progress.update(self._task, completed=done, best=self.best, phase="")
            self._progress.console.print(line, highlight=False)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
