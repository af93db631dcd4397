"""``autotune sim calibration``: every target of the shipped profiles, reached."""

from __future__ import annotations

import pytest

from autotune.cli import main
from autotune.sim._calibration import Calibration, format_checks


def test_every_calibration_target_holds() -> None:
    checks = Calibration().checks()
    failed = [c for c in checks if not c.ok]
    assert not failed, format_checks(failed)
    names = " ".join(c.name for c in checks)
    for number in ("1", "2", "3", "4", "5", "6", "7", "9", "10", "11", "12"):
        assert f"{number}." in names


def test_the_command_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "calibration"]) == 0
    out = capsys.readouterr().out
    assert "baseline 128 / 512" in out and "oom_kv_pool / ok" in out
