"""Fixtures that start simulated servers and always kill them afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ._procs import SimLauncher


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimLauncher]:
    launcher = SimLauncher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


@pytest.fixture(scope="module")
def module_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimLauncher]:
    launcher = SimLauncher(tmp_path_factory.mktemp("sim"))
    try:
        yield launcher
    finally:
        launcher.close()
