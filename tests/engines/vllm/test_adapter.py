"""The vLLM adapter: vLLM's command line from canonical knobs, and the knobs it refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune._errors import EngineError
from autotune._knobs import ServerConfig
from autotune.engines import EngineSpec, create_engine
from autotune.engines.vllm import VLLMEngine, known_flags
from autotune.engines.vllm._section import owned_flag

SPEC = EngineSpec(
    kind="vllm",
    vllm_version="0.33.0",
    model_path="/models/llama",
    draft_model_path="/models/eagle3",
    tp_size=2,
    check_paths=False,
)
EAGLE3 = ServerConfig(
    speculative_algorithm="EAGLE3",
    speculative_num_steps=4,
    gpu_memory_utilization=0.88,
    cuda_graph_max_bs=64,
    max_running_requests=48,
    chunked_prefill_size=8192,
    tp_size=2,
)


def _engine(spec: EngineSpec = SPEC) -> VLLMEngine:
    engine = create_engine(spec)
    assert isinstance(engine, VLLMEngine)
    return engine


def _flag_value(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_launch_is_vllm_serve_of_the_model_with_vllm_flags() -> None:
    argv = _engine().build_launch(EAGLE3, port=8123).argv
    serve = argv.index("serve")
    assert argv[serve - 2 : serve] == ("-m", "vllm.entrypoints.cli.main")
    assert argv[serve + 1] == "/models/llama"  # the model is vllm serve's positional argument
    assert _flag_value(argv, "--port") == "8123"
    assert _flag_value(argv, "--tensor-parallel-size") == "2"
    assert _flag_value(argv, "--gpu-memory-utilization") == "0.88"
    assert _flag_value(argv, "--max-num-seqs") == "48"
    assert _flag_value(argv, "--max-num-batched-tokens") == "8192"
    assert _flag_value(argv, "--max-cudagraph-capture-size") == "64"
    spec_config = json.loads(_flag_value(argv, "--speculative-config"))
    assert spec_config == {
        "method": "eagle3",
        "model": "/models/eagle3",
        "num_speculative_tokens": 4,
        "draft_tensor_parallel_size": 2,
    }
    assert "--mem-fraction-static" not in argv and "--enforce-eager" not in argv


def test_the_older_release_spells_the_graph_size_its_own_way() -> None:
    old = _engine(EngineSpec(kind="vllm", vllm_version="0.10.2", model_path="/m"))
    argv = old.build_launch(ServerConfig(cuda_graph_max_bs=32), port=1).argv
    assert _flag_value(argv, "--cuda-graph-sizes") == "32"
    assert "--max-cudagraph-capture-size" not in argv
    assert "--speculative-config" not in argv  # no speculation asked for


def test_no_speculation_eager_and_nccl_modes() -> None:
    config = ServerConfig(disable_cuda_graph=True, allreduce="nccl_tree", tp_size=4)
    launch = _engine().build_launch(config, port=9000)
    assert "--enforce-eager" in launch.argv and "--disable-custom-all-reduce" in launch.argv
    assert launch.env["NCCL_ALGO"] == "Tree"
    assert "--speculative-config" not in launch.argv


def test_launch_prefix_and_python_are_used_as_for_sglang() -> None:
    spec = EngineSpec(
        kind="vllm",
        vllm_version="0.33.0",
        model_path="/m",
        launch_prefix=("docker", "exec", "box"),
        extra_args=("--max-model-len", "8192"),
    )
    launch = _engine(spec).build_launch(ServerConfig(), port=1)
    argv = launch.argv
    assert argv[:4] == ("docker", "exec", "box", "python3")
    # the server runs, and is stopped, through the prefix
    assert launch.prefix == ("docker", "exec", "box")
    assert argv[-2:] == ("--max-model-len", "8192")
    spec = EngineSpec(kind="vllm", vllm_version="0.33.0", model_path="/m", python="/venv/bin/py")
    assert _engine(spec).build_launch(ServerConfig(), port=1).argv[0] == "/venv/bin/py"


@pytest.mark.parametrize(
    ("knob", "value", "named"),
    [
        ("speculative_eagle_topk", 4, "EAGLE top-k"),
        ("speculative_num_draft_tokens", 16, "draft-token budget"),
        ("mem_fraction_static", 0.85, "gpu_memory_utilization"),
        ("allreduce", "flashinfer_fusion", "all-reduce mode flashinfer_fusion"),
        ("allreduce", "mscclpp", "all-reduce mode mscclpp"),
    ],
)
def test_knobs_vllm_lacks_are_refused_by_name(knob: str, value: object, named: str) -> None:
    engine = _engine()
    refused = engine.unsupported_values(knob, [value])
    assert named in refused[value] and "vLLM 0.33.0" in refused[value]
    params = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, knob: value}
    config = ServerConfig.from_params(params)
    verdict = engine.precheck(config)
    assert verdict is not None and verdict.knob == knob and named in verdict.reason
    with pytest.raises(EngineError, match=knob):
        engine.build_launch(config, port=1)


def test_a_chain_is_accepted_where_it_means_what_vllm_runs() -> None:
    engine = _engine()
    chain = ServerConfig(
        speculative_algorithm="EAGLE3",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
    )
    assert engine.check_rules(chain) is None and engine.precheck(chain) is None
    assert engine.draft_token_bounds(3, 1) == (4, 4)
    missing = engine.check_rules(ServerConfig(speculative_algorithm="EAGLE3"))
    assert missing is not None and missing.knob == "speculative_num_steps"
    # tuning the budget at all is refused: vLLM has no such knob
    assert set(engine.unsupported_values("speculative_num_draft_tokens", [4, 8])) == {4, 8}
    assert engine.unsupported_values("speculative_eagle_topk", [1, 2]).keys() == {2}


def test_a_release_without_attention_backend_flag_names_it() -> None:
    old = _engine(EngineSpec(kind="vllm", vllm_version="0.10.2", model_path="/m"))
    refused = old.unsupported_values("attention_backend", ["FLASHINFER"])
    assert "--attention-backend" in refused["FLASHINFER"]
    assert _engine().unsupported_values("attention_backend", ["FLASHINFER"]) == {}


def test_gpu_memory_utilization_is_vllms_knob_only() -> None:
    sglang = create_engine(EngineSpec(kind="sglang", sglang_version="0.5.23", check_paths=False))
    refused = sglang.unsupported_values("gpu_memory_utilization", [0.9])
    assert "mem_fraction_static" in refused[0.9]
    assert _engine().unsupported_values("gpu_memory_utilization", [0.9, 1.0]) == {}


def test_an_unknown_release_is_refused_with_the_known_ones() -> None:
    with pytest.raises(EngineError, match=r"0\.99\.0") as info:
        known_flags("0.99.0")
    assert "0.33.0" in (info.value.hint or "")


def test_flags_autotune_sets_are_owned() -> None:
    assert owned_flag("--gpu-memory-utilization=0.9") == (
        "--gpu-memory-utilization",
        "gpu_memory_utilization",
    )
    assert owned_flag("--max_num_seqs") == ("--max-num-seqs", "max_running_requests")
    assert owned_flag("-sc") == ("-sc", "speculative_algorithm")
    assert owned_flag("--max-model-len") is None


def test_study_start_refuses_a_space_with_knobs_vllm_lacks(tmp_path: Path) -> None:
    space = tmp_path / "vllm.yaml"
    space.write_text(
        "name: v\n"
        "engine: {kind: vllm, vllm_version: '0.33.0', model_path: /m, draft_model_path: /d,"
        " check_paths: false}\n"
        "workload: {concurrency: 1, num_prompts: 2, input_len: 16, output_len: 16}\n"
        "fixed: {speculative_algorithm: EAGLE3}\n"
        "parameters:\n"
        "  speculative_num_steps: {type: int, low: 1, high: 6}\n"
        "  speculative_eagle_topk: {type: int, low: 1, high: 8}\n"
        "  gpu_memory_utilization: {type: float, low: 0.8, high: 0.95}\n"
    )
    storage = tmp_path / "s.db"
    root = Path(__file__).resolve().parents[3]  # this checkout's autotune, not an installed one
    env = {**os.environ, "PYTHONPATH": str(root)}
    argv = [sys.executable, "-m", "autotune", "study", "start", "--space", str(space)]
    done = subprocess.run(
        [*argv, "--storage", f"sqlite:///{storage}", "--n-trials", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "speculative_eagle_topk" in out and "EAGLE top-k" in out, out
    assert "Traceback" not in out
    assert not list(tmp_path.glob("*-logs")), "a server was launched"
