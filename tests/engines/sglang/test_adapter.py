"""The SGLang adapter's launches, spelled from autotune's table of each release (no SGLang needed).

The expected flags are SGLang's documented spellings per release (shared/facts/sglang-interface.md
and the releases' parsers), written out here rather than derived from the adapter.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path

import pytest

from autotune._errors import ConfigError, EngineError
from autotune._knobs import ALLREDUCE_MODES, ServerConfig
from autotune._workload import WorkloadSpec
from autotune.engines import EngineSpec, SGLangEngine, create_engine
from autotune.engines.sglang import FlagSet, OptionInfo, known_flagset

EAGLE = ServerConfig(
    speculative_algorithm="EAGLE3",
    speculative_num_steps=3,
    speculative_eagle_topk=4,
    speculative_num_draft_tokens=8,
    tp_size=8,
)

#: allreduce mode -> (flags that must appear, NCCL_ALGO), per release dialect.
ALLREDUCE = {
    "0.5.23": {
        "custom": (["--enforce-disable-flashinfer-allreduce-fusion"], None),
        "nccl": (
            ["--disable-custom-all-reduce", "--enforce-disable-flashinfer-allreduce-fusion"],
            None,
        ),
        "nccl_tree": (
            ["--disable-custom-all-reduce", "--enforce-disable-flashinfer-allreduce-fusion"],
            "Tree",
        ),
        "nccl_ring": (
            ["--disable-custom-all-reduce", "--enforce-disable-flashinfer-allreduce-fusion"],
            "Ring",
        ),
        "flashinfer_fusion": (["--flashinfer-allreduce-fusion-backend", "auto"], None),
        "torch_symm_mem": (
            ["--enable-torch-symm-mem", "--enforce-disable-flashinfer-allreduce-fusion"],
            None,
        ),
        "nccl_symm": (
            ["--enable-symm-mem", "--enforce-disable-flashinfer-allreduce-fusion"],
            None,
        ),
        "mscclpp": (["--enable-mscclpp", "--enforce-disable-flashinfer-allreduce-fusion"], None),
    },
    "0.5.3": {
        "custom": ([], None),
        "nccl": (["--disable-custom-all-reduce"], None),
        "nccl_tree": (["--disable-custom-all-reduce"], "Tree"),
        "nccl_ring": (["--disable-custom-all-reduce"], "Ring"),
        "flashinfer_fusion": (["--enable-flashinfer-allreduce-fusion"], None),
        "torch_symm_mem": (["--enable-torch-symm-mem"], None),
        "nccl_symm": (["--enable-symm-mem"], None),
        "mscclpp": (["--enable-mscclpp"], None),
    },
}
ALLREDUCE_FLAGS = {
    "--disable-custom-all-reduce",
    "--enforce-disable-flashinfer-allreduce-fusion",
    "--flashinfer-allreduce-fusion-backend",
    "--enable-flashinfer-allreduce-fusion",
    "--enable-torch-symm-mem",
    "--enable-symm-mem",
    "--enable-mscclpp",
}


def engine(version: str = "0.5.23", **spec: object) -> SGLangEngine:
    values: dict[str, object] = {
        "kind": "sglang",
        "model_path": "/models/kimi",
        "draft_model_path": "/models/eagle3",
        "tp_size": 8,
        "sglang_version": version,
    }
    values.update(spec)
    return SGLangEngine(EngineSpec(**values))  # type: ignore[arg-type]


def value_of(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("version", ["0.5.23", "0.5.3"])
@pytest.mark.parametrize("mode", ALLREDUCE_MODES)
def test_allreduce_modes_become_the_release_flags_and_environment(version: str, mode: str) -> None:
    launch = engine(version).build_launch(EAGLE.replace(allreduce=mode), port=31000)
    flags, algo = ALLREDUCE[version][mode]
    used = [a for a in launch.argv if a in ALLREDUCE_FLAGS or a == "auto"]
    assert used == flags
    assert launch.env.get("NCCL_ALGO") == algo


@pytest.mark.parametrize(
    ("version", "graph_flag", "no_graph"),
    [
        ("0.5.23", "--cuda-graph-max-bs-decode", ["--cuda-graph-backend-decode", "disabled"]),
        ("0.5.13", "--cuda-graph-max-bs", ["--disable-cuda-graph"]),
        ("0.5.3", "--cuda-graph-max-bs", ["--disable-cuda-graph"]),
        ("0.4.10", "--cuda-graph-max-bs", ["--disable-cuda-graph"]),
    ],
)
def test_cuda_graph_knobs_use_the_release_spelling(
    version: str, graph_flag: str, no_graph: list[str]
) -> None:
    adapter = engine(version)
    argv = adapter.build_launch(EAGLE.replace(cuda_graph_max_bs=128), port=1).argv
    assert value_of(argv, graph_flag) == "128"
    other = {"--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"} - {graph_flag}
    assert not other & set(argv)
    argv = adapter.build_launch(EAGLE.replace(disable_cuda_graph=True), port=1).argv
    start = argv.index(no_graph[0])
    assert list(argv[start : start + len(no_graph)]) == no_graph


def test_no_cuda_graphs_disables_prefill_graphs_too_in_0_5_23() -> None:
    argv = engine("0.5.23").build_launch(EAGLE.replace(disable_cuda_graph=True), port=1).argv
    assert value_of(argv, "--cuda-graph-backend-prefill") == "disabled"
    assert "--disable-cuda-graph" not in argv  # deprecated in 0.5.23


def test_every_set_knob_is_on_the_command_line() -> None:
    config = EAGLE.replace(
        cuda_graph_max_bs=64,
        mem_fraction_static=0.7000000000000001,
        max_running_requests=24,
        chunked_prefill_size=-1,
        attention_backend="fa3",
        page_size=16,
    )
    launch = engine("0.5.3").build_launch(config, port=31555)
    argv = launch.argv
    assert value_of(argv, "--model-path") == "/models/kimi"
    assert value_of(argv, "--host") == "127.0.0.1"
    assert value_of(argv, "--port") == "31555" and launch.port == 31555
    assert value_of(argv, "--tp-size") == "8"
    assert value_of(argv, "--speculative-algorithm") == "EAGLE3"
    assert value_of(argv, "--speculative-draft-model-path") == "/models/eagle3"
    assert value_of(argv, "--speculative-num-steps") == "3"
    assert value_of(argv, "--speculative-eagle-topk") == "4"
    assert value_of(argv, "--speculative-num-draft-tokens") == "8"
    assert value_of(argv, "--cuda-graph-max-bs") == "64"
    fraction = value_of(argv, "--mem-fraction-static")
    assert fraction is not None and float(fraction) == config.mem_fraction_static
    assert value_of(argv, "--max-running-requests") == "24"
    assert value_of(argv, "--chunked-prefill-size") == "-1"
    assert value_of(argv, "--attention-backend") == "fa3"
    assert value_of(argv, "--page-size") == "16"
    assert "--enable-metrics" in argv


def test_unset_knobs_are_left_to_sglang() -> None:
    argv = engine().build_launch(ServerConfig(), port=1).argv
    for flag in (
        "--speculative-algorithm",
        "--speculative-draft-model-path",
        "--mem-fraction-static",
        "--max-running-requests",
        "--cuda-graph-max-bs-decode",
        "--attention-backend",
    ):
        assert flag not in argv
    assert value_of(argv, "--tp-size") == "1"


def test_algorithms_without_a_draft_model_get_no_draft_path() -> None:
    argv = engine().build_launch(EAGLE.replace(speculative_algorithm="NGRAM"), port=1).argv
    assert value_of(argv, "--speculative-algorithm") == "NGRAM"
    assert "--speculative-draft-model-path" not in argv


@pytest.mark.parametrize("version", ["0.5.23", "0.5.3"])
def test_ngram_top_k_is_spelled_as_its_bfs_breadth(version: str) -> None:
    # SGLang sets NGRAM's top-k to --speculative-ngram-max-bfs-breadth, ignoring the other flag
    ngram = EAGLE.replace(speculative_algorithm="NGRAM", speculative_eagle_topk=3)
    argv = engine(version).build_launch(ngram, port=1).argv
    assert value_of(argv, "--speculative-ngram-max-bfs-breadth") == "3"
    assert "--speculative-eagle-topk" not in argv
    assert value_of(argv, "--speculative-num-draft-tokens") == "8"
    argv = engine(version).build_launch(EAGLE, port=1).argv
    assert value_of(argv, "--speculative-eagle-topk") == "4"
    assert "--speculative-ngram-max-bfs-breadth" not in argv


def test_nextn_takes_a_draft_model_when_one_is_named_and_needs_none() -> None:
    nextn = EAGLE.replace(speculative_algorithm="NEXTN")
    argv = engine().build_launch(nextn, port=1).argv
    assert value_of(argv, "--speculative-draft-model-path") == "/models/eagle3"
    argv = engine(draft_model_path=None).build_launch(nextn, port=1).argv
    assert "--speculative-draft-model-path" not in argv  # the target's own MTP layers draft
    assert not engine(draft_model_path=None).lacks_draft_model("NEXTN")
    assert engine(draft_model_path=None).lacks_draft_model("STANDALONE")


@pytest.mark.parametrize(
    ("config", "concurrency", "expected"),
    [
        (EAGLE, 49, "49"),
        (EAGLE, 128, "128"),
        (EAGLE, 48, None),
        (EAGLE, 4, None),
        (EAGLE.replace(max_running_requests=32), 128, "32"),
        (ServerConfig(tp_size=8), 128, None),
    ],
)
def test_running_requests_are_set_when_sglang_would_cap_them_at_48(
    config: ServerConfig, concurrency: int, expected: str | None
) -> None:
    workload = WorkloadSpec(concurrency=concurrency)
    argv = engine().build_launch(config, port=1, workload=workload).argv
    assert value_of(argv, "--max-running-requests") == expected


def test_secrets_never_reach_the_displayed_command() -> None:
    adapter = engine(
        env={"HF_TOKEN": "hf_abcdefghijklmnop", "CUDA_VISIBLE_DEVICES": "0,1"},
        extra_args=("--api-key", "my-server-key", "--enable-nccl-nvls"),
    )
    launch = adapter.build_launch(EAGLE, port=1)
    shown = launch.display()
    assert "hf_abcdefghijklmnop" not in shown
    assert "my-server-key" not in shown
    assert "HF_TOKEN=" in shown and "--api-key" in shown
    assert "CUDA_VISIBLE_DEVICES=0,1" in shown
    assert "--speculative-num-draft-tokens 8" in shown
    assert launch.secret_env == frozenset({"HF_TOKEN"})
    assert launch.env["HF_TOKEN"] == "hf_abcdefghijklmnop"  # the server still gets it
    assert launch.argv[-3:] == ("--api-key", "my-server-key", "--enable-nccl-nvls")


def test_prefix_and_interpreter_come_first() -> None:
    launch = engine(
        launch_prefix=("docker", "exec", "sgl"), python="/opt/venv/bin/python"
    ).build_launch(EAGLE, port=1)
    argv = launch.argv
    assert launch.prefix == ("docker", "exec", "sgl")
    assert argv[:7] == (
        "docker",
        "exec",
        "sgl",
        "/opt/venv/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
    )
    assert engine(launch_prefix=("srun", "-N1")).python == "python3"
    assert engine().python == sys.executable


@pytest.mark.parametrize(
    ("version", "mode", "flag"),
    [("0.4.10", "torch_symm_mem", "--enable-torch-symm-mem"), ("0.5.1", "nccl_symm", None)],
)
def test_a_knob_the_release_lacks_is_refused_before_launch(
    version: str, mode: str, flag: str | None
) -> None:
    adapter = engine(version)
    config = EAGLE.replace(allreduce=mode)
    refusal = adapter.precheck(config)
    assert refusal is not None
    assert (refusal.category, refusal.knob) == ("bad_args", "allreduce")
    assert version in refusal.reason
    if flag is not None:
        assert flag in refusal.reason
    with pytest.raises(EngineError, match=version):
        adapter.build_launch(config, port=1)
    assert adapter.precheck(EAGLE.replace(allreduce="nccl")) is None


def test_unsupported_values_names_each_choice_the_release_cannot_express() -> None:
    old = engine("0.4.10")
    refused = old.unsupported_values("allreduce", ["nccl", "custom", "torch_symm_mem", "nccl_symm"])
    assert set(refused) == {"torch_symm_mem", "nccl_symm"}
    assert "--enable-symm-mem" in refused["nccl_symm"]
    assert engine("0.5.23").unsupported_values("allreduce", ALLREDUCE_MODES) == {}
    assert engine("0.5.3").unsupported_values("speculative_num_steps", [1, 2, 6]) == {}
    with pytest.raises(ConfigError, match="unknown knob"):
        engine().unsupported_values("speculative_steps", [1])


def test_an_unreadable_version_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a release number"):
        engine("latest").build_launch(EAGLE, port=1)


def test_weight_sizes_are_summed_from_local_checkpoints(tmp_path: Path) -> None:
    target, draft = tmp_path / "target", tmp_path / "draft"
    (target / "sub").mkdir(parents=True)
    draft.mkdir()
    (target / "model-00001.safetensors").write_bytes(b"\0" * 3 * 2**20)
    (target / "sub" / "model-00002.safetensors").write_bytes(b"\0" * 2**20)
    (target / "pytorch_model.bin").write_bytes(b"\0" * 7 * 2**20)  # a duplicate format, ignored
    (draft / "pytorch_model.bin").write_bytes(b"\0" * 2**19)
    adapter = engine(model_path=str(target), draft_model_path=str(draft))
    assert adapter.weights_gib() == (4 / 1024, 0.5 / 1024)
    assert adapter.weights_gib("NGRAM") == (4 / 1024, None)
    assert adapter.weights_gib("NEXTN") == (4 / 1024, 0.5 / 1024)
    # NEXTN pointed at the target itself drafts with its MTP layers: no second copy
    same = engine(model_path=str(target), draft_model_path=str(target))
    assert same.weights_gib("NEXTN") == (4 / 1024, None)
    assert same.weights_gib("EAGLE3") == (4 / 1024, 4 / 1024)
    assert engine(model_path="org/hub-id").weights_gib() == (None, None)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_hardware_is_unknown_without_a_gpu() -> None:
    hw = engine().hardware()
    assert hw.gpu_name is None and hw.memory_gib is None and hw.compute_capability is None


def test_create_engine_picks_the_adapter_by_kind() -> None:
    adapter = create_engine(EngineSpec(kind="sglang", sglang_version="0.5.3"))
    assert isinstance(adapter, SGLangEngine)
    with pytest.raises(ConfigError, match="unknown engine kind"):
        create_engine(EngineSpec(kind="tgi"))


def test_describe_names_the_release_and_where_its_flags_come_from() -> None:
    assert engine("0.5.10").describe() == "SGLang 0.5.10 (known table, 0.5.3 dialect)"


def test_a_release_with_sglang_serve_is_launched_through_its_console_script() -> None:
    flags = known_flagset("0.5.23")
    served = dataclasses.replace(flags, serve_script="/opt/venv/bin/sglang")
    spec = EngineSpec(kind="sglang", model_path="/m", python="/opt/venv/bin/python")
    argv = SGLangEngine(spec, flags=served).build_launch(EAGLE, port=1).argv
    assert argv[:5] == (
        "/opt/venv/bin/python",
        "/opt/venv/bin/sglang",
        "serve",
        "--model-path",
        "/m",
    )
    argv = SGLangEngine(spec, flags=flags).build_launch(EAGLE, port=1).argv
    assert argv[:4] == ("/opt/venv/bin/python", "-m", "sglang.launch_server", "--model-path")


def test_a_deprecated_alias_of_the_graph_cap_is_not_emitted() -> None:
    table = dict(known_flagset("0.5.23").options)
    table["--cuda-graph-max-bs"] = OptionInfo("cuda_graph_max_bs_decode", deprecated=True)
    flags = FlagSet(version="0.6.0", options=table)
    argv = (
        SGLangEngine(EngineSpec(kind="sglang"), flags=flags)
        .build_launch(EAGLE.replace(cuda_graph_max_bs=64), port=1)
        .argv
    )
    assert value_of(argv, "--cuda-graph-max-bs-decode") == "64"
    assert "--cuda-graph-max-bs" not in argv


CHAIN = ServerConfig(
    speculative_algorithm="EAGLE3",
    speculative_num_steps=3,
    speculative_eagle_topk=1,
    speculative_num_draft_tokens=4,
)


def test_adaptive_speculation_is_a_switch_of_releases_that_have_it() -> None:
    argv = engine("0.5.23").build_launch(CHAIN.replace(speculative_adaptive=True), port=1).argv
    assert argv.count("--speculative-adaptive") == 1
    assert "--speculative-adaptive" not in engine("0.5.23").build_launch(CHAIN, port=1).argv
    off = CHAIN.replace(speculative_adaptive=False)
    assert "--speculative-adaptive" not in engine("0.5.23").build_launch(off, port=1).argv
    refused = engine("0.5.3").precheck(CHAIN.replace(speculative_adaptive=True))
    assert refused is not None and refused.knob == "speculative_adaptive"
    assert "has no flag --speculative-adaptive" in refused.reason
    assert engine("0.5.3").unsupported_values("speculative_adaptive", [True, False]).keys() == {
        True
    }


@pytest.mark.parametrize("version", ["0.5.5", "0.5.11", "0.5.13"])
def test_spec_v2_is_the_environment_switch_of_releases_that_read_it(version: str) -> None:
    launch = engine(version).build_launch(CHAIN.replace(spec_v2=True), port=1)
    assert launch.env["SGLANG_ENABLE_SPEC_V2"] == "True"
    launch = engine(version).build_launch(CHAIN.replace(spec_v2=False), port=1)
    assert launch.env["SGLANG_ENABLE_SPEC_V2"] == "False"
    assert "SGLANG_ENABLE_SPEC_V2" not in engine(version).build_launch(CHAIN, port=1).env


@pytest.mark.parametrize("version", ["0.5.23", "0.5.14", "0.5.4", "0.5.3"])
def test_spec_v2_is_refused_where_the_release_has_no_choice(version: str) -> None:
    refused = engine(version).precheck(CHAIN.replace(spec_v2=True))
    assert refused is not None and refused.knob == "spec_v2"
    assert (
        f"SGLang {version}" in refused.reason and "reads no SGLANG_ENABLE_SPEC_V2" in refused.reason
    )
    assert engine(version).unsupported_values("spec_v2", [True, False]).keys() == {True, False}
