"""The simulated server's command line: SGLang's flags per release, its rules, the mapping."""

from __future__ import annotations

import functools

import pytest

from autotune._errors import ConfigError
from autotune.sim._args import (
    ArgumentRuleError,
    parse_launch_args,
    resolve_launch,
)
from autotune.sim._model import SimModel
from autotune.sim._profile import load_profile

KIMI = "DeepseekV3ForCausalLM"
LLAMA = "LlamaForCausalLM"
EAGLE3 = ["--speculative-algorithm", "EAGLE3"]
#: A profile of each architecture: the server takes the automatic speculative numbers from it.
PROFILES = {KIMI: "rtxpro6000x8-kimi-k2.5", LLAMA: "h100-llama-3.1-8b"}


@functools.cache
def model_of(arch: str) -> SimModel:
    return SimModel(load_profile(PROFILES[arch]))


def resolve(*argv: str, arch: str = KIMI, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    launch = parse_launch_args(["--model-path", "m", *argv])
    return resolve_launch(launch, architecture=arch, env=env or {}, resolve=model_of(arch).resolve)


def parse_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as info:
        parse_launch_args(list(argv))
    assert info.value.code == 2
    return capsys.readouterr().err


def test_cuda_graph_max_bs_is_ambiguous_in_0_5_23(capsys: pytest.CaptureFixture[str]) -> None:
    err = parse_error(capsys, "--model-path", "m", "--cuda-graph-max-bs", "128")
    assert err.startswith("usage: sglang serve ")
    assert err.rstrip().endswith(
        "error: ambiguous option: --cuda-graph-max-bs could match "
        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    )


def test_0_5_3_flags_are_unrecognized_in_0_5_23_and_the_reverse(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = parse_error(capsys, "--model-path", "m", "--enable-ep-moe")
    assert "error: unrecognized arguments: --enable-ep-moe" in err
    err = parse_error(
        capsys, "--sim-dialect", "0.5.3", "--model-path", "m", "--cuda-graph-max-bs-decode", "8"
    )
    assert err.startswith("usage: launch_server.py ")
    assert "error: unrecognized arguments: --cuda-graph-max-bs-decode 8" in err


def test_0_5_3_takes_cuda_graph_max_bs() -> None:
    res = resolve("--sim-dialect", "0.5.3", "--cuda-graph-max-bs", "128", "--tp", "8")
    assert res.config.cuda_graph_max_bs == 128
    assert res.config.tp_size == 8
    assert res.server_args["cuda_graph_max_bs"] == 128


def test_0_5_23_graph_flags_map_to_canonical_knobs() -> None:
    res = resolve("--cuda-graph-max-bs-decode", "64")
    assert res.config.cuda_graph_max_bs == 64
    assert not res.config.disable_cuda_graph
    assert resolve("--cuda-graph-bs-decode", "1", "2", "24").config.cuda_graph_max_bs == 24
    assert resolve("--cuda-graph-backend-decode", "disabled").config.disable_cuda_graph


def test_abbreviations_resolve_like_argparse_in_sglang() -> None:
    assert resolve("--mem-fraction", "0.8").config.mem_fraction_static == 0.8


def test_missing_model_path_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    err = parse_error(capsys, "--tp", "8")
    assert "error: the following arguments are required: --model-path" in err


def test_disable_cuda_graph_is_deprecated_but_works_in_0_5_23() -> None:
    launch = parse_launch_args(["--model-path", "m", "--disable-cuda-graph"])
    assert launch.deprecations == (
        "'--disable-cuda-graph' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.",
    )
    res = resolve_launch(launch, architecture=KIMI, env={})
    assert res.config.disable_cuda_graph
    old = parse_launch_args(["--sim-dialect", "0.5.3", "--model-path", "m", "--disable-cuda-graph"])
    assert old.deprecations == ()


def test_sim_options_are_parsed() -> None:
    launch = parse_launch_args(
        ["--model-path", "m", "--sim-time-scale", "0.01", "--sim-noise", "0.1", "--sim-seed", "7",
         "--sim-fault", "http_500:3", "--sim-fault", "hang_startup"]
    )  # fmt: skip
    assert launch.sim.time_scale == 0.01
    assert launch.sim.noise == 0.1
    assert launch.sim.serve_scale == 1.0
    assert launch.sim.seed == 7
    assert launch.sim.faults.http_500 == 3
    assert launch.sim.faults.hang_startup
    assert "sim_fault" not in launch.args and "sim_profile" not in launch.args


def test_serve_scale_is_a_positive_factor(capsys: pytest.CaptureFixture[str]) -> None:
    for given in ("4", "0.1"):
        launch = parse_launch_args(["--model-path", "m", "--sim-serve-scale", given])
        assert launch.sim.serve_scale == float(given)
    for bad in ("-1", "0", "nan", "inf", "x"):
        with pytest.raises(SystemExit) as exc:
            parse_launch_args(["--model-path", "m", "--sim-serve-scale", bad])
        assert exc.value.code == 2
        assert "expected a number > 0" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["bogus", "http_500", "http_500:0", "slow_start:-1", "garbage:x"])
def test_bad_fault_specs_are_argparse_errors(capsys: pytest.CaptureFixture[str], spec: str) -> None:
    err = parse_error(capsys, "--model-path", "m", "--sim-fault", spec)
    assert "argument --sim-fault:" in err


@pytest.mark.parametrize(
    ("flags", "env", "mode"),
    [
        ([], {}, "custom"),
        (["--disable-custom-all-reduce"], {}, "nccl"),
        (["--disable-custom-all-reduce"], {"NCCL_ALGO": "Tree"}, "nccl_tree"),
        (["--disable-custom-all-reduce"], {"NCCL_ALGO": "Ring"}, "nccl_ring"),
        ([], {"NCCL_ALGO": "Tree"}, "custom"),
        (["--enable-flashinfer-allreduce-fusion"], {}, "flashinfer_fusion"),
        (["--flashinfer-allreduce-fusion-backend", "auto"], {}, "flashinfer_fusion"),
        (["--enable-torch-symm-mem"], {}, "torch_symm_mem"),
        (["--enable-symm-mem"], {}, "nccl_symm"),
        (["--enable-mscclpp"], {}, "mscclpp"),
        (["--enforce-disable-flashinfer-allreduce-fusion"], {}, "custom"),
        (
            [
                "--flashinfer-allreduce-fusion-backend",
                "auto",
                "--enforce-disable-flashinfer-allreduce-fusion",
            ],
            {},
            "custom",
        ),
    ],
)
def test_allreduce_mode_from_flags_and_environment(
    flags: list[str], env: dict[str, str], mode: str
) -> None:
    assert resolve(*flags, env=env).config.allreduce == mode


def test_speculation_resets_max_running_requests_to_48() -> None:
    res = resolve(*EAGLE3, "--speculative-num-steps", "2", "--speculative-eagle-topk", "4",
                  "--speculative-num-draft-tokens", "4")  # fmt: skip
    assert res.server_args["max_running_requests"] == 48
    assert res.warnings[0].startswith(
        "Max running requests is reset to 48 for speculative decoding."
    )
    # the canonical configuration keeps "unset": the model applies the default itself
    assert res.config.max_running_requests is None
    explicit = resolve(*EAGLE3, "--max-running-requests", "64")
    assert explicit.server_args["max_running_requests"] == 64
    assert not any("reset to 48" in w for w in explicit.warnings)


@pytest.mark.parametrize(("arch", "expected"), [(KIMI, (3, 1, 4)), (LLAMA, (5, 4, 8))])
def test_unset_speculative_numbers_are_chosen_like_sglang(
    arch: str, expected: tuple[int, int, int]
) -> None:
    c = resolve(*EAGLE3, arch=arch).config
    assert (c.speculative_num_steps, c.speculative_eagle_topk, c.speculative_num_draft_tokens) == (
        expected
    )


def test_topk_1_rewrites_draft_tokens_with_a_warning() -> None:
    res = resolve(*EAGLE3, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", "8")  # fmt: skip
    assert res.config.speculative_num_draft_tokens == 4
    assert res.num_draft_tokens == 4
    assert any("adjusted to speculative_num_steps + 1" in w for w in res.warnings)


def test_nextn_runs_as_eagle_and_mtp_models_draft_from_themselves() -> None:
    res = resolve("--speculative-algorithm", "nextn")
    assert res.config.speculative_algorithm == "NEXTN"
    assert res.server_args["speculative_algorithm"] == "EAGLE"
    assert res.server_args["speculative_draft_model_path"] == "m"


def test_ngram_takes_its_top_k_from_the_bfs_breadth() -> None:
    res = resolve("--speculative-algorithm", "NGRAM", "--speculative-ngram-max-bfs-breadth", "3",
                  "--speculative-num-draft-tokens", "9")  # fmt: skip
    assert res.config.speculative_eagle_topk == 3
    assert res.config.speculative_num_steps == 3  # draft tokens / breadth, as SGLang sets it


def rule_error(*argv: str, arch: str = KIMI) -> ArgumentRuleError:
    with pytest.raises(ArgumentRuleError) as info:
        resolve(*argv, arch=arch)
    error = info.value
    assert error.exit_code == 1
    assert error.lines[0] == "Traceback (most recent call last):"
    return error


def test_topk_without_steps_fails_the_assertion() -> None:
    error = rule_error(*EAGLE3, "--speculative-eagle-topk", "4")
    assert error.lines[-1] == "AssertionError"
    assert "speculative_hook.py" in error.lines[-3]


def test_steps_without_topk_fails_on_the_comparison() -> None:
    error = rule_error(*EAGLE3, "--speculative-num-steps", "3")
    assert error.lines[-1].startswith("TypeError: '>' not supported")


def test_speculative_numbers_need_an_algorithm() -> None:
    error = rule_error("--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                       "--speculative-num-draft-tokens", "4")  # fmt: skip
    assert error.lines[-1].startswith("ValueError:")
    assert "--speculative-algorithm" in error.lines[-1]


def test_pipeline_parallelism_rejects_speculation() -> None:
    error = rule_error(*EAGLE3, "--pp-size", "2")
    assert error.lines[-1] == (
        "AssertionError: Pipeline parallelism currently only supports EAGLE "
        "(non-multi-layer) speculative decoding"
    )
    assert "PP + speculative decoding" in rule_error("--speculative-algorithm", "EAGLE",
                                                     "--pp-size", "2").lines[-1]  # fmt: skip
    assert resolve("--pp-size", "2").config.speculative_algorithm == "none"


@pytest.mark.parametrize("backend", ["fa4", "trtllm_mla", "torch_native", "flex_attention"])
def test_attention_backends_without_speculation_support(backend: str) -> None:
    error = rule_error(*EAGLE3, "--attention-backend", backend)
    assert "ttention" in error.lines[-1]
    assert resolve("--attention-backend", backend).config.attention_backend == backend


def test_trtllm_mha_only_with_topk_1() -> None:
    tree = ("--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
            "--speculative-num-draft-tokens", "8")  # fmt: skip
    error = rule_error(*EAGLE3, "--attention-backend", "trtllm_mha", *tree)
    assert error.lines[-1] == (
        "ValueError: trtllm_mha backend only supports topk = 1 for speculative decoding."
    )
    chain = ("--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4")  # fmt: skip
    ok = resolve(*EAGLE3, "--attention-backend", "trtllm_mha", *chain)
    assert ok.config.attention_backend == "trtllm_mha"


def test_topk_above_1_with_pages_needs_a_tree_backend() -> None:
    args = ("--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
            "--speculative-num-draft-tokens", "8", "--page-size", "16")  # fmt: skip
    error = rule_error(*EAGLE3, *args, "--attention-backend", "flashmla")
    assert "page_size > 1" in error.lines[-1]
    assert resolve(*EAGLE3, *args, "--attention-backend", "fa3").config.page_size == 16


def test_unknown_algorithm_fails_like_sglang_and_unmodelled_ones_are_refused() -> None:
    error = rule_error("--speculative-algorithm", "MEDUSA")
    assert error.lines[-1] == "ValueError: Unknown speculative algorithm name: MEDUSA"
    with pytest.raises(ConfigError, match="not modelled"):
        resolve("--speculative-algorithm", "DFLASH")


def test_0_5_3_tracebacks_come_from_server_args() -> None:
    error = rule_error("--sim-dialect", "0.5.3", *EAGLE3, "--speculative-eagle-topk", "2")
    assert any("prepare_server_args" in line for line in error.lines)
    assert "server_args.py" in error.lines[-3]


def test_out_of_range_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="mem_fraction_static"):
        resolve("--mem-fraction-static", "1.5")
