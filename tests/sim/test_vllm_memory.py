"""vLLM's memory rule in the simulator: the KV cache is what the instance's share leaves."""

from __future__ import annotations

import pytest

from autotune._knobs import ServerConfig
from autotune.sim import SimModel, load_profile
from autotune.sim._vllm_memory import plan_vllm_memory, vllm_capture_sizes

PROFILE = load_profile("h100-llama-3.1-8b")


def eagle(utilization: float, **knobs: object) -> ServerConfig:
    model = SimModel(PROFILE, engine="vllm")
    config = ServerConfig(
        speculative_algorithm="EAGLE3", speculative_num_steps=4, gpu_memory_utilization=utilization
    )
    return model.resolve(config.replace(**knobs))


def test_kv_cache_is_the_share_less_weights_activations_and_graphs() -> None:
    mem = plan_vllm_memory(PROFILE, eagle(0.9))
    m = mem.plan
    left = 0.9 * m.total_gib - m.context_gib - m.target_weights_gib - m.draft_weights_gib
    left -= mem.activation_gib + mem.graph_estimate_gib
    assert m.kv_pool_gib == pytest.approx(left)
    assert mem.failure is None and m.draft_weights_gib > 0 and mem.graph_estimate_gib > 0
    per_token = PROFILE.model.kv_bytes_per_gpu(1) + PROFILE.draft("EAGLE3").kv_bytes_per_token
    assert mem.num_blocks == int(left * 1024**3 // (per_token * 16))
    assert m.kv_tokens == mem.num_blocks * 16  # whole blocks of --block-size tokens


def test_more_share_more_cache_and_a_bigger_token_budget_less() -> None:
    caches = [plan_vllm_memory(PROFILE, eagle(u)).plan.kv_tokens for u in (0.6, 0.75, 0.9)]
    assert caches == sorted(caches) and len(set(caches)) == 3
    small = plan_vllm_memory(PROFILE, eagle(0.9, chunked_prefill_size=2048)).plan.kv_tokens
    large = plan_vllm_memory(PROFILE, eagle(0.9, chunked_prefill_size=32768)).plan.kv_tokens
    assert small > caches[-1] > large  # the profiling run's activations grow with the budget


@pytest.mark.parametrize(
    ("utilization", "knobs", "failure"),
    [
        (0.20, {}, "no_blocks"),  # the share does not even hold weights, activations, graphs
        (0.40, {}, "max_model_len"),  # blocks, but fewer than one 131,072-token request needs
        (0.99, {"cuda_graph_max_bs": 512}, "graph"),  # the drafter's graphs outside the share
        (0.99, {"cuda_graph_max_bs": 512, "disable_cuda_graph": True}, None),  # eager: none
        (0.90, {}, None),
    ],
)
def test_where_start_up_fails(utilization: float, knobs: dict[str, object], failure: str) -> None:
    assert plan_vllm_memory(PROFILE, eagle(utilization, **knobs)).failure == failure


def test_a_shorter_max_model_len_fits_where_the_full_one_does_not() -> None:
    config = eagle(0.40)
    assert plan_vllm_memory(PROFILE, config).failure == "max_model_len"
    assert plan_vllm_memory(PROFILE, config, max_model_len=8192).failure is None


def test_weights_that_do_not_fit_the_gpu_fail_while_loading() -> None:
    big = load_profile("h100x8-llama-3.1-70b")
    one = ServerConfig(gpu_memory_utilization=0.9)
    assert plan_vllm_memory(big, one).failure == "weights"
    assert plan_vllm_memory(big, one.replace(tp_size=8)).failure is None


def test_capture_sizes_are_vllms() -> None:
    assert vllm_capture_sizes(512)[:6] == [1, 2, 4, 8, 16, 24]
    assert vllm_capture_sizes(512)[-3:] == [480, 496, 512] and 256 in vllm_capture_sizes(512)
    assert vllm_capture_sizes(20) == [1, 2, 4, 8, 16]


def test_the_model_serves_with_vllms_cache_and_speculation_pays_at_batch_one() -> None:
    model = SimModel(PROFILE, engine="vllm")
    base = model.evaluate(ServerConfig(gpu_memory_utilization=0.9))
    spec = model.evaluate(eagle(0.9))
    assert base.status == spec.status == "ok"
    assert spec.output_tok_s > 1.3 * base.output_tok_s and spec.accept_length > 1.5
    assert model.evaluate(eagle(0.3)).status == "oom_kv_pool"
    assert model.evaluate(eagle(0.99, cuda_graph_max_bs=512)).status == "oom_cuda_graph"
