"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _quiet_optuna(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_NO_PROGRESS", "1")


def repo_path(*parts: str) -> Path:
    return REPO.joinpath(*parts)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0", "false")


@pytest.fixture(scope="session")
def mix_study(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One ``autotune study start`` over the load mix (tests/study/_loads.py), shared by the
    study's and the report's tests of it; a test that changes it works on a copy."""
    from study._loads import run_mix_study

    return run_mix_study(tmp_path_factory.mktemp("mix-study"))
