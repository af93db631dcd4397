"""``autotune --version`` prints the installed version (there was no way to ask)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest

import autotune
from autotune.cli import main


def test_version_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out == f"autotune {version('autotune')}\n"
    assert version("autotune") == autotune.__version__  # the fallback agrees with the install


def test_version_as_a_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"autotune {autotune.__version__}"
    assert "Traceback" not in done.stderr
