"""Validation of space files: every refusal names the file, the line and the key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from autotune._errors import ConfigError
from autotune.space import load_space, parse_space

REPO = Path(__file__).resolve().parents[2]

SPEC = """\
fixed:
  speculative_algorithm: EAGLE3
parameters:
  speculative_num_steps: {type: int, low: 1, high: 4}
  speculative_eagle_topk: {type: categorical, choices: [1, 2, 4]}
  speculative_num_draft_tokens: {type: int, low: 2, high: 8}
"""


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _refusal(tmp_path: Path, text: str) -> tuple[str, Path]:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_space(path)
    assert info.value.exit_code == 2
    return str(info.value), path


# (space text, text of the offending line, key path, part of the message)
CASES = [
    pytest.param(
        "name: x\nparamters:\n  cuda_graph_max_bs: {choices: [64, 128]}\n",
        "paramters:",
        "paramters",
        "did you mean 'parameters'",
        id="unknown-top-key",
    ),
    pytest.param(
        "parameters:\n  cuda_graph_max_b: {choices: [64, 128]}\n",
        "cuda_graph_max_b:",
        "parameters.cuda_graph_max_b",
        "did you mean 'cuda_graph_max_bs'",
        id="unknown-knob",
    ),
    pytest.param(
        "parameters:\n  cuda_graph_max_bs: {choices: [64, 128]}\n"
        "  cuda_graph_max_bs: {choices: [8, 16]}\n",
        "[8, 16]",
        "parameters.cuda_graph_max_bs",
        "duplicate key",
        id="duplicate-parameter",
    ),
    pytest.param(
        "parameters:\n  cuda_graph_max_bs: {choices: [64, 128], lo: 1}\n",
        "lo: 1",
        "parameters.cuda_graph_max_bs.lo",
        "allowed: choices, type, when",
        id="unknown-param-key",
    ),
    pytest.param(
        "fixed:\n  cuda_graph_max_bs: 64\nparameters:\n  cuda_graph_max_bs: {choices: [64, 128]}\n",
        "{choices",
        "parameters.cuda_graph_max_bs",
        "both fixed and tuned",
        id="fixed-and-tuned",
    ),
    pytest.param(
        "parameters:\n  cuda_graph_max_bs: {type: int, low: 64, high: 64}\n",
        "high: 64",
        "parameters.cuda_graph_max_bs.high",
        "must be below high",
        id="low-not-below-high",
    ),
    pytest.param(
        "parameters:\n  chunked_prefill_size: {type: int, low: 0, high: 8192, log: true}\n",
        "log: true",
        "parameters.chunked_prefill_size.low",
        "low > 0",
        id="log-needs-positive-low",
    ),
    pytest.param(
        "parameters:\n  speculative_num_steps: {type: int, low: 1, high: 6, step: 2}\n",
        "step: 2",
        "parameters.speculative_num_steps.step",
        "does not divide the range 1..6",
        id="int-step-does-not-divide",
    ),
    pytest.param(
        "parameters:\n  mem_fraction_static: {type: float, low: 0.7, high: 0.95, step: 0.02}\n",
        "step: 0.02",
        "parameters.mem_fraction_static.step",
        "use high: 0.94 or high: 0.96",
        id="float-step-does-not-divide",
    ),
    pytest.param(
        "parameters:\n  mem_fraction_static:\n"
        "    {type: float, low: 0.7, high: 0.9, step: 0.1, log: true}\n",
        "log: true",
        "parameters.mem_fraction_static.step",
        "cannot be combined",
        id="float-step-and-log",
    ),
    pytest.param(
        "parameters:\n  mem_fraction_static: {type: int, low: 1, high: 2}\n",
        "type: int",
        "parameters.mem_fraction_static.type",
        "use type: float",
        id="int-kind-on-fraction",
    ),
    pytest.param(
        "parameters:\n  cuda_graph_max_bs: {type: float, low: 8, high: 64}\n",
        "type: float",
        "parameters.cuda_graph_max_bs.type",
        "use type: int",
        id="float-kind-on-count",
    ),
    pytest.param(
        "parameters:\n  speculative_num_steps: {type: int, low: 1.5, high: 6}\n",
        "low: 1.5",
        "parameters.speculative_num_steps.low",
        "must be an integer",
        id="float-bound-on-int",
    ),
    pytest.param(
        "parameters:\n  allreduce: {type: int, low: 1, high: 2}\n",
        "type: int",
        "parameters.allreduce.type",
        "torch_symm_mem",
        id="int-kind-on-named-knob",
    ),
    pytest.param(
        "parameters:\n  mem_fraction_static:\n    type: float\n    low: 0.7\n    high: 1.0\n",
        "high: 1.0",
        "parameters.mem_fraction_static.high",
        "between 0 and 1",
        id="fraction-out-of-range",
    ),
    pytest.param(
        "parameters:\n  allreduce:\n    choices:\n      - nccl\n      - nvls\n",
        "- nvls",
        "parameters.allreduce.choices[1]",
        "expected one of custom, nccl",
        id="allreduce-mode-unknown",
    ),
    pytest.param(
        "parameters:\n  cuda_graph_max_bs: {type: categorical, choices: []}\n",
        "choices: []",
        "parameters.cuda_graph_max_bs.choices",
        "non-empty",
        id="categorical-empty",
    ),
    pytest.param(
        "parameters:\n  cuda_graph_max_bs: {type: categorical, choices: [64]}\n",
        "choices: [64]",
        "parameters.cuda_graph_max_bs.choices",
        "move it under fixed",
        id="categorical-single",
    ),
    pytest.param(
        "parameters:\n  speculative_algorithm:\n    choices: [EAGLE3, none, eagle3]\n",
        "choices:",
        "parameters.speculative_algorithm.choices[2]",
        "duplicate choice",
        id="categorical-duplicate-after-normalising",
    ),
    pytest.param(
        "parameters:\n  cuda_graph_max_bs: {choices: [64, 128], when: {page_sise: 1}}\n",
        "when:",
        "parameters.cuda_graph_max_bs.when.page_sise",
        "unknown knob 'page_sise'",
        id="when-unknown-knob",
    ),
    pytest.param(
        "parameters:\n  cuda_graph_max_bs: {choices: [64, 128], when: {page_size: 1}}\n"
        "  page_size: {choices: [1, 16]}\n",
        "when:",
        "parameters.cuda_graph_max_bs.when.page_size",
        "declare page_size above cuda_graph_max_bs",
        id="when-refers-below",
    ),
    pytest.param(
        "fixed:\n  page_size: 16\nparameters:\n"
        "  cuda_graph_max_bs: {choices: [64, 128], when: {page_size: 16}}\n",
        "when:",
        "parameters.cuda_graph_max_bs.when.page_size",
        "page_size is fixed",
        id="when-on-fixed-knob",
    ),
    pytest.param(
        "parameters:\n  page_size: {choices: [1, 16]}\n"
        "  cuda_graph_max_bs:\n    choices: [64, 128]\n    when:\n      page_size: [16, 32]\n",
        "page_size: [16, 32]",
        "parameters.cuda_graph_max_bs.when.page_size[1]",
        "never takes the value 32",
        id="when-value-impossible",
    ),
    pytest.param(
        SPEC + "enqueue:\n  configs:\n    - {speculative_num_steps: 9, speculative_eagle_topk: 1,"
        " speculative_num_draft_tokens: 10}\n",
        "speculative_num_steps: 9",
        "enqueue.configs[0].speculative_num_steps",
        "outside the space",
        id="enqueued-out-of-range",
    ),
    pytest.param(
        SPEC
        + "enqueue:\n  configs:\n    - speculative_num_steps: 2\n      speculative_eagle_topk: 4\n",
        "speculative_num_steps: 2",
        "enqueue.configs[0]",
        "missing parameter speculative_num_draft_tokens",
        id="enqueued-missing-parameter",
    ),
    pytest.param(
        SPEC
        + "enqueue:\n  configs:\n    - speculative_num_steps: 2\n      speculative_eagle_topk: 4\n"
        "      speculative_num_draft_tokens: 4\n      cuda_graph_max_bs: 128\n",
        "cuda_graph_max_bs: 128",
        "enqueue.configs[0].cuda_graph_max_bs",
        "not a parameter of this space",
        id="enqueued-unknown-knob",
    ),
    pytest.param(
        SPEC
        + "enqueue:\n  configs:\n    - speculative_num_steps: 2\n      speculative_eagle_topk: 1\n"
        "      speculative_num_draft_tokens: 5\n",
        "speculative_num_draft_tokens: 5",
        "enqueue.configs[0].speculative_num_draft_tokens",
        "SGLang would run speculative_num_draft_tokens=3",
        id="enqueued-breaks-a-rule",
    ),
    pytest.param(
        "parameters:\n  attention_backend: {choices: [fa3, flashinfer]}\n"
        "  page_size: {choices: [1, 16], when: {attention_backend: fa3}}\n"
        "enqueue:\n  configs:\n    - {attention_backend: flashinfer, page_size: 16}\n",
        "- {attention_backend",
        "enqueue.configs[0].page_size",
        "does not apply to this config",
        id="enqueued-inactive-parameter",
    ),
    pytest.param(
        SPEC + "enqueue:\n  baseline: {speculative_num_steps: 2}\n",
        "baseline:",
        "enqueue.baseline.speculative_num_steps",
        "without speculative decoding",
        id="baseline-speculative-knob",
    ),
    pytest.param(
        SPEC + "workload:\n  concurrency: 4\n  input_len:\n    mean: 0\n",
        "mean: 0",
        "workload.input_len.mean",
        "must be >= 1",
        id="workload-value",
    ),
    pytest.param(
        SPEC + "workload:\n  concurency: 4\n",
        "concurency",
        "workload.concurency",
        "unknown key",
        id="workload-unknown-key",
    ),
    pytest.param(
        SPEC + "engine:\n  kind: tgi\n",
        "kind: tgi",
        "engine.kind",
        "allowed: sim, sglang, vllm",
        id="engine-kind",
    ),
    pytest.param(
        SPEC + "engine:\n  tp_size: 0\n",
        "tp_size: 0",
        "engine.tp_size",
        "must be >= 1",
        id="tp-size",
    ),
    pytest.param(
        SPEC + "engine:\n  timeouts: {startup_s: 0}\n",
        "timeouts:",
        "engine.timeouts.startup_s",
        "positive",
        id="timeout-positive",
    ),
    pytest.param(
        SPEC + "engine:\n  sim:\n    profile: 12\n",
        "profile: 12",
        "engine.sim.profile",
        "non-empty string",
        id="sim-profile-string",
    ),
    pytest.param(
        SPEC + "engine:\n  sim:\n    dialect: 0.5\n",
        "dialect: 0.5",
        "engine.sim.dialect",
        "quote it",
        id="sim-dialect-number",
    ),
    pytest.param(
        SPEC + "engine:\n  extra_args: [--trust-remote-code, --mem-fraction-static=0.8]\n",
        "extra_args:",
        "engine.extra_args[1]",
        "set mem_fraction_static under fixed: or parameters:",
        id="extra-args-owned-flag",
    ),
    pytest.param(
        SPEC + "engine:\n  env: {NCCL_ALGO: Tree}\n",
        "env:",
        "engine.env.NCCL_ALGO",
        "allreduce: nccl_tree",
        id="env-nccl-algo",
    ),
    pytest.param(
        SPEC + "engine:\n  env: {SGLANG_ENABLE_SPEC_V2: 'True'}\n",
        "env:",
        "engine.env.SGLANG_ENABLE_SPEC_V2",
        "use spec_v2: true or false",
        id="env-spec-v2",
    ),
    pytest.param(
        SPEC + "engine:\n  extra_args: [--speculative-ngram-max-bfs-breadth, '4']\n",
        "extra_args:",
        "engine.extra_args[0]",
        "set speculative_eagle_topk under fixed: or parameters:",
        id="extra-args-ngram-breadth",
    ),
    pytest.param(
        SPEC + "engine:\n  kind: sglang\n  check_paths: false\n  model_path: org/model\n",
        "engine:",
        "engine",
        "needs a draft model",
        id="sglang-without-draft",
    ),
    pytest.param(
        "parameters:\n  speculative_num_steps: {type: int, low: 1, high: 4}\n"
        "  speculative_eagle_topk: {choices: [1, 2]}\n",
        "speculative_num_steps:",
        "parameters.speculative_num_steps",
        "speculative_num_draft_tokens not set",
        id="speculative-numbers-partial",
    ),
    pytest.param(
        SPEC.replace("EAGLE3", "none"),
        "speculative_num_steps:",
        "parameters.speculative_num_steps",
        "speculative decoding is never on",
        id="speculative-numbers-without-algorithm",
    ),
    pytest.param(
        SPEC + "objective:\n  metric: output_tps\n",
        "metric: output_tps",
        "objective.metric",
        "did you mean 'output_tok_s'",
        id="objective-metric",
    ),
    pytest.param(
        SPEC + "objective:\n  constraints:\n    - {metric: ttft_p99_ms}\n",
        "- {metric",
        "objective.constraints[0]",
        "needs max or min",
        id="constraint-without-bound",
    ),
    pytest.param(
        SPEC + "objective:\n  score: mean\n",
        "score: mean",
        "objective.score",
        "allowed: median, conservative",
        id="objective-score",
    ),
    pytest.param(
        SPEC + "name: my study\n",
        "name:",
        "name",
        "not a usable study name",
        id="study-name",
    ),
    pytest.param(
        "parameters:\n  mem_fraction_static: {type: float, low: 1e-2, high: 0.9}\n",
        "low: 1e-2",
        "parameters.mem_fraction_static.low",
        "write 1.0e-3",
        id="yaml-exponent-without-dot",
    ),
    pytest.param(
        "parameters:\n  tp_size: {choices: [1, 2]}\n",
        "tp_size:",
        "parameters.tp_size",
        "set engine.tp_size",
        id="tp-size-is-the-engine's",
    ),
    pytest.param(
        "fixed:\n  speculative_agorithm: EAGLE3\nparameters:\n  page_size: {choices: [1, 16]}\n",
        "speculative_agorithm",
        "fixed.speculative_agorithm",
        "did you mean 'speculative_algorithm'",
        id="fixed-unknown-knob",
    ),
    pytest.param(
        "fixed:\n  speculative_algorithm: EAGLE9\nparameters:\n  page_size: {choices: [1, 16]}\n",
        "EAGLE9",
        "fixed.speculative_algorithm",
        "expected one of none, EAGLE, EAGLE3",
        id="fixed-bad-value",
    ),
    pytest.param(
        "parameters:\n  page_size: [1, 16]\n",
        "page_size:",
        "parameters.page_size",
        "must be a mapping",
        id="parameter-not-a-mapping",
    ),
    pytest.param(
        "parameters: {}\n",
        "parameters:",
        "parameters",
        "at least one parameter",
        id="no-parameters",
    ),
]


@pytest.mark.parametrize(("text", "needle", "key", "fragment"), CASES)
def test_refusal_names_file_line_and_key(
    tmp_path: Path, text: str, needle: str, key: str, fragment: str
) -> None:
    message, path = _refusal(tmp_path, text)
    assert f"{path}:{_line(text, needle)} ({key})" in message
    assert fragment in message


def test_malformed_yaml_names_line_and_column(tmp_path: Path) -> None:
    text = SPEC + "objective: {metric: output_tok_s\n"
    message, path = _refusal(tmp_path, text)
    assert message.startswith(f"{path}:")
    line = int(message[len(str(path)) + 1 :].split(":")[0])
    assert line >= _line(text, "objective:")


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_space(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_space(tmp_path)
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_space(bad)


def test_sglang_model_paths_are_checked_and_resolved(tmp_path: Path) -> None:
    base = (
        SPEC
        + "engine:\n  kind: sglang\n  model_path: models/target\n  draft_model_path: models/draft\n"
    )
    message, path = _refusal(tmp_path, base)
    assert f"{path}:{_line(base, 'model_path:')} (engine.model_path)" in message
    assert str(tmp_path / "models" / "target") in message
    assert "check_paths: false" in message

    (tmp_path / "models" / "target").mkdir(parents=True)
    (tmp_path / "models" / "draft").mkdir()
    space = load_space(path)
    assert space.engine.model_path == str(tmp_path / "models" / "target")
    assert space.engine.draft_model_path == str(tmp_path / "models" / "draft")


def test_hub_ids_pass_with_check_paths_off(tmp_path: Path) -> None:
    text = (
        SPEC + "engine:\n  kind: sglang\n  check_paths: false\n  model_path: org/model\n"
        "  draft_model_path: org/draft\n  python: /opt/box/bin/python\n"
        "  launch_prefix: [docker, exec, box]\n  extra_args: [--context-length, 65536]\n"
        "  env: {NCCL_DEBUG: WARN, OMP_NUM_THREADS: 4}\n"
    )
    space = parse_space(text, source="hub.yaml", base_dir=tmp_path)
    assert space.engine.model_path == "org/model"
    assert space.engine.draft_model_path == "org/draft"
    assert space.engine.python == "/opt/box/bin/python"
    assert space.engine.launch_prefix == ("docker", "exec", "box")
    assert space.engine.extra_args == ("--context-length", "65536")
    assert space.engine.env == {"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "4"}


def test_missing_python_interpreter_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    text = SPEC + (
        "engine:\n  kind: sglang\n  model_path: m\n  draft_model_path: m\n"
        "  python: venv/bin/python\n"
    )
    message, path = _refusal(tmp_path, text)
    assert f"{path}:{_line(text, 'python:')} (engine.python)" in message


def test_engine_section_builds_the_engine_spec(tmp_path: Path) -> None:
    text = SPEC + (
        "engine:\n  tp_size: 4\n  port: 31000\n  timeouts: {startup_s: 60, stop_s: 5}\n"
        "  sim: {profile: rtxpro6000x8-kimi-k2.5, dialect: '0.5.3', time_scale: 0.5, noise: 0,"
        " seed: 3, faults: ['slow_start:2']}\n"
    )
    engine = parse_space(text, base_dir=tmp_path).engine
    assert (engine.kind, engine.tp_size, engine.port) == ("sim", 4, 31000)
    assert engine.timeouts.startup_s == 60 and engine.timeouts.stop_s == 5
    assert engine.timeouts.benchmark_s > 0  # untouched ones keep their defaults
    assert engine.sim.profile == "rtxpro6000x8-kimi-k2.5" and engine.sim.dialect == "0.5.3"
    assert engine.sim.seed == 3 and engine.sim.faults == ("slow_start:2",)
    assert engine.sim.noise == 0.0 and engine.sim.time_scale == 0.5


def test_workload_prompt_file_is_resolved_against_the_space_directory(tmp_path: Path) -> None:
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    text = SPEC + "workload: {source: jsonl, path: prompts.jsonl}\n"
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert load_space(path).workload.path == str(tmp_path / "prompts.jsonl")


def test_objective_defaults_and_constraints() -> None:
    space = parse_space(SPEC + "objective:\n  metric: ttft_p99_ms\n")
    assert space.objective.direction == "minimize"
    text = SPEC + (
        "objective:\n  score: conservative\n  mad_k: 2\n  constraints:\n"
        "    - {metric: ttft_p99_ms, max: 30000}\n    - {metric: accept_length, min: 1.5}\n"
    )
    objective = parse_space(text).objective
    assert objective.metric == "output_tok_s" and objective.direction == "maximize"
    assert objective.score == "conservative" and objective.mad_k == 2.0
    assert [(c.metric, c.max, c.min) for c in objective.constraints] == [
        ("ttft_p99_ms", 30000, None),
        ("accept_length", None, 1.5),
    ]


def test_baseline_forms() -> None:
    assert parse_space(SPEC).baseline == {}
    assert parse_space(SPEC + "enqueue: {baseline: false}\n").baseline is None
    mapping = parse_space(SPEC + "enqueue: {baseline: {allreduce: nccl, cuda_graph_max_bs: 512}}\n")
    assert mapping.baseline == {"allreduce": "nccl", "cuda_graph_max_bs": 512}


def test_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "my-space.yaml"
    path.write_text(SPEC)
    assert load_space(path).name == "my-space"
    assert parse_space("name: given\n" + SPEC).name == "given"


GARBAGE = [[], {"a": 1}, None, True, "x", -1]
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _paths(node: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out = [path] if path else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*path, i))
    return out


def test_any_wrong_value_is_a_config_error() -> None:
    """Every key of a full space, given values of every wrong shape: refused, never a crash."""
    base = yaml.safe_load((REPO / "search_spaces" / "eagle3.yaml").read_text())
    base["objective"]["constraints"] = [{"metric": "ttft_p99_ms", "max": 30000}]
    base["engine"].update(env={"NCCL_DEBUG": "WARN"}, extra_args=["--trust-remote-code"])
    for path in _paths(base):
        for value in GARBAGE:
            data = copy.deepcopy(base)
            node = data
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            try:
                parse_space(yaml.dump(data, Dumper=_DUMPER), source="g.yaml")
            except ConfigError as e:
                assert str(e).startswith("g.yaml:"), (path, value, str(e))


@pytest.mark.parametrize("kind", ["sim", "sglang"])
def test_ngram_takes_some_speculative_numbers(tmp_path: Path, kind: str) -> None:
    # SGLang fills NGRAM's steps and top-k itself; EAGLE3 beside it in the choices still needs all
    engine = "engine:\n  kind: sglang\n  check_paths: false\n  model_path: org/m\n"
    ngram = (
        "fixed:\n  speculative_algorithm: NGRAM\n"
        "parameters:\n  speculative_num_draft_tokens: {type: int, low: 2, high: 8}\n"
    )
    head = engine if kind == "sglang" else ""
    space = parse_space(head + ngram, source="ngram.yaml", base_dir=tmp_path)
    assert [p.name for p in space.parameters] == ["speculative_num_draft_tokens"]
    mixed = ngram.replace("fixed:\n  speculative_algorithm: NGRAM\n", "").replace(
        "parameters:\n", "parameters:\n  speculative_algorithm: {choices: [NGRAM, EAGLE3]}\n"
    )
    with pytest.raises(ConfigError) as info:
        parse_space(head + mixed, source="mixed.yaml", base_dir=tmp_path)
    assert "(parameters.speculative_num_draft_tokens)" in (info.value.location or "")
