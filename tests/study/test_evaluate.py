"""The evaluator seam: one study loop, run by the real trial or by the simulator's model.

Everything but the evaluator is the loop's own code: the sampler choice, the first trials, the
refusals before launch, the lessons of crashes, the recording. These tests drive the loop with
the search benchmark's oracle, with an evaluator that fails, and with the real trial on the
simulated server, and check that the loop, not the evaluator, decides all of that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune._errors import Cancelled, Interrupted
from autotune._knobs import ServerConfig
from autotune.searchbench import Oracle, OracleEvaluator
from autotune.searchbench._benchmark import prepare
from autotune.searchbench._oracle import GPU_S_ATTR, TRUE_VALUE_ATTR
from autotune.space import SearchSpace, load_space
from autotune.study import AutotuneSampler, StudyOptions, start_study
from autotune.study._evaluate import (
    RulesOnly,
    TrialContext,
    TrialEvaluator,
    refusal,
)
from autotune.study._feasibility import Feasibility
from autotune.study._record import TrialRecord
from autotune.study._runner import StudyRunner
from autotune.study._setup import finish_setup, make_engine, set_target
from autotune.study._storage import StudyPaths, open_storage, study_paths
from autotune.study._trial import ServerEvaluator

from ._helpers import RECORD_KEYS, SEED_TUNED, small_space

# Optuna's GP optimiser warns on a converged study; not what these tests are about
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SEED_SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "eagle3.yaml"

FUSED = {**SEED_TUNED, "allreduce": "flashinfer_fusion"}  # SM120 lacks it: refused, known


class Recording(TrialEvaluator):
    """The oracle, noting every configuration the loop let through."""

    def __init__(self, inner: TrialEvaluator) -> None:
        self.inner = inner
        self.seen: list[tuple[int, str, ServerConfig]] = []

    def evaluate(self, config: ServerConfig, context: TrialContext) -> TrialRecord:
        if context.role != "confirm":  # the confirmation's runs after the search are not trials
            self.seen.append((context.number, context.role, config))
        return self.inner.evaluate(config, context)


def _space(path: Path, **changes: Any) -> tuple[SearchSpace, Oracle]:
    space, model = prepare(str(path), None)
    space = dataclasses.replace(space, **changes)
    return space, Oracle(model, space.workload, metric=space.objective.metric)


def _runner(
    space: SearchSpace,
    folder: Path,
    evaluator: TrialEvaluator,
    n_trials: int,
    *,
    seed: int = 1,
    queue: tuple[dict[str, Any], ...] = (),
    sampler: str = "auto",
    **seams: Any,
) -> StudyRunner:
    """The loop of ``study start`` on in-memory storage with ``evaluator``, set up."""
    options = StudyOptions(
        study_name="seam", seed=seed, n_trials=n_trials, progress=False, sampler=sampler
    )
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="maximize")
    engine = make_engine(space)
    finish_setup(study, space, engine, options)
    for params in queue:
        study.enqueue_trial(params, user_attrs={"role": "enqueued"})
    target = set_target(study, n_trials)
    paths = StudyPaths("seam", "in-memory", folder / "artifacts", folder / "logs")
    return StudyRunner(study, space, engine, paths, options, target, evaluator=evaluator, **seams)


def _loop(*args: Any, **kwargs: Any) -> tuple[optuna.Study, StudyRunner]:
    """:func:`_runner`, run to its target."""
    runner = _runner(*args, **kwargs)
    runner.run()
    return runner.study, runner


def _finished(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    states = (TrialState.COMPLETE, TrialState.PRUNED)
    return sorted(study.get_trials(deepcopy=False, states=states), key=lambda t: t.number)


def test_the_loop_refuses_before_the_evaluator_and_records_what_it_returns(
    tmp_path: Path,
) -> None:
    space, oracle = _space(SEED_SPACE)
    evaluator = Recording(OracleEvaluator(oracle, seed=1))
    runner = _runner(space, tmp_path, evaluator, 12, queue=(FUSED,))
    summary = runner.run()
    study = runner.study
    trials = _finished(study)
    # the target, or fewer where the twin found nothing left worth a start (and said so)
    assert len(trials) == 12 or (summary.stopped_by == "twin" and summary.stop_reason)
    assert len(trials) >= 6
    by_number = {t.number: t for t in trials}
    # the fused all-reduce was refused by the loop: the evaluator never saw it, no GPU time
    (fused,) = [t for t in trials if t.params.get("allreduce") == "flashinfer_fusion"]
    assert fused.user_attrs["outcome"] == "infeasible" and fused.state == TrialState.PRUNED
    assert GPU_S_ATTR not in fused.user_attrs
    assert fused.number not in {n for n, _, _ in evaluator.seen}
    # nothing the loop let through is something it knows cannot start
    judge = Feasibility(space, runner.engine)
    for number, role, config in evaluator.seen:
        if role != "baseline":
            assert judge.known(config) is None, number
            assert runner.engine.check_rules(config) is None, number
        t = by_number[number]
        # the record is the evaluator's, written by the loop, its state following the outcome
        assert all(k in t.user_attrs for k in RECORD_KEYS), t.user_attrs
        assert t.user_attrs[GPU_S_ATTR] > 0
        assert t.user_attrs[TRUE_VALUE_ATTR] == oracle.answer(config).value
        measured = t.user_attrs["outcome"] == "ok"
        assert t.state == (TrialState.COMPLETE if measured else TrialState.PRUNED)
        assert (t.value is not None) == measured
    # the first trials are the loop's: baseline, the space's configuration, SGLang's choice
    roles = [t.user_attrs["role"] for t in trials]
    assert roles[:3] == ["baseline", "enqueued", "informed"]
    assert roles[0:1] == [evaluator.seen[0][1]]
    # measured trials carry their speed-up over the baseline, as in a real study
    base = trials[0].value
    assert base is not None
    for t in trials[1:]:
        if t.state == TrialState.COMPLETE:
            assert t.user_attrs["speedup"] == pytest.approx(t.value / base, abs=1e-3)


def test_the_sampler_is_the_tuners_whatever_the_evaluator(tmp_path: Path) -> None:
    space, oracle = _space(SEED_SPACE)
    options = StudyOptions(study_name="seam", seed=0, progress=False)
    engine = make_engine(space)

    def sampler_of(space: SearchSpace, evaluator: TrialEvaluator | None) -> Any:
        study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
        paths = StudyPaths("seam", "in-memory", tmp_path / "a", tmp_path / "l")
        return StudyRunner(study, space, engine, paths, options, 5, evaluator=evaluator).sampler

    # the CUDA-graph batch searched only for trees (top-k above 1): a conditional space
    params = tuple(
        dataclasses.replace(p, when={"speculative_eagle_topk": (2, 4, 8)})
        if p.name == "cuda_graph_max_bs"
        else p
        for p in space.parameters
    )
    conditional = dataclasses.replace(space, parameters=params)
    assert conditional.conditional and not space.conditional
    for evaluator in (None, OracleEvaluator(oracle, seed=0)):
        plain, cond = sampler_of(space, evaluator), sampler_of(conditional, evaluator)
        assert isinstance(plain, AutotuneSampler) and isinstance(cond, AutotuneSampler)
        assert isinstance(plain.base, optuna.samplers.GPSampler)
        assert isinstance(cond.base, optuna.samplers.TPESampler)
    runner_default = StudyRunner(
        optuna.create_study(storage=optuna.storages.InMemoryStorage()),
        space,
        engine,
        StudyPaths("seam", "in-memory", tmp_path / "a", tmp_path / "l"),
        options,
        5,
    )
    assert isinstance(runner_default.evaluator, ServerEvaluator)


def test_crashes_become_lessons_unless_learning_is_off(tmp_path: Path) -> None:
    space, oracle = _space(SEED_SPACE)
    kv = {**SEED_TUNED, "mem_fraction_static": 0.78}  # the KV pool does not fit
    lower = {**SEED_TUNED, "mem_fraction_static": 0.76}  # so neither does a smaller one
    study, _ = _loop(space, tmp_path / "on", OracleEvaluator(oracle, seed=1), 5, queue=(kv, lower))
    outcomes = [t.user_attrs["outcome"] for t in _finished(study)]
    assert outcomes[3:5] == ["oom_kv_pool", "infeasible"], outcomes
    study, runner = _loop(
        space,
        tmp_path / "off",
        OracleEvaluator(oracle, seed=1),
        5,
        queue=(kv, lower),
        learn=False,
    )
    outcomes = [t.user_attrs["outcome"] for t in _finished(study)]
    assert outcomes[3:5] == ["oom_kv_pool", "oom_kv_pool"], outcomes
    assert runner.feasibility.lessons == 0
    assert isinstance(runner.sampler, AutotuneSampler) and not runner.sampler.learn_from_crashes


def test_without_refusals_only_sglangs_rules_refuse(tmp_path: Path) -> None:
    space, oracle = _space(SEED_SPACE)
    evaluator = Recording(OracleEvaluator(oracle, seed=1))
    study, runner = _loop(space, tmp_path, evaluator, 4, queue=(FUSED,), refuse=False)
    assert isinstance(runner.feasibility, RulesOnly)
    fused = [t for t in _finished(study) if t.params.get("allreduce") == "flashinfer_fusion"]
    # it launched (and crashed: the model knows SM120 lacks it), costing GPU time
    (t,) = fused
    assert t.user_attrs["outcome"] not in ("ok", "infeasible") and t.user_attrs[GPU_S_ATTR] > 0
    assert [n for n, _, c in evaluator.seen if c.allreduce == "flashinfer_fusion"] == [t.number]
    bad = {**SEED_TUNED, "speculative_eagle_topk": 1}  # top-k 1 needs steps + 1 draft tokens
    config = space.config_for(bad)
    assert runner.engine.check_rules(config) is not None
    record = refusal(runner.feasibility, config, bad, role="search")
    assert record is not None and record.outcome == "infeasible"
    assert refusal(runner.feasibility, config, None, role="baseline") is None


class Stopped(TrialEvaluator):
    """An evaluator stopped by a signal during its third trial."""

    def __init__(self, inner: TrialEvaluator) -> None:
        self.inner = inner
        self.calls = 0

    def evaluate(self, config: ServerConfig, context: TrialContext) -> TrialRecord:
        self.calls += 1
        if self.calls == 3:
            raise Cancelled("stopped during the benchmark")
        return self.inner.evaluate(config, context)


def test_a_stopped_evaluation_is_recorded_as_interrupted_and_queued_again(
    tmp_path: Path,
) -> None:
    space, oracle = _space(SEED_SPACE)
    runner = _runner(space, tmp_path, Stopped(OracleEvaluator(oracle, seed=1)), 6)
    with pytest.raises(Interrupted, match="runs again"):
        runner.run()
    trials = sorted(runner.study.get_trials(deepcopy=False), key=lambda t: t.number)
    stopped = trials[2]
    assert stopped.state == TrialState.FAIL
    assert stopped.user_attrs["outcome"] == "interrupted"
    (rerun,) = [t for t in trials if t.state == TrialState.WAITING and t.number > 2]
    assert rerun.user_attrs["role"] == "rerun"
    assert rerun.system_attrs["fixed_params"] == stopped.params


@pytest.fixture
def small_h100(tmp_path: Path) -> Iterator[Path]:
    yield small_space(tmp_path / "spaces", "eagle3-h100.yaml")


def test_the_real_trial_and_the_oracle_run_the_same_loop(small_h100: Path, tmp_path: Path) -> None:
    """The same seed, the same first trials and proposals, the same outcomes: only the
    measurements differ (a real benchmark against the simulated server, or the model). The GP
    sampler's first proposals are seeded draws that do not depend on the figures (the twin's
    follow the figures, which differ)."""
    options = StudyOptions(
        space_path=str(small_h100),
        study_name="real",
        studies_dir=str(tmp_path / "studies"),
        n_trials=4,
        seed=3,
        progress=False,
        sampler="gp",
    )
    summary = start_study(options)
    assert summary.finished == 4
    paths = study_paths("real", studies_dir=tmp_path / "studies")
    real = optuna.load_study(study_name="real", storage=open_storage(paths, writing=False))
    space = load_space(small_h100)
    oracle_space, oracle = _space(small_h100)
    simulated, _ = _loop(oracle_space, tmp_path / "oracle", OracleEvaluator(oracle, seed=3), 4,
                         seed=3, sampler="gp")  # fmt: skip
    assert space.fingerprint() == oracle_space.fingerprint()

    def story(study: optuna.Study) -> list[tuple[str, dict[str, Any], str]]:
        return [
            (t.user_attrs["role"], dict(t.params), t.user_attrs["outcome"])
            for t in _finished(study)
        ]

    assert story(real) == story(simulated)
    assert [r for r, _, _ in story(real)][:2] == ["baseline", "informed"]
