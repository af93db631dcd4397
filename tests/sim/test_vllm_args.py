"""vLLM's command line as the simulated server reads it: what the vLLM adapter emits means what
was asked, vLLM's defaults and refusals."""

from __future__ import annotations

import random

import pytest

from autotune._knobs import ServerConfig
from autotune.crashes import classify_text
from autotune.engines import EngineSpec, SimOptions, create_engine
from autotune.engines.vllm import VLLM_CRASH_RULES
from autotune.sim.__main__ import main
from autotune.sim._args import ArgumentRuleError
from autotune.sim._vllm_args import parse_vllm_args, resolve_vllm_launch

SPEC = EngineSpec(
    kind="sim-vllm",
    model_path="meta-llama/Llama-3.1-8B-Instruct",
    draft_model_path="/models/eagle3",
    sim=SimOptions(profile="h100-llama-3.1-8b"),
)
H100_GIB = 79.65


def served_args(config: ServerConfig) -> list[str]:
    """The words after ``python -m autotune.sim`` of the adapter's launch of ``config``."""
    argv = list(create_engine(SPEC).build_launch(config, port=8123).argv)
    return argv[argv.index("autotune.sim") + 1 :]


def test_sampled_launches_parse_to_what_was_asked() -> None:
    rng = random.Random(5)
    for _ in range(60):
        asked = ServerConfig(
            speculative_algorithm=rng.choice(["none", "EAGLE3", "EAGLE"]),
            gpu_memory_utilization=round(rng.uniform(0.3, 0.99), 2),
            cuda_graph_max_bs=rng.choice([None, 8, 64, 512]),
            max_running_requests=rng.choice([None, 16, 256]),
            chunked_prefill_size=rng.choice([None, 2048, 16384]),
            disable_cuda_graph=rng.random() < 0.2,
            allreduce=rng.choice(["custom", "nccl"]),
        )
        if asked.speculative:
            asked = asked.replace(speculative_num_steps=rng.randint(1, 8))
        launch = parse_vllm_args(served_args(asked))
        got = resolve_vllm_launch(launch, memory_gib=H100_GIB, env={}).config
        assert launch.args["port"] == 8123
        assert launch.sim.profile == "h100-llama-3.1-8b" and launch.sim.dialect == "vllm-0.33.0"
        for knob in ("speculative_algorithm", "speculative_num_steps", "gpu_memory_utilization",
                     "disable_cuda_graph", "allreduce"):  # fmt: skip
            assert getattr(got, knob) == getattr(asked, knob), (knob, asked, got)
        for knob in ("cuda_graph_max_bs", "max_running_requests", "chunked_prefill_size"):
            if getattr(asked, knob) is not None:
                assert getattr(got, knob) == getattr(asked, knob), (knob, asked, got)
        if asked.speculative:  # one chain: top-k 1, the chain and the token before verified
            assert got.speculative_eagle_topk == 1
            assert got.speculative_num_draft_tokens == asked.speculative_num_steps + 1


@pytest.mark.parametrize(("memory", "seqs", "tokens"), [(H100_GIB, 1024, 8192), (23.5, 256, 2048)])
def test_vllms_defaults_follow_the_gpu(memory: float, seqs: int, tokens: int) -> None:
    launch = parse_vllm_args(["serve", "m"])
    got = resolve_vllm_launch(launch, memory_gib=memory, env={}).config
    assert (got.max_running_requests, got.chunked_prefill_size) == (seqs, tokens)
    assert got.gpu_memory_utilization == 0.9
    assert got.cuda_graph_max_bs == min(512, 2 * seqs)


def test_underscores_stand_for_dashes_as_in_vllm() -> None:
    launch = parse_vllm_args(["serve", "m", "--max_num_seqs", "7", "--gpu_memory_utilization=0.5"])
    got = resolve_vllm_launch(launch, memory_gib=H100_GIB, env={}).config
    assert got.max_running_requests == 7 and got.gpu_memory_utilization == 0.5


def test_an_unknown_flag_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "m", "--no-such-flag", "1"]) == 2
    assert "error: unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_a_speculative_config_that_is_not_json_is_an_argparse_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "m", "--speculative-config", "{method: eagle3"]) == 2
    assert "argument --speculative-config/-sc: invalid loads value" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"method": "eagle3", "model": "d"}, "num_speculative_tokens must be provided"),
        ({"method": "eagle3", "num_speculative_tokens": 3}, "without speculative model"),
        ({"method": "lookahead", "model": "d", "num_speculative_tokens": 3}, "method\n"),
        ({"method": "eagle", "model": "d", "num_speculative_tokens": 0}, "greater than zero"),
    ],
)
def test_speculative_configs_vllm_refuses_print_its_validation_error(
    config: dict[str, object], words: str
) -> None:
    import json

    launch = parse_vllm_args(["serve", "m", "--speculative-config", json.dumps(config)])
    with pytest.raises(ArgumentRuleError) as caught:
        resolve_vllm_launch(launch, memory_gib=H100_GIB, env={})
    text = "\n".join(caught.value.lines) + "\n"
    assert "1 validation error for SpeculativeConfig" in text and words in text
    verdict = classify_text(text, VLLM_CRASH_RULES)
    assert verdict.category == "bad_args" and verdict.is_crash
