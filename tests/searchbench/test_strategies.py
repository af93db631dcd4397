"""Every strategy of the benchmark is the tuner's own loop, with options set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.searchbench import PLANS, Oracle, OracleEvaluator, StudyTrace, run_study
from autotune.searchbench import _strategies as strategies
from autotune.searchbench._benchmark import prepare
from autotune.searchbench._oracle import STOP_S
from autotune.searchbench._strategies import grid_order
from autotune.study import AutotuneSampler
from autotune.study._evaluate import RulesOnly
from autotune.study._runner import StudyRunner
from autotune.study._setup import make_engine
from autotune.study._twin_sampler import TwinSampler

# Optuna's GP optimiser warns on a converged study; not what these tests are about
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


class Spy(StudyRunner):
    """The loop, remembered (in :data:`MADE`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        MADE.append(self)


MADE: list[Spy] = []


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[Spy]:
    MADE.clear()
    monkeypatch.setattr(strategies, "StudyRunner", Spy)
    return MADE


def study(path: Path, strategy: str, budget: int, tmp_path: Path, seed: int = 0) -> StudyTrace:
    space, model = prepare(str(path), None)
    oracle = Oracle(model, space.workload)
    return run_study(space, make_engine(space), oracle, strategy, seed, budget, folder=tmp_path)


@pytest.mark.parametrize(("strategy", "twin"), [("default", True), ("gp", False)])
def test_default_is_study_start(
    tiny_space: Path, tmp_path: Path, spy: list[Spy], strategy: str, twin: bool
) -> None:
    """``default`` is what ``study start`` chooses on the simulator: the twin-guided sampler
    (over GPSampler); ``gp`` is the tuner's sampler without the twin."""
    trace = study(tiny_space, strategy, 8, tmp_path)
    (runner,) = spy
    assert isinstance(runner.evaluator, OracleEvaluator)
    assert isinstance(runner.sampler, AutotuneSampler)
    assert isinstance(runner.sampler, TwinSampler) is twin
    assert isinstance(runner.sampler.base, optuna.samplers.GPSampler)
    assert runner.sampler.n_startup_trials == runner.options.n_startup_trials == 6
    assert runner.learn and not isinstance(runner.feasibility, RulesOnly)
    assert len(trace.trials) == 8
    assert [t.role for t in trace.trials[:2]] == ["baseline", "informed"]
    for t in trace.trials:
        if t.status == "refused":
            assert t.seconds == 0.0 and t.measured is None
        else:
            assert t.seconds > STOP_S
        assert (t.measured is not None) == (t.status == "ok")


def test_a_conditional_space_gets_tpe_as_in_study_start(
    tiny_space: Path, tmp_path: Path, spy: list[Spy]
) -> None:
    text = tiny_space.read_text().replace(
        "cuda_graph_max_bs: {type: categorical, choices: [16, 512]}",
        "cuda_graph_max_bs: {type: categorical, choices: [16, 512], "
        "when: {speculative_eagle_topk: [2]}}",
    )
    conditional = tmp_path / "conditional.yaml"
    conditional.write_text(text)
    study(conditional, "default", 3, tmp_path)
    (runner,) = spy
    assert runner.space.conditional
    assert isinstance(runner.sampler, AutotuneSampler)
    assert isinstance(runner.sampler.base, optuna.samplers.TPESampler)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_strategy_sets_the_same_loop(
    name: str, tiny_space: Path, tmp_path: Path, spy: list[Spy]
) -> None:
    plan = PLANS[name]
    trace = study(tiny_space, name, 7, tmp_path)
    (runner,) = spy
    assert runner.learn == plan.learn
    assert isinstance(runner.feasibility, RulesOnly) == (not plan.refuse)
    assert isinstance(runner.sampler, AutotuneSampler) == (plan.sampler is None)
    roles = [t.role for t in trace.trials]
    assert roles[0] == "baseline"
    assert ("informed" in roles) == plan.informed
    if name == "sglang-auto":
        assert len(trace.trials) == 2
        config = runner.space.config_for({})
        assert config.speculative and config.speculative_num_steps is None
    elif name == "grid":
        space = runner.space
        grid = grid_order(space, runner.engine)
        assert len(trace.trials) == min(7, 1 + len(space.enqueued) + len(grid))
    else:
        assert len(trace.trials) == 7


def test_the_grid_holds_runnable_trees_in_bench_speculative_order(tiny_space: Path) -> None:
    space, _ = prepare(str(tiny_space), None)
    order = grid_order(space, make_engine(space))
    assert order, "the tiny space holds some of the grid"
    for params in order:
        steps = params["speculative_num_steps"]
        topk = params["speculative_eagle_topk"]
        draft = params["speculative_num_draft_tokens"]
        assert draft <= steps * topk + 1
        assert topk != 1 or draft == steps + 1
    assert [p["speculative_num_steps"] for p in order] == sorted(
        p["speculative_num_steps"] for p in order
    )
