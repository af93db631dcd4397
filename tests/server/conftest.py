"""Fixtures of the server tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autotune.server import ServerProcess

from ._box import Box


@pytest.fixture
def start_server() -> Iterator[Callable[..., ServerProcess]]:
    """``ServerProcess.start`` whose processes are stopped after the test, even when it fails."""
    started: list[ServerProcess] = []

    def start(argv: list[str], **options: Any) -> ServerProcess:
        proc = ServerProcess.start(argv, **options)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop(term_timeout_s=0.1, kill_timeout_s=10)


@pytest.fixture
def box() -> Iterator[Box]:
    """A PID namespace standing for a container (skipped where none can be made)."""
    made = Box()
    try:
        yield made
    finally:
        made.close()
