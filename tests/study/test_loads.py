"""A study over a load mix: every trial measured at every load point on one server start, the
figures of each point recorded, the objective their weighted mean; read back with plain Optuna."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from autotune._knobs import ServerConfig
from autotune.space import load_space
from autotune.study import TrialRecord
from autotune.study._evaluate import TrialContext, TrialEvaluator
from autotune.study._sampler import load_focus
from autotune.study._view import StudyView

from ._helpers import StudyRun, artifact_files, finished_trials
from ._loads import MIX, MIX_TRIALS


def test_every_trial_records_each_load_and_the_weighted_objective(mix_study: StudyRun) -> None:
    study = mix_study.load()
    trials = finished_trials(study)
    assert len(trials) == MIX_TRIALS
    measured = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(measured) >= 4, [(t.number, t.user_attrs.get("outcome")) for t in trials]
    labels = [label for label, _ in MIX]
    weights = dict(MIX)
    for t in measured:
        loads = t.user_attrs["loads"]
        assert list(loads) == labels, loads
        for label in labels:
            figures = loads[label]
            assert figures["value"] > 0 and figures["output_tok_s"] == pytest.approx(
                figures["value"], rel=1e-6
            )
            assert figures["ttft_p99_ms"] > 0 and figures["itl_p99_ms"] > 0
        # the objective is the weighted mean of the per-point figures, with the mix's weights
        weighted = sum(weights[k] * loads[k]["value"] for k in labels)
        assert t.value == pytest.approx(weighted, rel=1e-5)
        assert t.user_attrs["output_tok_s"] == pytest.approx(weighted, rel=1e-4)
        # repeats run at each point (two each unless a point stopped early)
        assert len(labels) <= t.user_attrs["repeats"] <= 2 * len(labels)
        # the raw results of every point are the trial's artifact
        results = json.loads(artifact_files(mix_study, study, t)["benchmark.json"].read_text())
        assert list(results) == labels
        for label in labels:
            medians = results[label]["medians"]
            assert medians["output_tok_s"] == pytest.approx(loads[label]["value"], rel=1e-3)
        # the record reads the figures back, typed
        record = TrialRecord.from_trial(t)
        assert record.at_load("c4") == pytest.approx(loads["c4"]["value"])
        assert record.at_load("c4", "ttft_p99_ms") == pytest.approx(loads["c4"]["ttft_p99_ms"])


def test_each_load_point_was_served_at_its_concurrency(mix_study: StudyRun) -> None:
    """The benchmark ran the workload once per point: its number of prompts (two per concurrent
    request at least, or the point's own count) and requests in flight in the raw results."""
    study = mix_study.load()
    baseline = next(t for t in finished_trials(study) if t.user_attrs["role"] == "baseline")
    results = json.loads(artifact_files(mix_study, study, baseline)["benchmark.json"].read_text())
    runs = {label: results[label]["results"][0] for label in results}
    assert {k: r["completed"] for k, r in runs.items()} == {"c1": 2, "c4": 8, "c8": 16}
    # the mean number of requests in flight: at most the point's concurrency, and more than
    # one request at a time at the busier points
    assert runs["c1"]["concurrency"] <= 1.0 + 1e-6
    assert 1.5 < runs["c4"]["concurrency"] <= 4.0 + 1e-6
    assert 1.5 < runs["c8"]["concurrency"] <= 8.0 + 1e-6
    # a busier server delivers more tokens per second in all (no tight figures: wall clock)
    loads = baseline.user_attrs["loads"]
    assert loads["c8"]["output_tok_s"] > loads["c1"]["output_tok_s"]


def test_the_speed_up_is_of_the_weighted_objective(mix_study: StudyRun) -> None:
    study = mix_study.load()
    trials = [t for t in finished_trials(study) if t.state == TrialState.COMPLETE]
    base = next(t for t in trials if t.user_attrs["role"] == "baseline")
    for t in trials:
        assert t.user_attrs["speedup"] == pytest.approx(t.value / base.value, abs=2e-4)


def test_a_space_without_loads_records_no_loads(tmp_path: Path) -> None:
    from ._helpers import small_space, start_study

    space = small_space(tmp_path, "eagle3-h100.yaml")
    run = start_study(space, "plain", 1, tmp_path / "studies")
    (trial,) = finished_trials(run.load())
    assert "loads" not in trial.user_attrs
    assert "autotune:loads" not in run.load().user_attrs


def _result(output_tok_s: float) -> Any:
    """A benchmark result that measured ``output_tok_s`` (every other figure zero)."""
    from autotune.bench import BenchmarkResult

    values: dict[str, Any] = {}
    for f in dataclasses.fields(BenchmarkResult):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = "x" if f.type in ("str", str) else 0
    return BenchmarkResult(**{**values, "output_tok_s": output_tok_s})


class _EarlyStops(TrialEvaluator):
    """The oracle, asking the loop's early stop at each load point before every trial."""

    def __init__(self, inner: TrialEvaluator, labels: list[str]) -> None:
        self.inner = inner
        self.labels = labels
        self.asked: list[tuple[int, str, bool | None, bool | None]] = []
        self.best: dict[str, float] = {}

    def evaluate(self, config: ServerConfig, context: TrialContext) -> TrialRecord:
        hooks = context.hooks
        assert hooks.early_stop_at is not None
        for label in self.labels:
            stop = hooks.early_stop_at(label)
            if stop is None:
                self.asked.append((context.number, label, None, None))
                continue
            best = self.best[label]
            low = stop([_result(0.5 * best), _result(0.5 * best)])
            near = stop([_result(0.95 * best), _result(0.95 * best)])
            self.asked.append((context.number, label, low, near))
        record = self.inner.evaluate(config, context)
        for label, figures in record.loads.items():
            value = figures["value"]
            if value is not None:
                self.best[label] = max(self.best.get(label, 0.0), value)
        return record


def test_the_repeats_at_a_load_stop_early_against_the_best_figure_there(tmp_path: Path) -> None:
    """The loop's early stop at one load point compares with the best figure any trial reached
    at that point: half of it stops, 95% of it goes on; before any measurement there is none."""
    import optuna

    from autotune.searchbench import Oracle, OracleEvaluator
    from autotune.searchbench._benchmark import prepare
    from autotune.study import StudyOptions
    from autotune.study._runner import StudyRunner
    from autotune.study._setup import finish_setup, make_engine, set_target
    from autotune.study._storage import StudyPaths

    from ._loads import mix_space

    path = mix_space(tmp_path)
    space, model = prepare(str(path), None)
    oracle = Oracle(model, space.workload, loads=space.objective.loads)
    labels = [p.label for p in space.objective.loads]
    evaluator = _EarlyStops(OracleEvaluator(oracle, seed=1, noise=0.0), labels)
    options = StudyOptions(study_name="stops", seed=1, n_trials=4, progress=False)
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="maximize")
    engine = make_engine(space)
    finish_setup(study, space, engine, options)
    paths = StudyPaths("stops", "in-memory", tmp_path / "artifacts", tmp_path / "logs")
    runner = StudyRunner(
        study, space, engine, paths, options, set_target(study, 4), evaluator=evaluator
    )
    runner.run()
    first = [a for a in evaluator.asked if a[0] == 0]
    assert first == [(0, label, None, None) for label in labels]
    later = [a for a in evaluator.asked if a[0] > 0]
    assert later and all((low, near) == (True, False) for _, _, low, near in later), later


def test_a_view_focused_on_a_load_point_shows_each_trial_at_that_point(
    mix_study: StudyRun,
) -> None:
    study = mix_study.load()
    space = load_space(mix_study.space)
    by_params = {
        json.dumps(t.params, sort_keys=True): t
        for t in finished_trials(study)
        if t.state == TrialState.COMPLETE and t.user_attrs.get("role") != "baseline"
    }
    assert len(by_params) >= 3
    for label in ("c1", "c8"):
        seen = StudyView(study, space, None, focus=label).sampler_trials(None)
        assert len(seen) >= len(by_params)
        for frozen in seen:
            source = by_params.get(json.dumps(frozen.params, sort_keys=True))
            if source is not None:
                assert frozen.values == [source.user_attrs["loads"][label]["value"]]
    # the points differ, so the focus changes what the model sees
    c1 = [t.user_attrs["loads"]["c1"]["value"] for t in by_params.values()]
    c8 = [t.user_attrs["loads"]["c8"]["value"] for t in by_params.values()]
    assert c1 != c8
    # unfocused, the model sees the weighted objective
    plain = StudyView(study, space, None).sampler_trials(None)
    weighted = {t.value for t in by_params.values()}
    assert {v for t in plain for v in t.values} >= weighted


def test_every_other_proposal_aims_at_one_load_point_in_turn(mix_study: StudyRun) -> None:
    space = load_space(mix_study.space)
    focus = [load_focus(space, n) for n in range(12)]
    assert focus[0::2] == [None] * 6
    assert focus[1::2] == ["c1", "c4", "c8", "c1", "c4", "c8"]
    one_point = dataclasses.replace(
        space, objective=dataclasses.replace(space.objective, loads=space.objective.loads[:1])
    )
    assert {load_focus(one_point, n) for n in range(12)} == {None}
    two_metrics = dataclasses.replace(
        space,
        objective=dataclasses.replace(
            space.objective,
            metrics=("output_tok_s", "tpot_p99_ms"),
            directions=("maximize", "minimize"),
        ),
    )
    assert {load_focus(two_metrics, n) for n in range(12)} == {None}
