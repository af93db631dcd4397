"""SGLang's adaptive speculation as the launch that follows per-load choices, through the Engine
interface of both SGLang-speaking adapters."""

from __future__ import annotations

import json
import shlex

import pytest

from autotune._knobs import ServerConfig
from autotune.engines import EngineSpec, SimOptions, create_engine


def _sim(dialect: str = "0.5.23"):  # type: ignore[no-untyped-def]
    spec = EngineSpec(
        kind="sim",
        model_path="meta-llama/Llama-3.1-8B-Instruct",
        draft_model_path="draft",
        sim=SimOptions(profile="h100-llama-3.1-8b", dialect=dialect),
    )
    return create_engine(spec)


def _chain(steps: int, topk: int = 1) -> ServerConfig:
    return ServerConfig(
        speculative_algorithm="EAGLE3",
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=steps + 1 if topk == 1 else steps * topk,
        cuda_graph_max_bs=64,
        mem_fraction_static=0.85,
        tp_size=1,
    )


def test_the_winners_become_one_launch_with_steps_by_batch_size() -> None:
    engine = _sim()
    off = ServerConfig(tp_size=1)
    choices = [(1, _chain(5)), (16, _chain(2)), (64, off)]
    plan = engine.load_schedule(choices, _chain(5))
    assert plan.expressible, plan.reason
    assert plan.command is not None
    argv = shlex.split(plan.command)
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert argv[-3:] == [
        "--speculative-adaptive",
        "--speculative-adaptive-config",
        "adaptive-spec.json",
    ]
    assert argv[argv.index("--speculative-num-steps") + 1] == "5"
    assert argv[argv.index("--speculative-eagle-topk") + 1] == "1"
    slots = json.loads(plan.files["adaptive-spec.json"])
    # SGLang's format: batch-size keys, candidate steps; 0 steps runs without drafting
    assert slots == {
        "1": {"candidate_steps": [5]},
        "16": {"candidate_steps": [2]},
        "64": {"candidate_steps": [0]},
    }


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (_chain(3, topk=4), "top-k 1 only"),
        (_chain(3).replace(speculative_algorithm="NGRAM"), "EAGLE and EAGLE3 only"),
    ],
)
def test_what_adaptive_speculation_cannot_run_is_named(config: ServerConfig, words: str) -> None:
    engine = _sim()
    why = engine.schedule_refusal(config)
    assert why is not None and words in why
    plan = engine.load_schedule([(1, config), (16, _chain(2))], _chain(2))
    assert not plan.expressible and plan.reason is not None and words in plan.reason
    # the baseline and a top-k 1 chain can be choices
    assert engine.schedule_refusal(ServerConfig(tp_size=1)) is None
    assert engine.schedule_refusal(_chain(2)) is None


def test_a_release_without_adaptive_speculation_cannot_express_a_schedule() -> None:
    engine = _sim("0.5.3")
    why = engine.schedule_refusal(_chain(2))
    assert why is not None and "SGLang 0.5.3" in why and "--speculative-adaptive" in why
    plan = engine.load_schedule([(1, _chain(5)), (16, _chain(2))], _chain(5))
    assert plan.command is None and plan.reason == why


def test_start_steps_must_be_one_of_the_choices() -> None:
    plan = _sim().load_schedule([(1, _chain(5)), (16, _chain(2))], _chain(3))
    assert not plan.expressible and "no batch size's choice" in (plan.reason or "")
