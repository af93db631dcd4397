"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _quiet_optuna(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_NO_PROGRESS", "1")


def repo_path(*parts: str) -> Path:
    return REPO.joinpath(*parts)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0", "false")
