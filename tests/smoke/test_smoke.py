"""`autotune smoke` through the CLI: every step on the simulated server, and a broken step named."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from autotune.cli import main

SIM_SPACE = """\
name: smoke-sim
engine:
  kind: sim
  model_path: meta-llama/Llama-3.1-8B-Instruct
  tp_size: 1
  check_paths: false
  sim: {profile: h100-llama-3.1-8b, dialect: "0.5.23", time_scale: 0.005}
workload: {concurrency: 1, num_prompts: 4, input_len: 128, output_len: 64}
objective: {metric: output_tok_s}
parameters:
  mem_fraction_static: {type: float, low: 0.60, high: 0.92, step: 0.01}
"""


def _smoke(tmp_path: Path, space_text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    space = tmp_path / "space.yaml"
    space.write_text(space_text)
    code = main(["smoke", "--space", str(space), "--dir", str(tmp_path / "run"), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _steps(report: dict) -> dict[str, dict]:
    return {s["name"]: s for s in report["steps"]}


def test_every_step_passes_on_the_simulated_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _smoke(tmp_path, SIM_SPACE, capsys)
    steps = _steps(report)
    assert code == 0 and report["passed"] is True
    assert list(steps) == ["engine", "model", "start", "benchmark", "stop", "low fraction"]
    assert steps["benchmark"]["figures"]["output_tok_s"] > 0
    assert "oom_kv_pool" in steps["low fraction"]["detail"]
    assert "mem-fraction-static" in steps["low fraction"]["evidence"]
    assert (tmp_path / "run" / "tiny-model" / "model.safetensors").is_file()
    assert (tmp_path / "run" / "start.log").is_file()
    mine = {p.pid for p in psutil.Process().children(recursive=True)}
    assert mine == set()


def test_a_missing_engine_fails_the_engine_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "name: smoke-real\n"
        "engine: {kind: sglang, model_path: /m, check_paths: false, "
        f"python: {tmp_path}/no-such-env/bin/python}}\n"
        "parameters:\n  mem_fraction_static: {type: float, low: 0.6, high: 0.9}\n"
    )
    code, report = _smoke(tmp_path, text, capsys)
    steps = _steps(report)
    assert code == 1
    assert steps["engine"]["passed"] is False
    assert "no-such-env" in steps["engine"]["detail"]
    assert all(steps[name]["passed"] is None for name in ("start", "benchmark", "low fraction"))


def test_a_launch_prefix_that_cannot_run_fails_the_start_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "name: smoke-prefix\n"
        "engine: {kind: sglang, model_path: /m, check_paths: false, sglang_version: '0.5.23', "
        f"launch_prefix: [{tmp_path}/no-such-launcher]}}\n"
        "parameters:\n  mem_fraction_static: {type: float, low: 0.6, high: 0.9}\n"
    )
    code, report = _smoke(tmp_path, text, capsys)
    steps = _steps(report)
    assert code == 1
    assert steps["engine"]["passed"] is True and steps["model"]["passed"] is True
    assert steps["start"]["passed"] is False
    assert steps["benchmark"]["passed"] is None and steps["low fraction"]["passed"] is None
