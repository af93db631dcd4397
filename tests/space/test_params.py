"""Parameter kinds: Optuna distributions, membership, enumeration, suggestion."""

from __future__ import annotations

import optuna
import pytest

from autotune.space import ParamSpec, parse_space


def _params(body: str) -> dict[str, ParamSpec]:
    space = parse_space("parameters:\n" + body)
    return {p.name: p for p in space.parameters}


def test_distributions_match_the_declared_domain() -> None:
    params = _params(
        "  max_running_requests: {type: int, low: 1, high: 7, step: 2}\n"
        "  chunked_prefill_size: {type: int, low: 512, high: 16384, log: true}\n"
        "  mem_fraction_static: {type: float, low: 0.70, high: 0.94, step: 0.01}\n"
        "  cuda_graph_max_bs: {choices: [16, 32, 64]}\n"
    )
    steps = params["max_running_requests"].distribution()
    assert isinstance(steps, optuna.distributions.IntDistribution)
    assert (steps.low, steps.high, steps.step, steps.log) == (1, 7, 2, False)
    chunk = params["chunked_prefill_size"].distribution()
    assert isinstance(chunk, optuna.distributions.IntDistribution) and chunk.log
    frac = params["mem_fraction_static"].distribution()
    assert isinstance(frac, optuna.distributions.FloatDistribution)
    assert frac.step == pytest.approx(0.01) and not frac.log
    graph = params["cuda_graph_max_bs"].distribution()
    assert isinstance(graph, optuna.distributions.CategoricalDistribution)
    assert graph.choices == (16, 32, 64)


def test_contains_and_values_agree_with_optuna() -> None:
    params = _params(
        "  max_running_requests: {type: int, low: 1, high: 7, step: 2}\n"
        "  mem_fraction_static: {type: float, low: 0.70, high: 0.94, step: 0.01}\n"
        "  disable_cuda_graph: {choices: [true, false]}\n"
    )
    for param in params.values():
        dist = param.distribution()
        values = param.values()
        assert values is not None
        for value in values:
            assert param.contains(value)
            assert dist._contains(dist.to_internal_repr(value))
    assert params["max_running_requests"].values() == (1, 3, 5, 7)
    assert len(params["mem_fraction_static"].values() or ()) == 25
    steps = params["max_running_requests"]
    assert not steps.contains(2)  # off the step grid
    assert not steps.contains(9)
    assert not steps.contains(True)
    assert not steps.contains(3.0)
    frac = params["mem_fraction_static"]
    assert frac.contains(0.88) and not frac.contains(0.885) and not frac.contains(0.95)
    flag = params["disable_cuda_graph"]
    assert flag.contains(True) and not flag.contains(1)


def test_continuous_float_has_no_enumeration() -> None:
    param = _params("  mem_fraction_static: {type: float, low: 0.5, high: 0.9}\n")[
        "mem_fraction_static"
    ]
    assert param.values() is None
    assert param.contains(0.6180339)


def test_type_is_inferred_from_choices_or_the_knob() -> None:
    params = _params(
        "  cuda_graph_max_bs: {low: 8, high: 64, step: 8}\n"
        "  mem_fraction_static: {low: 0.6, high: 0.9}\n"
        "  allreduce: {choices: [nccl, custom]}\n"
    )
    assert [p.kind for p in params.values()] == ["int", "float", "categorical"]


def test_auto_is_a_choice_that_leaves_the_knob_unset() -> None:
    param = _params("  mem_fraction_static: {choices: [auto, 0.8, 0.88]}\n")["mem_fraction_static"]
    assert param.choices == (None, 0.8, 0.88)
    assert param.describe() == "one of auto, 0.8, 0.88"


def test_suggestions_stay_on_the_grid() -> None:
    params = _params(
        "  max_running_requests: {type: int, low: 1, high: 7, step: 2}\n"
        "  mem_fraction_static: {type: float, low: 0.70, high: 0.94, step: 0.01}\n"
        "  speculative_algorithm: {choices: [none, eagle3]}\n"
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen: dict[str, set[object]] = {name: set() for name in params}
    for _ in range(60):
        trial = study.ask()
        for name, param in params.items():
            value = param.suggest(trial)
            assert param.contains(value), (name, value)
            seen[name].add(value)
        study.tell(trial, 0.0)
    assert seen["speculative_algorithm"] == {"none", "EAGLE3"}  # normalised as SGLang spells it
    assert seen["max_running_requests"] <= {1, 3, 5, 7}


def test_active_follows_the_condition() -> None:
    params = _params(
        "  attention_backend: {choices: [fa3, flashinfer, triton]}\n"
        "  page_size: {choices: [1, 16], when: {attention_backend: [fa3, triton]}}\n"
    )
    page = params["page_size"]
    assert page.when == {"attention_backend": ("fa3", "triton")}
    assert page.active({"attention_backend": "triton"})
    assert not page.active({"attention_backend": "flashinfer"})
    assert not page.active({})
    assert "only when attention_backend in [fa3, triton]" in page.describe()


def test_stepped_floats_come_without_rounding_noise() -> None:
    space = parse_space("parameters:\n  mem_fraction_static: {low: 0.70, high: 0.94, step: 0.01}\n")
    values = {p["mem_fraction_static"] for p in space.sample(400, seed=2)}
    assert len(values) > 10
    assert all(v == round(v, 2) for v in values)
    # a value read back from a trial record is cleaned the same way before launch
    config = space.config_for({"mem_fraction_static": 0.8799999999999999})
    assert config.mem_fraction_static == 0.88
