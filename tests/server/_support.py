"""What the server tests share: the child scripts, waiting for a condition, process checks."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def script(name: str, *args: object) -> list[str]:
    """The argv that runs one of the child scripts with this interpreter."""
    return [sys.executable, str(SCRIPTS / name), *(str(a) for a in args)]


def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Poll ``condition`` until it holds; fail the test if it does not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def read_pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()]


@dataclass(frozen=True)
class Verdict:
    category: str
    evidence: str | None
    is_crash: bool


class SubstringClassifier:
    """A small classifier with substring rules, enough to drive the start-up watcher."""

    RULES = (
        ("Not enough memory", "oom_kv_pool"),
        ("Capture cuda graph failed", "oom_cuda_graph"),
    )

    def __init__(self) -> None:
        self.fed: list[str] = []
        self.traceback = False
        self.last_error: str | None = None

    def feed(self, line: str) -> Verdict | None:
        self.fed.append(line)
        for needle, category in self.RULES:
            if needle in line:
                return Verdict(category, line, True)
        if line.startswith("Traceback"):
            self.traceback = True
        if "Error" in line:
            self.last_error = line
        return None

    def finish(self, exit_code: int | None = None) -> Verdict:
        if self.traceback:
            return Verdict("other_crash", self.last_error, True)
        return Verdict("unknown", None, False)
