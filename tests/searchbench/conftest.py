"""A tiny space on the simulated seed system, so every study of the benchmark runs in seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

TINY = """
name: tiny
engine:
  kind: sim
  model_path: moonshotai/Kimi-K2.5
  draft_model_path: /data/eagle3/kimi-k2.5-eagle3
  tp_size: 8
  sim: {profile: rtxpro6000x8-kimi-k2.5}
workload:
  name: agentic-long
  concurrency: 4
  num_prompts: 4
  warmup: 1
  input_len: {mean: 4000, distribution: lognormal, spread: 0.25, min: 1500, max: 12000}
  output_len: 64
  seed: 7
objective: {metric: output_tok_s}
fixed: {speculative_algorithm: EAGLE3}
parameters:
  speculative_num_steps: {type: int, low: 1, high: 3}
  speculative_eagle_topk: {type: categorical, choices: [1, 2]}
  speculative_num_draft_tokens: {type: int, low: 2, high: 4}
  cuda_graph_max_bs: {type: categorical, choices: [16, 512]}
  mem_fraction_static: {type: float, low: 0.74, high: 0.94, step: 0.1}
  allreduce: {type: categorical, choices: [nccl, flashinfer_fusion]}
enqueue:
  baseline: {allreduce: nccl, cuda_graph_max_bs: 128}
"""


@pytest.fixture
def tiny_space(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path
