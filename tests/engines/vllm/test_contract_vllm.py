"""Contract with vLLM's real command-line parser (``vllm serve``).

Hundreds of sampled proposals become vLLM command lines; each is parsed by the release's own
``vllm serve`` parser (``make_arg_parser`` on vLLM's ``FlexibleArgumentParser``, which
``vllm serve`` builds its own from),
and the parsed fields must mean what the trial records: the model, port, tensor-parallel size,
memory share, running-request cap, step token budget, CUDA-graph capture size, eager mode,
all-reduce mode and the speculative configuration. autotune's flag table of the release is
checked against the parser flag by flag, and the spelling the release refuses is refused.

The releases are the newest on the index (0.34.0) and the one before it (0.33.0), each
installed without its dependencies (``pip install --no-deps --target DIR/vllm-0.34.0
vllm==0.34.0``) beside the packages their import needs (``DIR/vllm-deps``), as
``.ci/install-vllm-parser.sh DIR`` installs them, imported with ``VLLM_TARGET_DEVICE=cpu`` so that
no GPU platform is probed; the speculative configuration the adapter writes is checked against
the release's own ``SpeculativeConfig``. vLLM 0.10.2, whose capture size has another spelling,
cannot build its parser without a GPU platform: its table is checked against its parser's source.
The tests find the parsers in ``AUTOTUNE_VLLM_PARSERS`` (default ``<repo>/.ci-venvs``) and skip
when they are absent, or fail with ``AUTOTUNE_REQUIRE_CONTRACT=1`` (as in CI).
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune._knobs import ServerConfig
from autotune.engines import EngineSpec, create_engine
from autotune.engines.vllm import VLLMEngine, known_flags
from autotune.engines.vllm._flags import detect_flags
from autotune.engines.vllm._schedule import SCHEDULE_KEY
from autotune.space import parse_space

REPO = Path(__file__).resolve().parents[3]
#: The releases whose parsers the tests build: the newest on the index and the one before it.
RELEASES = ("0.34.0", "0.33.0")
MARKER = "VLLM-CONTRACT "
PROPOSALS = 300

#: Parses many argvs with vLLM's own serve parser; JSON list on stdin, results on one line.
PARSE_SCRIPT = r"""
import contextlib, io, json, sys
from vllm.entrypoints.common.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
results = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
        results.append({"code": 0, "ns": vars(ns), "stderr": ""})
    except SystemExit as e:
        results.append({"code": e.code, "ns": None, "stderr": err.getvalue()[-400:]})
print("MARKER" + json.dumps(results, default=str))
""".replace("MARKER", MARKER)

SPACE = """
name: vllm-contract
engine:
  kind: vllm
  vllm_version: "0.33.0"
  model_path: /models/Llama-3.1-8B-Instruct
  draft_model_path: /models/EAGLE3-LLaMA3.1-Instruct-8B
  tp_size: 2
  check_paths: false
workload: {concurrency: 8, num_prompts: 4, input_len: 64, output_len: 64}
fixed: {}
parameters:
  speculative_algorithm: {type: categorical, choices: [none, EAGLE3, EAGLE]}
  speculative_num_steps:
    {type: int, low: 1, high: 8, when: {speculative_algorithm: [EAGLE3, EAGLE]}}
  gpu_memory_utilization: {type: float, low: 0.70, high: 0.98, step: 0.01}
  max_running_requests: {type: categorical, choices: [8, 32, 64, 128, 256]}
  chunked_prefill_size: {type: categorical, choices: [2048, 4096, 8192, 16384]}
  cuda_graph_max_bs: {type: categorical, choices: [8, 16, 32, 64, 128, 256, 512]}
  disable_cuda_graph: {type: categorical, choices: [false, true]}
  allreduce: {type: categorical, choices: [custom, nccl, nccl_ring]}
enqueue:
  baseline: false
"""


def _root() -> Path:
    return Path(os.environ.get("AUTOTUNE_VLLM_PARSERS") or REPO / ".ci-venvs")


def _absent(what: str) -> None:
    """Skip, or fail where the contract is required (CI), because ``what`` is not installed."""
    message = f"{what} is not installed under {_root()}: run .ci/install-vllm-parser.sh {_root()}"
    if os.environ.get("AUTOTUNE_REQUIRE_CONTRACT", "") not in ("", "0", "false"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest) -> str:
    version: str = request.param
    if not (_root() / f"vllm-{version}" / "vllm").is_dir():
        _absent(f"vLLM {version}'s parser")
    return version


def _env(release: str) -> dict[str, str]:
    path = os.pathsep.join([str(_root() / f"vllm-{release}"), str(_root() / "vllm-deps")])
    return {**os.environ, "PYTHONPATH": path, "VLLM_TARGET_DEVICE": "cpu"}


def _run(release: str, script: str, stdin: str = "") -> Any:
    """Runs ``script`` with the release's vLLM importable; the JSON it prints after MARKER."""
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        input=stdin,
        capture_output=True,
        text=True,
        env=_env(release),
        timeout=300,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    raise AssertionError(f"vLLM {release} did not answer: {done.stderr[-2000:]}")


def _parse(release: str, argvs: list[list[str]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = _run(release, PARSE_SCRIPT, json.dumps(argvs))
    return results


def _serve_args(argv: tuple[str, ...]) -> list[str]:
    return list(argv[argv.index("serve") + 1 :])


def _engine(release: str) -> VLLMEngine:
    space = parse_space(SPACE.replace('vllm_version: "0.33.0"', f'vllm_version: "{release}"'))
    engine = create_engine(space.engine)
    assert isinstance(engine, VLLMEngine) and engine.flags().version == release
    return engine


def test_hundreds_of_proposals_parse_and_mean_what_was_recorded(release: str) -> None:
    space = parse_space(SPACE)
    engine = _engine(release)
    configs = [space.config_for(p) for p in space.sample(PROPOSALS, seed=7)]
    configs = [c for c in configs if engine.check_rules(c) is None and engine.precheck(c) is None]
    assert len(configs) >= PROPOSALS * 0.9
    launches = [engine.build_launch(c, port=30000 + i) for i, c in enumerate(configs)]
    results = _parse(release, [_serve_args(launch.argv) for launch in launches])
    assert len(results) == len(configs)
    for i, (config, result) in enumerate(zip(configs, results, strict=True)):
        assert result["code"] == 0, (config, result["stderr"])
        ns = result["ns"]
        assert ns["model_tag"] == "/models/Llama-3.1-8B-Instruct"
        assert ns["port"] == 30000 + i and ns["tensor_parallel_size"] == config.tp_size
        assert ns["gpu_memory_utilization"] == pytest.approx(config.gpu_memory_utilization)
        assert ns["max_num_seqs"] == config.max_running_requests
        assert ns["max_num_batched_tokens"] == config.chunked_prefill_size
        assert ns["max_cudagraph_capture_size"] == config.cuda_graph_max_bs
        assert ns["enforce_eager"] is config.disable_cuda_graph
        assert ns["disable_custom_all_reduce"] is (config.allreduce != "custom")
        if not config.speculative:
            assert ns["speculative_config"] is None
            continue
        assert ns["speculative_config"] == {
            "method": config.speculative_algorithm.lower(),
            "model": "/models/EAGLE3-LLaMA3.1-Instruct-8B",
            "num_speculative_tokens": config.speculative_num_steps,
            "draft_tensor_parallel_size": config.tp_size,
        }
    methods = {c.speculative_algorithm for c in configs}
    assert methods == {"none", "EAGLE3", "EAGLE"}  # the sample covers every choice


def test_the_flag_table_matches_the_release_and_its_refusals(release: str) -> None:
    detected = detect_flags(sys.executable, env=_env(release))
    assert detected.version == release
    table = known_flags(release)
    missing = sorted(flag for flag in table.options if not detected.has(flag))
    assert not missing, f"autotune's table of vLLM {release} names flags its parser lacks"
    # the older spelling of the capture size is refused by this release
    assert not detected.has("--cuda-graph-sizes")
    refused = _parse(release, [["/m", "--cuda-graph-sizes", "64"]])[0]
    assert refused["code"] != 0 and "--cuda-graph-sizes" in refused["stderr"]


def test_a_detected_engine_launches_what_the_parser_accepts(release: str) -> None:
    spec = EngineSpec(kind="vllm", model_path="/m", check_paths=False, env=_env(release))
    engine = create_engine(spec)
    assert engine.describe().startswith(f"vLLM {release} (detected from ")


#: Validates ``--speculative-config`` objects against the release's own SpeculativeConfig: each
#: key must be one of its fields, each value must validate as that field's declared type, and the
#: method must be one the release names (the field's type also admits any string).
SPEC_SCRIPT = r"""
import dataclasses, json, sys, typing
import pydantic
from vllm.config import SpeculativeConfig
from vllm.config.speculative import SpeculativeMethod
hints = typing.get_type_hints(SpeculativeConfig, include_extras=True)
fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
def literals(tp):
    if typing.get_origin(tp) is typing.Literal:
        return {x for arg in typing.get_args(tp) for x in literals(arg)}
    return {tp} if isinstance(tp, str) else set()
methods = literals(SpeculativeMethod)
results = []
for obj in json.load(sys.stdin):
    errors = []
    for key, value in obj.items():
        if key not in fields:
            errors.append("no field %s" % key)
            continue
        if key == "method" and value not in methods:
            errors.append("method %r is none of %s" % (value, sorted(methods)))
        try:
            pydantic.TypeAdapter(hints[key]).validate_python(value)
        except Exception as e:
            errors.append("%s=%r: %s" % (key, value, str(e).splitlines()[0]))
    results.append(errors)
print("MARKER" + json.dumps(results))
""".replace("MARKER", MARKER)


def test_the_speculative_configs_are_the_releases_own(release: str) -> None:
    """Every ``--speculative-config`` the adapter writes (each method, the draft's TP size, the
    per-load schedule of speculative tokens) has only fields of the release's SpeculativeConfig,
    with values its declared types accept; a misspelt method and a malformed schedule are refused,
    so the check can fail."""
    engine = _engine(release)
    base = {"gpu_memory_utilization": 0.9, "cuda_graph_max_bs": 64, "tp_size": 2}
    chains = {
        steps: ServerConfig(speculative_algorithm=method, speculative_num_steps=steps, **base)
        for method, steps in (("EAGLE3", 5), ("EAGLE", 3), ("EAGLE3", 2))
    }
    objects = [
        _speculative_config(engine.build_launch(config, port=30000).argv)
        for config in chains.values()
    ]
    plan = engine.load_schedule(
        [(1, chains[5]), (16, chains[2]), (64, ServerConfig(**base))],  # type: ignore[arg-type]
        chains[2],
    )
    assert plan.expressible and plan.command is not None, plan.reason
    words = shlex.split(plan.command)
    scheduled = json.loads(words[words.index("--speculative-config") + 1])
    assert SCHEDULE_KEY in scheduled
    objects += [scheduled, {**objects[0], "method": "eagle-3"}, {**scheduled, SCHEDULE_KEY: 3}]
    results = _run(release, SPEC_SCRIPT, json.dumps(objects))
    assert results[:-2] == [[]] * (len(objects) - 2)
    assert results[-2] and "method 'eagle-3'" in results[-2][0]
    assert results[-1] and results[-1][0].startswith(SCHEDULE_KEY)


def _speculative_config(argv: tuple[str, ...]) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(argv[argv.index("--speculative-config") + 1])
    return config


#: The older release whose table the adapter has, and the flags of its ``vllm serve`` parser.
OLD_RELEASE = "0.10.2"


def _source_flags(package: Path) -> set[str]:
    """The option strings that ``vllm serve``'s parser of an installed vLLM source defines: every
    ``add_argument("--...")`` of its engine arguments and OpenAI front end, and one flag per field
    of ``FrontendArgs`` (which that release's front end adds as ``--field-name``)."""
    flags: set[str] = set()
    for rel in ("engine/arg_utils.py", "entrypoints/openai/cli_args.py"):
        tree = ast.parse((package / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"):
                        flags.add(str(arg.value))
            if isinstance(node, ast.ClassDef) and node.name == "FrontendArgs":
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        flags.add("--" + item.target.id.replace("_", "-"))
    return flags


def test_the_older_release_table_matches_its_parser_source() -> None:
    """vLLM 0.10.2's parser cannot be built without a GPU platform (that release picks its CPU
    platform only for a CPU build or on macOS), so its table is checked against the source of
    its parser definition instead."""
    package = _root() / f"vllm-{OLD_RELEASE}" / "vllm"
    if not (package / "engine" / "arg_utils.py").is_file():
        _absent(f"vLLM {OLD_RELEASE}'s source")
    flags = _source_flags(package)
    assert len(flags) > 100  # the whole parser was read, not a fragment
    table = known_flags(OLD_RELEASE)
    assert sorted(f for f in table.options if f not in flags) == []
    assert "--cuda-graph-sizes" in flags and "--max-cudagraph-capture-size" not in flags
    assert "--attention-backend" not in flags
