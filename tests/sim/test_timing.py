"""The step-time model against a real GPU, and the parts of a forward pass.

``data/h200_step_time.jsonl`` and ``data/h200_draft_step.jsonl`` are this project's measurements
on one H200 (2026-12-01, random weights of Llama-3.1-8B's shapes, CUDA-graph replay, so kernel
times without launch overhead or attention): the target's linears and LM head, and one EAGLE-3
draft step (fc, one decoder layer, a 32k-vocabulary LM head), by tokens per forward. The
``h200-llama-3.1-8b`` profile's forward and draft-step kernels must follow them within 15% at
every measured token count, the gradual turn from memory-bound to compute-bound included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune._knobs import ServerConfig
from autotune.sim import load_profile
from autotune.sim._timing import StepTimer, soft_roofline

DATA = Path(__file__).parent / "data"
EAGLE3 = ServerConfig(
    speculative_algorithm="EAGLE3",
    speculative_num_steps=3,
    speculative_eagle_topk=1,
    speculative_num_draft_tokens=4,
)


def measured(name: str, **match: str) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]
    return [
        (int(r["tokens"]), float(r["ms"]))
        for r in rows
        if "tokens" in r and all(r.get(k) == v for k, v in match.items())
    ]


@pytest.fixture(scope="module")
def h200() -> StepTimer:
    return StepTimer(load_profile("h200-llama-3.1-8b"), EAGLE3)


def test_the_forward_curve_follows_the_h200_within_15_percent(h200: StepTimer) -> None:
    points = measured("h200_step_time.jsonl", kind="linear")
    assert [t for t, _ in points][:1] == [1] and points[-1][0] == 4096
    ratios = {t: h200.forward(t, 0.0, graph=True).kernel_ms / ms for t, ms in points}
    print("\nforward model / H200 by tokens:", {t: round(r, 3) for t, r in ratios.items()})
    assert all(0.85 <= r <= 1.15 for r in ratios.values()), ratios


def test_the_draft_step_follows_the_h200_within_15_percent(h200: StepTimer) -> None:
    points = measured("h200_draft_step.jsonl", kind="eagle3_draft_step", vocab="32k")
    assert len(points) >= 6
    rt_overhead = h200.draft.step_overhead_ms if h200.draft is not None else 0.0
    ratios = {t: (h200.draft_forward_ms(t, graph=True) - rt_overhead) / ms for t, ms in points}
    print("\ndraft step model / H200 by tokens:", {t: round(r, 3) for t, r in ratios.items()})
    assert all(0.85 <= r <= 1.15 for r in ratios.values()), ratios


def test_the_transition_is_gradual_not_a_corner(h200: StepTimer) -> None:
    """At 128 tokens both parts are below the one-token time, and the pass still costs more
    (the H200 measured 1.46x): the sharp roofline ``max(memory, compute)`` would say 1.0x."""
    one = h200.forward(1, 0.0, graph=True)
    wide = h200.forward(128, 0.0, graph=True)
    assert max(wide.memory_ms, wide.compute_ms) <= one.kernel_ms * 1.01
    assert wide.kernel_ms / one.kernel_ms > 1.15


def test_compute_is_milliseconds_of_gflop_over_tflops(h200: StepTimer) -> None:
    """4,096 tokens of 15 GFLOP each at the profile's achieved throughput: about 93 ms."""
    hw = h200.profile.hardware
    cost = h200.forward(4096, 0.0, graph=True)
    expected = 4096 * h200.profile.model.flops_per_token_g / hw.tflops("bf16")
    assert cost.compute_ms == pytest.approx(expected)
    assert 60.0 < cost.compute_ms < 120.0


@pytest.mark.parametrize(
    ("memory", "compute", "sharpness", "expected"),
    [(3.0, 4.0, 2.0, 5.0), (4.0, 0.0, 2.0, 4.0), (0.0, 0.0, 2.0, 0.0), (2.0, 2.0, 1.0, 4.0)],
)
def test_soft_roofline(memory: float, compute: float, sharpness: float, expected: float) -> None:
    assert soft_roofline(memory, compute, sharpness) == pytest.approx(expected)
    assert soft_roofline(compute, memory, sharpness) == pytest.approx(expected)


def test_kv_heads_stop_sharding_the_cache_at_their_count() -> None:
    """Eight KV heads over 16 ranks: each rank holds a whole head, the cache per GPU is that
    of tp 8 (heads replicated), not half of it."""
    model = load_profile("h200-llama-3.1-8b").model
    assert model.kv_heads == 8
    assert model.kv_bytes_per_gpu(4) == model.kv_bytes_per_token / 4
    assert model.kv_bytes_per_gpu(16) == model.kv_bytes_per_gpu(8) == model.kv_bytes_per_token / 8
