"""Fixtures of the study suite and its closing line (see _lab.py)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._lab import TALLY, StudyLab


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TALLY.checked:
        terminalreporter.write_sep("-", "study fault suite")
        terminalreporter.write_line(TALLY.line())
        for what in TALLY.lost + TALLY.outliving:
            terminalreporter.write_line(f"  {what}")


@pytest.fixture
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StudyLab]:
    bench = StudyLab(tmp_path, request.node.nodeid)
    TALLY.checked += 1
    try:
        yield bench
    finally:
        bench.close()


@pytest.fixture
def fault_tried() -> Callable[[str], None]:
    """Note a fault the suite injected (counted in the closing line)."""
    return TALLY.faults.append


@pytest.fixture
def bad_input_tried() -> Callable[[str], None]:
    """Note a bad input the suite fed the CLI (counted in the closing line)."""
    return TALLY.bad_inputs.append


@pytest.fixture
def postgres_url() -> str:
    """A PostgreSQL server's URL (.ci/postgres.sh starts one); skipped without one."""
    url = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("AUTOTUNE_REQUIRE_POSTGRES") == "1":
            pytest.fail("AUTOTUNE_REQUIRE_POSTGRES=1 but AUTOTUNE_TEST_POSTGRES_URL is not set")
        pytest.skip("no PostgreSQL server: set AUTOTUNE_TEST_POSTGRES_URL (.ci/postgres.sh)")
    return url
