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


EAGLE3_HEAD = "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"


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


def test_a_simulated_eagle_space_runs_its_own_draft(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = SIM_SPACE.replace(
        "parameters:",
        "fixed: {speculative_algorithm: EAGLE3}\nparameters:\n"
        "  speculative_num_steps: {type: int, low: 1, high: 4}\n"
        "  speculative_eagle_topk: {choices: [1, 2]}\n"
        "  speculative_num_draft_tokens: {type: int, low: 2, high: 5}",
    ).replace("tp_size: 1", f"tp_size: 1\n  draft_model_path: {EAGLE3_HEAD}")
    code, report = _smoke(tmp_path, text, capsys)
    steps = _steps(report)
    assert code == 0, steps
    assert "EAGLE3" in steps["start"]["detail"]
    assert steps["benchmark"]["figures"]["accept_length"] > 1.0


@pytest.mark.parametrize(
    ("fixed", "choices", "want"),
    [
        ("EAGLE3", None, "NGRAM"),  # a trained head cannot be made on the box: NGRAM stands in
        (None, ["NGRAM", "STANDALONE"], "NGRAM"),
        (None, ["none", "STANDALONE"], "STANDALONE"),
        ("none", None, "none"),
    ],
)
def test_a_real_engine_runs_what_a_tiny_model_can(
    tmp_path: Path, fixed: str | None, choices: list[str] | None, want: str
) -> None:
    from autotune.smoke import smoke_config
    from autotune.space import load_space

    lines = [
        "name: s",
        "engine: {kind: sglang, sglang_version: '0.5.23', model_path: /m,",
        "  draft_model_path: /d, check_paths: false}",
    ]
    if fixed is not None:
        lines.append(f"fixed: {{speculative_algorithm: {fixed}}}")
    lines.append("parameters:")
    lines.append("  mem_fraction_static: {type: float, low: 0.6, high: 0.9}")
    if choices is not None:
        lines.append(f"  speculative_algorithm: {{choices: [{', '.join(choices)}]}}")
    space_file = tmp_path / "s.yaml"
    space_file.write_text("\n".join(lines) + "\n")
    config, _ = smoke_config(load_space(space_file), "/tiny")
    assert config.speculative_algorithm == want
