"""`autotune space check`: exit codes, located errors, the count of refused proposals."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.engines.sglang._rules import check_rules
from autotune.space import load_space

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "search_spaces").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_spaces_check_clean(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["space", "check", str(path)]) == 0
    out = capsys.readouterr().out
    space = load_space(path)
    assert f"space {space.name}" in out
    family = "vLLM" if space.engine.kind in ("vllm", "sim-vllm") else "SGLang"
    assert re.search(rf"{family}'s rules refuse \d+ of 1000 random proposals", out)
    assert _shipped_verdict(path) in out


def test_refused_count_matches_the_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "fixed: {speculative_algorithm: EAGLE3}\n"
        "parameters:\n"
        "  speculative_num_steps: {type: int, low: 1, high: 3}\n"
        "  speculative_eagle_topk: {choices: [1, 2, 4]}\n"
        "  speculative_num_draft_tokens: {type: int, low: 2, high: 16}\n"
    )
    assert main(["space", "check", str(path), "--proposals", "200", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    match = re.search(r"refuse (\d+) of 200", out)
    assert match
    space = load_space(path)
    expected = sum(check_rules(space.config_for(p)) is not None for p in space.sample(200, seed=5))
    assert int(match.group(1)) == expected
    assert expected > 100  # this shape is mostly refused, and the command says so
    assert "most proposals are refused" in out


def test_space_without_speculation_refuses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "workload: {concurrency: 64}\n"
        "parameters:\n  cuda_graph_max_bs: {choices: [64, 128]}\n"
        "  allreduce: {choices: [nccl, custom]}\n"
    )
    assert main(["space", "check", str(path), "--proposals", "50"]) == 0
    out = capsys.readouterr().out
    assert "refuse 0 of 50" in out
    assert "max_running_requests" not in out  # no speculation, no cap of 48


def test_high_concurrency_under_speculation_is_pointed_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "workload: {concurrency: 64}\n"
        "fixed: {speculative_algorithm: EAGLE3}\n"
        "parameters:\n  cuda_graph_max_bs: {choices: [64, 128]}\n"
    )
    assert main(["space", "check", str(path), "--proposals", "10"]) == 0
    assert "max_running_requests=64" in capsys.readouterr().out


def test_invalid_space_exits_2_with_the_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("parameters:\n  mem_fraction_static: {type: float, low: 0.7, high: 1.5}\n")
    assert main(["space", "check", str(path)]) == 2
    captured = capsys.readouterr()
    assert f"autotune: error: {path}:2 (parameters.mem_fraction_static.high)" in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["space", "check", str(tmp_path / "none.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_as_a_subprocess(tmp_path: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "autotune", "space", "check", "search_spaces/eagle3.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "search_spaces/eagle3.yaml: valid" in ok.stdout

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nname: y\nparameters: {}\n")
    failed = subprocess.run(
        [sys.executable, "-m", "autotune", "space", "check", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failed.returncode == 2
    assert f"{bad}:2 (name): duplicate key 'name'" in failed.stderr
    assert "Traceback" not in failed.stderr


def _shipped_verdict(path: Path) -> str:
    """What `space check` ends with for a shipped space on this machine: valid, or valid as a
    file where its engine cannot be launched here (an SGLang space without SGLang)."""
    from autotune._errors import EngineError
    from autotune.engines import create_engine

    space = load_space(path)
    try:
        create_engine(space.engine).check_installed()
    except EngineError:
        return f"valid as a file (fingerprint {space.fingerprint()}), but not runnable"
    return f"valid (fingerprint {space.fingerprint()})"


def test_an_sglang_space_without_sglang_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # an interpreter that cannot import SGLang whatever this machine has: Python without its
    # site-packages
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    path = tmp_path / "s.yaml"
    path.write_text(
        "engine: {kind: sglang, model_path: /m, draft_model_path: /d, tp_size: 1, "
        "check_paths: false, "
        f"python: {python}}}\n"
        "fixed: {speculative_algorithm: EAGLE3, speculative_eagle_topk: 1}\n"
        "parameters:\n"
        "  speculative_num_steps: {type: int, low: 1, high: 3}\n"
        "  speculative_num_draft_tokens: {type: int, low: 2, high: 4}\n"
    )
    assert main(["space", "check", str(path), "--proposals", "10"]) == 0
    out = capsys.readouterr().out
    warning = next(line for line in out.splitlines() if line.startswith("warning:"))
    assert "SGLang is not importable" in warning
    assert "`autotune study start` would refuse this space here" in warning
    assert "to fix: install SGLang" in warning
    assert f"valid (fingerprint {load_space(path).fingerprint()})" not in out
    assert out.rstrip().endswith("(see the warning above)")
