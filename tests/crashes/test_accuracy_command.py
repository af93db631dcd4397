"""The command that prints how a rule set reads a folder of labelled logs, run as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, "-m", "tests.crashes.accuracy", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )


def test_it_prints_the_figure_and_every_miss() -> None:
    done = _run("tests/crashes/data/heldout", "--engine", "sglang")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("21/26 right (80.8%)")
    misses = [line for line in lines[1:] if line.startswith("  miss ")]
    assert len(misses) == 5
    assert any(
        "h15_nccl_system_error_unindented_cut.log: unknown_crash, not nccl_error" in m
        for m in misses
    )


def test_it_reads_one_split_and_another_engine() -> None:
    done = _run("tests/crashes/data/issues", "--split", "held_out")
    assert done.returncode == 0 and "12/12 right" in done.stdout
    vllm = _run("tests/engines/vllm/data/heldout", "--engine", "vllm")
    assert vllm.returncode == 0 and "19/26 right (73.1%)" in vllm.stdout


def test_a_folder_without_labels_is_refused_clearly(tmp_path: Path) -> None:
    done = _run(str(tmp_path))
    assert done.returncode == 2
    assert "cannot read the labelled logs in" in done.stderr and "Traceback" not in done.stderr
