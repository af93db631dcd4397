"""SearchSpace: suggestion through a real Optuna study, configurations, fingerprint, summary."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune._errors import ConfigError
from autotune._knobs import ServerConfig
from autotune.engines.sglang._rules import check_rules
from autotune.space import ConstraintSpec, SearchSpace, load_space, parse_space

REPO = Path(__file__).resolve().parents[2]
SPACES = REPO / "search_spaces"

CONDITIONAL = """\
name: cond
engine: {tp_size: 2}
fixed:
  attention_backend: fa3
parameters:
  speculative_algorithm: {choices: [none, EAGLE3]}
  speculative_num_steps: {type: int, low: 1, high: 3, when: {speculative_algorithm: EAGLE3}}
  speculative_eagle_topk: {choices: [1, 2], when: {speculative_algorithm: EAGLE3}}
  speculative_num_draft_tokens:
    type: int
    low: 2
    high: 4
    when: {speculative_algorithm: EAGLE3}
  page_size: {choices: [1, 16], when: {speculative_eagle_topk: 2}}
  cuda_graph_max_bs: {choices: [64, 128]}
enqueue:
  baseline: {cuda_graph_max_bs: 512}
  configs:
    - {speculative_algorithm: EAGLE3, speculative_num_steps: 2, speculative_eagle_topk: 2,
       speculative_num_draft_tokens: 4, page_size: 16, cuda_graph_max_bs: 128}
    - {speculative_algorithm: none, cuda_graph_max_bs: 64, attention_backend: fa3}
"""


def _brute_force_size(space: SearchSpace) -> int:
    """Every assignment of every parameter, reduced to the knobs each one actually sets."""
    domains = [p.values() for p in space.parameters]
    assert all(d is not None for d in domains)
    seen = set()
    for combo in itertools.product(*[d or () for d in domains]):
        chosen: dict[str, Any] = {}
        for param, value in zip(space.parameters, combo, strict=True):
            if param.active(chosen):
                chosen[param.name] = value
        seen.add(tuple(sorted(chosen.items())))
    return len(seen)


def test_round_trip_through_an_optuna_study() -> None:
    space = parse_space(CONDITIONAL)
    assert space.conditional
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=7))
    for params in space.enqueued:
        study.enqueue_trial(dict(params))
    proposals = []
    for _ in range(80):
        trial = study.ask()
        params = space.suggest(trial)
        study.tell(trial, 1.0)
        proposals.append(params)
    assert proposals[: len(space.enqueued)] == [dict(p) for p in space.enqueued]
    on = [p for p in proposals if p["speculative_algorithm"] == "EAGLE3"]
    off = [p for p in proposals if p["speculative_algorithm"] == "none"]
    assert on and off
    for params in proposals:
        for spec in space.parameters:
            assert (spec.name in params) == spec.active(params)
            if spec.name in params:
                assert spec.contains(params[spec.name])
    assert all(set(p) == {"speculative_algorithm", "cuda_graph_max_bs"} for p in off)
    assert any("page_size" in p for p in on) and any("page_size" not in p for p in on)
    assert all(("page_size" in p) == (p["speculative_eagle_topk"] == 2) for p in on)


def test_enqueued_configs_are_inside_the_space_and_runnable() -> None:
    space = parse_space(CONDITIONAL)
    assert len(space.enqueued) == 2
    assert "attention_backend" not in space.enqueued[1]  # a fixed knob is not a parameter
    for params in space.enqueued:
        for spec in space.parameters:
            assert (spec.name in params) == spec.active(params)
        assert check_rules(space.config_for(params)) is None


def test_config_for_and_baseline_config() -> None:
    space = parse_space(CONDITIONAL)
    config = space.config_for(space.enqueued[0])
    assert isinstance(config, ServerConfig)
    assert config.tp_size == 2
    assert config.attention_backend == "fa3"
    assert (config.speculative_num_steps, config.page_size, config.cuda_graph_max_bs) == (
        2,
        16,
        128,
    )
    base = space.baseline_config()
    assert not base.speculative
    assert base.speculative_num_steps is None and base.page_size is None
    assert (base.cuda_graph_max_bs, base.attention_backend, base.tp_size) == (512, "fa3", 2)


def test_baseline_drops_fixed_speculative_knobs() -> None:
    space = parse_space(
        "fixed: {speculative_algorithm: EAGLE3, speculative_num_steps: 3, allreduce: nccl}\n"
        "parameters:\n  speculative_eagle_topk: {choices: [1, 2]}\n"
        "  speculative_num_draft_tokens: {type: int, low: 2, high: 7}\n"
    )
    base = space.baseline_config()
    assert not base.speculative and base.speculative_num_steps is None
    assert base.allreduce == "nccl"


def test_size_counts_conditional_configurations() -> None:
    space = parse_space(CONDITIONAL)
    assert space.size() == _brute_force_size(space)
    flat = parse_space(
        "parameters:\n  cuda_graph_max_bs: {choices: [64, 128, 256]}\n"
        "  mem_fraction_static: {low: 0.8, high: 0.9, step: 0.05}\n"
    )
    assert flat.size() == _brute_force_size(flat)
    continuous = parse_space("parameters:\n  mem_fraction_static: {low: 0.8, high: 0.9}\n")
    assert continuous.size() is None


def test_sample_is_seeded_and_inside_the_space() -> None:
    space = parse_space(CONDITIONAL)
    first = space.sample(50, seed=3)
    assert len(first) == 50
    assert first == space.sample(50, seed=3)
    assert first != space.sample(50, seed=4)
    for params in first:
        for spec in space.parameters:
            assert (spec.name in params) == spec.active(params)
            if spec.name in params:
                assert spec.contains(params[spec.name])


def test_distributions_cover_every_parameter() -> None:
    space = parse_space(CONDITIONAL)
    dists = space.distributions()
    assert list(dists) == [p.name for p in space.parameters]
    assert isinstance(dists["page_size"], optuna.distributions.CategoricalDistribution)


def test_fingerprint_is_stable_and_tracks_the_space(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(CONDITIONAL)
    first = load_space(path).fingerprint()
    assert re.fullmatch(r"[0-9a-f]{16}", first)
    assert load_space(path).fingerprint() == first
    reformatted = CONDITIONAL.replace("name: cond\n", "# a comment\nname: cond\n\n")
    assert parse_space(reformatted).fingerprint() == first
    assert (
        parse_space(CONDITIONAL.replace("tp_size: 2}", "tp_size: 2, port: 31000}")).fingerprint()
        == first
    )
    changed = [
        CONDITIONAL.replace("low: 1, high: 3", "low: 1, high: 4"),
        CONDITIONAL.replace("attention_backend: fa3\n", "attention_backend: flashinfer\n").replace(
            "attention_backend: fa3}", "attention_backend: flashinfer}"
        ),
        CONDITIONAL.replace(
            "when: {speculative_eagle_topk: 2}", "when: {speculative_eagle_topk: [1, 2]}"
        ),
        CONDITIONAL + "objective: {metric: ttft_p99_ms}\n",
        CONDITIONAL + "workload: {concurrency: 8}\n",
    ]
    prints = {parse_space(text).fingerprint() for text in changed}
    assert first not in prints and len(prints) == len(changed)


def test_summary_lists_the_space() -> None:
    space = parse_space(CONDITIONAL)
    text = space.summary()
    for spec in space.parameters:
        assert spec.name in text
    assert "attention_backend=fa3" in text
    assert "cuda_graph_max_bs=512" in text
    assert f"{space.size():,} distinct configurations" in text
    assert "only when speculative_algorithm = EAGLE3" in text


@pytest.mark.parametrize(
    ("bound", "value", "feasible"),
    [
        ({"max": 100.0}, 90.0, True),
        ({"max": 100.0}, 150.0, False),
        ({"min": 2.0}, 2.5, True),
        ({"min": 2.0}, 1.0, False),
        ({"min": 1.0, "max": 3.0}, 3.5, False),
        ({"max": 100.0}, None, False),
        ({"max": 100.0}, float("nan"), False),
    ],
)
def test_constraint_violation(bound: dict[str, float], value: float | None, feasible: bool) -> None:
    constraint = ConstraintSpec("ttft_p99_ms", **bound)
    assert (constraint.violation(value) <= 0) == feasible


def test_constraint_violation_is_relative_to_the_bound() -> None:
    assert ConstraintSpec("ttft_p99_ms", max=100.0).violation(150.0) == pytest.approx(0.5)
    assert ConstraintSpec("accept_length", min=2.0).violation(1.0) == pytest.approx(0.5)


def test_seed_space_loads_as_the_product_describes() -> None:
    space = load_space(SPACES / "eagle3.yaml")
    assert space.name == "eagle3"
    assert space.engine.kind == "sim" and space.engine.tp_size == 8
    assert space.engine.sim.profile == "rtxpro6000x8-kimi-k2.5"
    assert space.fixed == {"speculative_algorithm": "EAGLE3"}
    assert [p.name for p in space.parameters] == [
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "cuda_graph_max_bs",
        "mem_fraction_static",
        "allreduce",
    ]
    allreduce = space.parameter("allreduce")
    assert allreduce is not None
    assert {"nccl", "custom", "nccl_tree", "flashinfer_fusion", "torch_symm_mem"} <= set(
        allreduce.choices
    )
    assert space.baseline == {"allreduce": "nccl", "cuda_graph_max_bs": 128}
    assert space.baseline_config().allreduce == "nccl"
    assert not space.baseline_config().speculative
    (seed,) = space.enqueued
    config = space.config_for(seed)
    assert (config.speculative_num_steps, config.speculative_eagle_topk) == (2, 4)
    assert (config.speculative_num_draft_tokens, config.cuda_graph_max_bs) == (4, 128)
    assert (config.mem_fraction_static, config.allreduce) == (0.88, "nccl")
    assert check_rules(config) is None


def test_h100_space_loads() -> None:
    space = load_space(SPACES / "eagle3-h100.yaml")
    assert space.engine.tp_size == 1 and space.engine.sim.profile == "h100-llama-3.1-8b"
    assert space.parameter("allreduce") is None
    assert space.workload.concurrency == 1
    assert space.baseline == {}


def test_readme_examples_are_valid_spaces() -> None:
    readme = (SPACES / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", readme, flags=re.S)
    assert len(blocks) >= 2
    annotated = parse_space(blocks[0], source="README.md")
    assert annotated.objective.constraints[0].metric == "ttft_p99_ms"
    conditional = parse_space(blocks[1], source="README.md")
    assert conditional.conditional


@pytest.mark.parametrize(
    ("engine", "line"),
    [
        ("{kind: sim}", "engine:     sim (profile rtxpro6000x8-kimi-k2.5, SGLang 0.5.23 flags), "),
        (
            "{kind: sglang, model_path: org/m, check_paths: false, sglang_version: 0.5.3}",
            "engine:     sglang (SGLang 0.5.3 flags), model org/m",
        ),
        (
            "{kind: sglang, model_path: org/m, check_paths: false}",
            "engine:     sglang, model org/m",
        ),
    ],
)
def test_the_summary_names_the_engine_as_the_engine_describes_its_section(
    engine: str, line: str
) -> None:
    param = "mem_fraction_static: {type: float, low: 0.8, high: 0.9}"
    text = f"engine: {engine}\nparameters:\n  {param}\n"
    assert line in parse_space(text).summary()


@pytest.mark.parametrize(
    ("raw", "value"),
    [(True, True), ("false", False), ("auto", None), (None, None), ("yes", True), (0, False)],
)
def test_the_speculation_switches_are_true_false_or_left_to_the_engine(
    raw: object, value: bool | None
) -> None:
    for knob in ("speculative_adaptive", "spec_v2"):
        assert getattr(ServerConfig.from_params({knob: raw}), knob) is value
    with pytest.raises(ConfigError, match="spec_v2='maybe' is not allowed: expected true or false"):
        ServerConfig.from_params({"spec_v2": "maybe"})
    assert ServerConfig().to_params() == ServerConfig().replace(spec_v2=None).to_params()
    assert "speculative_adaptive" not in ServerConfig().to_params()  # unset: not recorded
