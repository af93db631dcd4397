"""vLLM's batch-size schedule of speculative tokens: the per-load winners as one vllm serve."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from autotune._knobs import ServerConfig
from autotune.engines import EngineSpec, create_engine
from autotune.engines.vllm import VLLMEngine
from autotune.engines.vllm._schedule import release_refusal

SPEC = EngineSpec(
    kind="vllm",
    vllm_version="0.33.0",
    model_path="/models/llama",
    draft_model_path="/models/eagle3",
    tp_size=1,
    check_paths=False,
)


def _engine(release: str = "0.33.0") -> VLLMEngine:
    engine = create_engine(dataclasses.replace(SPEC, vllm_version=release))
    assert isinstance(engine, VLLMEngine)
    return engine


def _chain(steps: int, **knobs: object) -> ServerConfig:
    return ServerConfig(
        speculative_algorithm="EAGLE3",
        speculative_num_steps=steps,
        gpu_memory_utilization=0.9,
        cuda_graph_max_bs=64,
        tp_size=1,
        **knobs,  # type: ignore[arg-type]
    )


def _speculative_config(command: str) -> dict[str, object]:
    words = shlex.split(command)
    return dict(json.loads(words[words.index("--speculative-config") + 1]))


def test_the_winners_become_one_serve_with_tokens_by_batch_size() -> None:
    baseline = ServerConfig(gpu_memory_utilization=0.9, tp_size=1)
    choices = [(1, _chain(5)), (16, _chain(3)), (64, baseline)]
    plan = _engine().load_schedule(choices, _chain(3))
    assert plan.expressible, plan.reason
    assert plan.command is not None and " serve /models/llama " in plan.command
    config = _speculative_config(plan.command)
    # the buffers are sized for the largest K; each range runs its winner's, 0 without drafting
    assert config["num_speculative_tokens"] == 5
    assert config["num_speculative_tokens_per_batch_size"] == [
        [1, 15, 5],
        [16, 63, 3],
        [64, 4096, 0],
    ]
    assert config["method"] == "eagle3" and config["model"] == "/models/eagle3"
    assert "--gpu-memory-utilization 0.9" in plan.command
    assert plan.note is not None and "largest K" in plan.note


def test_the_last_range_ends_at_the_servers_largest_batch() -> None:
    plan = _engine().load_schedule(
        [(1, _chain(4)), (32, _chain(2))], _chain(2, max_running_requests=128)
    )
    assert plan.command is not None
    config = _speculative_config(plan.command)
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 31, 4], [32, 128, 2]]
    assert "--max-num-seqs 128" in plan.command


@pytest.mark.parametrize(
    ("version", "has"),
    [("0.33.0", True), ("0.25.1", True), ("0.28.0+cu129", True), ("0.25.0", False),
     ("0.10.2", False), (None, False)],
)  # fmt: skip
def test_the_schedule_comes_with_its_release(version: str | None, has: bool) -> None:
    why = release_refusal(version)
    assert (why is None) == has
    if not has:
        assert why is not None and "0.25.1" in why


def test_a_release_without_the_schedule_cannot_express_it() -> None:
    engine = _engine("0.10.2")  # autotune's table of 0.10.2
    plan = engine.load_schedule([(1, _chain(4)), (16, _chain(2))], _chain(2))
    assert not plan.expressible and plan.reason is not None
    assert "vLLM 0.10.2 has no num_speculative_tokens_per_batch_size" in plan.reason
    assert engine.schedule_refusal(_chain(2)) == plan.reason


def test_what_the_schedule_cannot_follow_is_named() -> None:
    engine = _engine()
    ngram = ServerConfig(speculative_algorithm="NGRAM", speculative_num_steps=3, tp_size=1)
    assert engine.schedule_refusal(_chain(3)) is None
    assert engine.schedule_refusal(ServerConfig(tp_size=1)) is None  # no speculation: K 0
    why = engine.schedule_refusal(ngram)
    assert why is not None and "ngram" in why
    plan = engine.load_schedule([(1, ngram), (16, _chain(2))], _chain(2))
    assert not plan.expressible and plan.reason is not None and "batch size 1" in plan.reason
    nothing = engine.load_schedule(
        [(1, ServerConfig(tp_size=1)), (16, ServerConfig(tp_size=1))], _chain(2)
    )
    assert not nothing.expressible and "no load" in (nothing.reason or "")
