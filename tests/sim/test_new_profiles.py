"""The 8x H100 Llama-3.1-70B, RTX 4090 Llama-3.1-8B and 8x H100 Qwen3-235B-A22B profiles.

Each profile is checked for the behaviour it exists to show, through ``SimModel.evaluate``: on
the NVLink box every all-reduce mode has its own cost, on the 4090 the static memory fraction is
bounded from both sides, and on the MoE box the best EAGLE-3 chain length at batch 1 and 64.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from autotune._knobs import ALLREDUCE_MODES, ServerConfig
from autotune.sim._model import SimModel
from autotune.sim._profile import list_profiles, load_profile
from autotune.sim._types import Verdict

LLAMA70 = "h100x8-llama-3.1-70b"
RTX4090 = "rtx4090-llama-3.1-8b"
QWEN3 = "h100x8-qwen3-235b-a22b"
EAGLE3 = {"speculative_algorithm": "EAGLE3"}


def evaluate(model: SimModel, workload: str | None = None, **params: Any) -> Verdict:
    return model.evaluate(ServerConfig.from_params(params), model.profile.workload(workload))


@pytest.fixture(scope="module")
def llama70() -> SimModel:
    return SimModel(load_profile(LLAMA70))


@pytest.fixture(scope="module")
def rtx4090() -> SimModel:
    return SimModel(load_profile(RTX4090))


@pytest.fixture(scope="module")
def qwen3() -> SimModel:
    return SimModel(load_profile(QWEN3))


@pytest.mark.parametrize("name", [LLAMA70, RTX4090, QWEN3])
def test_the_profile_ships_loads_and_starts_with_its_defaults(name: str) -> None:
    assert name in list_profiles()
    profile = load_profile(name)
    assert profile.name == name
    assert set(profile.hardware.allreduce) == set(ALLREDUCE_MODES)
    model = SimModel(profile)
    tp = profile.hardware.gpu_count
    for config in ({"tp_size": tp}, {"tp_size": tp, **EAGLE3}):
        verdict = evaluate(model, **config)
        assert verdict.status == "ok", (config, verdict.failure_line)
        assert verdict.output_tok_s and verdict.output_tok_s > 0


# --- 8x H100, Llama-3.1-70B: every all-reduce mode, each at its own speed ----------------------
def test_every_allreduce_mode_starts_on_the_nvlink_box_and_each_has_its_own_speed(
    llama70: SimModel,
) -> None:
    workload = llama70.profile.default_workload
    assert workload.concurrency >= 32
    speeds: dict[str, float] = {}
    for mode in ALLREDUCE_MODES:
        # NCCL Tree cannot be captured in CUDA graphs, as on every profile: it runs eagerly
        eager = mode == "nccl_tree"
        verdict = evaluate(llama70, tp_size=8, allreduce=mode, disable_cuda_graph=eager)
        assert verdict.status == "ok", (mode, verdict.failure_line)
        assert verdict.output_tok_s is not None
        speeds[mode] = verdict.output_tok_s
    for a, b in itertools.combinations(ALLREDUCE_MODES, 2):
        assert abs(speeds[a] - speeds[b]) > 1e-4 * max(speeds[a], speeds[b]), (a, b, speeds)
    # SGLang's own kernels over NVLink beat plain NCCL, and a forced ring is the slowest graph mode
    assert speeds["custom"] > speeds["nccl"] > speeds["nccl_ring"]
    assert speeds["nccl_tree"] < speeds["nccl_ring"]  # eager: kernel launches of 80 layers


def test_nccl_tree_fails_only_under_cuda_graphs_on_the_nvlink_box(llama70: SimModel) -> None:
    verdict = evaluate(llama70, tp_size=8, allreduce="nccl_tree")
    assert verdict.status == "graph_capture_other"
    assert verdict.failure_line and "NCCL_ALGO=Tree" in verdict.failure_line


def test_the_70b_default_fraction_and_graph_batch_follow_sglangs_rule(llama70: SimModel) -> None:
    runtime = llama70.profile.runtime
    assert (runtime.default_cuda_graph_max_bs, runtime.default_chunked_prefill) == (512, 8192)
    verdict = evaluate(llama70, "mt-bench", tp_size=8, **EAGLE3)
    # reserve 512 + 8,192 x 1.5 + 512 x 2 + 1,024 MiB (over the 10 GiB floor) + 2,048 for EAGLE
    total_mib = llama70.profile.hardware.memory_gib * 1024
    expected = round((total_mib - 14848 - 2048) / total_mib, 3)
    assert verdict.details["mem_fraction_static"] == pytest.approx(expected)


def test_eagle3_pays_on_the_70b_at_batch_1_and_less_at_concurrency_64(llama70: SimModel) -> None:
    spec = {**EAGLE3, "speculative_num_steps": 5, "speculative_eagle_topk": 4}
    gains = []
    for workload, running in (("mt-bench", 1), ("chat-c64", 64)):
        base = evaluate(llama70, workload, tp_size=8, max_running_requests=running)
        eagle = evaluate(
            llama70,
            workload,
            tp_size=8,
            max_running_requests=running,
            cuda_graph_max_bs=running,
            speculative_num_draft_tokens=8,
            **spec,
        )
        assert base.output_tok_s and eagle.output_tok_s
        gains.append(eagle.output_tok_s / base.output_tok_s)
    assert gains[0] > 1.5
    assert gains[0] > gains[1]


# --- RTX 4090, Llama-3.1-8B: memory tight in both directions -----------------------------------
def test_a_low_fraction_dies_in_the_kv_pool_on_the_4090(rtx4090: SimModel) -> None:
    verdict = evaluate(rtx4090, **EAGLE3, mem_fraction_static=0.70)
    assert verdict.status == "oom_kv_pool"
    assert verdict.failure_line and "Not enough memory" in verdict.failure_line


def test_a_high_fraction_dies_in_graph_capture_on_the_4090(rtx4090: SimModel) -> None:
    verdict = evaluate(rtx4090, **EAGLE3, mem_fraction_static=0.93)
    assert verdict.status == "oom_cuda_graph"
    assert verdict.failure_line and "Capture cuda graph failed" in verdict.failure_line


def test_a_band_of_fractions_in_between_starts_on_the_4090(rtx4090: SimModel) -> None:
    statuses = {
        f: evaluate(rtx4090, **EAGLE3, mem_fraction_static=f).status
        for f in (0.70, 0.74, 0.78, 0.82, 0.86, 0.90, 0.93)
    }
    started = [f for f, s in statuses.items() if s == "ok"]
    assert started == [0.74, 0.78, 0.82, 0.86, 0.90], statuses
    # the automatic fraction lands inside the band, leaving a KV pool of a few thousand tokens
    auto = evaluate(rtx4090, **EAGLE3)
    assert auto.status == "ok" and auto.kv_tokens is not None
    assert 0.74 < auto.details["mem_fraction_static"] < 0.90
    assert 1_000 < auto.kv_tokens < 20_000


def test_the_4090_defaults_are_sglangs_for_gpus_under_35_gb(rtx4090: SimModel) -> None:
    runtime = rtx4090.profile.runtime
    assert (runtime.default_cuda_graph_max_bs, runtime.default_chunked_prefill) == (16, 2048)
    # no 10 GiB floor under 60 GB: 512 + 2,048 x 1.5 + 16 x 2 + 128 MiB, + 2,048 for EAGLE
    total_mib = rtx4090.profile.hardware.memory_gib * 1024
    expected = round((total_mib - 3744 - 2048) / total_mib, 3)
    assert evaluate(rtx4090, **EAGLE3).details["mem_fraction_static"] == pytest.approx(expected)


def test_allreduce_modes_on_the_4090_fall_back_to_nccl(rtx4090: SimModel) -> None:
    hardware = rtx4090.profile.hardware
    for mode in ALLREDUCE_MODES:
        assert hardware.effective_allreduce(mode)[0] in {"nccl", "nccl_ring", "nccl_tree"}


# --- 8x H100, Qwen3-235B-A22B: the best chain length at batch 1 and 64 ------------------------
def best_steps(model: SimModel, workload: str, running: int) -> int:
    """The EAGLE-3 top-k 1 step count (1..6, draft tokens = steps + 1) with the most tok/s."""
    speeds: dict[int, float] = {}
    for steps in range(1, 7):
        verdict = evaluate(
            model,
            workload,
            tp_size=8,
            max_running_requests=running,
            cuda_graph_max_bs=running,
            speculative_eagle_topk=1,
            speculative_num_steps=steps,
            speculative_num_draft_tokens=steps + 1,
            **EAGLE3,
        )
        assert verdict.status == "ok", (steps, verdict.failure_line)
        assert verdict.output_tok_s is not None
        speeds[steps] = verdict.output_tok_s
    return max(speeds, key=speeds.__getitem__)


def test_qwen3_prefers_shorter_chains_at_batch_64_than_at_batch_1(qwen3: SimModel) -> None:
    at_1 = best_steps(qwen3, "chat-c1", 1)
    at_64 = best_steps(qwen3, "chat-c64", 64)
    assert at_64 < at_1, (at_1, at_64)
