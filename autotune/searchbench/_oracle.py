"""What a trial would have found and cost on the profiled hardware, without any process.

The oracle answers a configuration with the simulator's model (:meth:`SimModel.evaluate`) and
charges the time the trial would have held the GPUs: the start-up until ready or until the line
that decides a crash, plus the benchmark of a measured configuration, plus stopping the server.
GPU hours are that time multiplied by the number of GPUs of the profile. A measured value carries
the measurement noise of a real run (a seeded multiplicative error, 2% by default), so samplers
are compared on what they would have seen; the optimum is the noise-free value. One error per
measurement scales every figure alike: a run that reads 2% fast reads throughputs 2% higher and
latencies 2% lower, as a lucky run does.

The noise model: the error is between starts. Each trial and each confirmation run is one start
of the server and one measurement, with an error of its own drawn independently of every other
start. Nothing here draws several measurements of one start, on purpose: a real SGLang recorded
on an H100 (one server kept up, five benchmark runs in a row, NGRAM speculation) read an
acceptance length climbing from 3.48 to 4.78 and a throughput from 2,700 to 7,299 tok/s, and the
first run after a restart was slow again. The first run of a start is a warm-up and the runs of
one start are not independent, so repeats on one server are not further starts: they would
shrink an interval without measuring the start-to-start spread the choice is judged against.
The figures of the search benchmark rest on this assumption (one independent error per start,
the start's first run its measurement).

The answer carries every figure a trial records (:data:`~autotune.study._record.METRIC_ATTRS`):
the throughputs, acceptance, TTFT, ITL, TPOT and E2E (mean, median, p90, p99), and goodput
counted from the model's per-request figures against the space's ``objective.slo``, so that the
space's constraints and every objective of a multi-objective space are judged as in a real
study.

:class:`OracleEvaluator` is the oracle behind the study loop's evaluator seam
(:class:`~autotune.study._evaluate.TrialEvaluator`): ``autotune bench search`` runs the loop of
``autotune study start`` with it, so the benchmark measures the tuner itself.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from autotune._knobs import ServerConfig
from autotune._slo import RequestLimits
from autotune.bench import WorkloadSpec
from autotune.engines import Engine
from autotune.sim import SimModel
from autotune.space import METRICS, ConstraintSpec, LoadPoint, SearchSpace, weighted_mean
from autotune.study._evaluate import TrialContext, TrialEvaluator
from autotune.study._memory import MEMORY_ATTR
from autotune.study._record import LOAD_FIGURES, METRIC_ATTRS, Outcome, TrialRecord

#: Seconds to stop a server and see its GPUs released, per trial that launched one.
STOP_S = 15.0

#: Trial user attributes the oracle adds to what a real trial records: the GPU seconds the trial
#: was charged (per GPU), the configuration's noise-free value, and whether its noise-free
#: figures meet every constraint of the space.
GPU_S_ATTR = "oracle_gpu_s"
TRUE_VALUE_ATTR = "oracle_true_value"
TRUE_FEASIBLE_ATTR = "oracle_true_feasible"
#: With a load mix: the noise-free objective at each load point, by label.
TRUE_LOADS_ATTR = "oracle_true_loads"


@dataclass(frozen=True)
class Answer:
    """One configuration's outcome, noise-free value and GPU seconds (per GPU)."""

    status: str
    value: float | None
    startup_s: float
    benchmark_s: float
    failure_line: str | None = None
    #: The figures a trial records (:data:`~autotune.study._record.METRIC_ATTRS`), noise-free.
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    #: Every objective's value (a multi-objective space; ``None``: one objective).
    values: tuple[float, ...] | None = None
    #: With a load mix: each point's figures by label (``value``: the objective's figure).
    loads: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Wall seconds the GPUs were held (stop included)."""
        return self.startup_s + self.benchmark_s + STOP_S


class Oracle:
    """Cached model answers for one profile and workload: the value is ``metric``'s (the first
    objective); ``metrics`` lists every objective of a multi-objective space; ``limits`` are the
    per-request limits goodput counts against.

    With a load mix (``loads``) every configuration is answered at each load point, on one
    start-up: the benchmark time of every point is charged, the value is the points' weighted
    mean, and the answer carries each point's figures. A crash at any point is the answer.
    """

    def __init__(
        self,
        model: SimModel,
        workload: WorkloadSpec,
        *,
        metric: str = "output_tok_s",
        metrics: tuple[str, ...] = (),
        limits: RequestLimits | None = None,
        constraints: tuple[ConstraintSpec, ...] = (),
        loads: tuple[LoadPoint, ...] = (),
    ):
        self.model = model
        self.workload = workload
        self.metric = metric
        self.metrics = metrics or (metric,)
        self.limits = limits
        self.constraints = constraints
        self.loads = loads
        self.gpus = model.profile.hardware.gpu_count
        self._cached = lru_cache(maxsize=None)(self._answer)

    @classmethod
    def for_space(cls, model: SimModel, space: SearchSpace) -> Oracle:
        """The oracle of ``space``: its workload, objectives, limits and load mix."""
        obj = space.objective
        return cls(
            model,
            space.workload,
            metric=obj.metric,
            metrics=obj.metrics,
            limits=obj.slo,
            constraints=obj.constraints,
            loads=obj.loads,
        )

    def answer(self, config: ServerConfig) -> Answer:
        return self._cached(config)

    def _answer(self, config: ServerConfig) -> Answer:
        if not self.loads:
            return self._at(config, self.workload)
        answers = {p.label: self._at(config, p.workload(self.workload)) for p in self.loads}
        failed = next((a for a in answers.values() if a.status != "ok"), None)
        first = next(iter(answers.values()))
        benchmark_s = sum(a.benchmark_s for a in answers.values())
        if failed is not None:
            return Answer(failed.status, None, first.startup_s, benchmark_s, failed.failure_line)
        loads = {
            label: {**{k: a.metrics.get(k) for k in LOAD_FIGURES[1:]}, "value": a.value}
            for label, a in answers.items()
        }
        return _mixed(first, self.loads, loads, self.metric, benchmark_s)

    def _at(self, config: ServerConfig, workload: WorkloadSpec) -> Answer:
        verdict = self.model.evaluate(config, workload)
        value = None
        metrics: dict[str, float | None] = {}
        values: tuple[float, ...] | None = None
        if verdict.status == "ok":
            metrics = {name: getattr(verdict, name, None) for name in METRIC_ATTRS}
            if self.limits is not None and verdict.benchmark_s:
                metrics["goodput"] = self.limits.goodput(verdict.requests, verdict.benchmark_s)
            for name in self.metrics:
                if metrics.get(name) is None:
                    metrics[name] = verdict.details.get(name)
            value = metrics.get(self.metric)
            if len(self.metrics) > 1:
                found = [metrics.get(m) for m in self.metrics]
                values = None if None in found else tuple(float(v or 0.0) for v in found)
                value = value if values is not None else None
        return Answer(
            verdict.status,
            value,
            verdict.startup_s,
            verdict.benchmark_s or 0.0,
            verdict.failure_line,
            metrics,
            values,
        )

    def violated(self, answer: Answer) -> list[str]:
        """The constraints (as the space describes them) that ``answer``'s figures break."""
        metrics = answer.metrics
        return [c.describe() for c in self.constraints if c.violation(metrics.get(c.metric)) > 0]

    def feasible(self, config: ServerConfig) -> bool:
        """Whether ``config`` starts and its noise-free figures meet every constraint."""
        answer = self.answer(config)
        return answer.value is not None and not self.violated(answer)

    def measure(self, config: ServerConfig, *, noise: float, rng: random.Random) -> Answer:
        """The answer as one noisy measurement would report it."""
        answer = self.answer(config)
        if answer.value is None or noise <= 0:
            return answer
        if self.loads:
            loads: dict[str, dict[str, float | None]] = {}
            for label, figures in answer.loads.items():
                noisy = (figures["value"] or 0.0) * _factor(rng, noise)
                loads[label] = {**figures, "value": noisy, self.metric: noisy}
            return _mixed(answer, self.loads, loads, self.metric, answer.benchmark_s)
        factor = _factor(rng, noise)
        metrics = {name: _noisy(name, v, factor) for name, v in answer.metrics.items()}
        values = None
        if answer.values is not None:
            values = tuple(float(metrics[m] or 0.0) for m in self.metrics)
        return Answer(
            answer.status,
            metrics[self.metric],
            answer.startup_s,
            answer.benchmark_s,
            answer.failure_line,
            metrics,
            values,
        )

    def gpu_hours(self, seconds: float) -> float:
        return seconds * self.gpus / 3600.0


def _noisy(name: str, value: float | None, factor: float) -> float | None:
    """``value`` as a run ``factor`` times as fast reads it: rates (throughputs, goodput) times
    ``factor``, latencies divided by it; acceptance is the run's own and does not change."""
    if value is None or name in ("accept_length", "accept_rate"):
        return value
    return value / factor if METRICS.get(name) == "minimize" else value * factor


def _factor(rng: random.Random, noise: float) -> float:
    """One measurement's multiplicative error."""
    return max(0.5, rng.gauss(1.0, noise))


def _mixed(
    base: Answer,
    points: tuple[LoadPoint, ...],
    loads: Mapping[str, Mapping[str, float | None]],
    metric: str,
    benchmark_s: float,
) -> Answer:
    """The answer of a load mix: each point's figures, their weighted means as the trial's."""
    value = weighted_mean(points, {k: v["value"] for k, v in loads.items()})
    metrics = {
        name: weighted_mean(points, {k: v.get(name) for k, v in loads.items()})
        for name in METRIC_ATTRS
    }
    metrics[metric] = value
    return Answer("ok", value, base.startup_s, benchmark_s, None, metrics, loads=loads)


class OracleEvaluator(TrialEvaluator):
    """Trials answered by the oracle: one noisy measurement each, charged its GPU time.

    One evaluator per study: its noise is seeded by the study's seed and drawn once per trial
    that the loop lets run (refused trials cost nothing and draw nothing). The record carries
    what a real trial records (outcome, the line that decided a crash, start-up and benchmark
    seconds, the measured figures) plus :data:`GPU_S_ATTR`, :data:`TRUE_VALUE_ATTR` and
    :data:`TRUE_FEASIBLE_ATTR` for the benchmark's bookkeeping.
    """

    def __init__(
        self, oracle: Oracle, *, seed: int, noise: float = 0.02, engine: Engine | None = None
    ) -> None:
        """``engine``: reads the memory lines the simulated server prints at start-up into
        the record, as a real trial reads them from the server log (None: no memory lines)."""
        self.oracle = oracle
        self.noise = noise
        self.rng = random.Random(f"{seed}:noise")
        self.engine = engine

    def gpu_seconds(self, record: TrialRecord, wall_s: float, gpus: int) -> float:
        """What the trial would have cost on the profiled box (not the oracle's own time)."""
        return float(record.extra.get(GPU_S_ATTR) or 0.0) * self.oracle.gpus

    def evaluate(self, config: ServerConfig, context: TrialContext) -> TrialRecord:
        answer = self.oracle.measure(config, noise=self.noise, rng=self.rng)
        true = self.oracle.answer(config)
        true_loads = {k: v.get("value") for k, v in true.loads.items()}
        outcome = Outcome(answer.status)
        measured = outcome is Outcome.OK
        record = TrialRecord(
            outcome=outcome,
            role=context.role,
            failure_line=answer.failure_line,
            startup_s=answer.startup_s,
            benchmark_s=answer.benchmark_s if measured else None,
            value=answer.value,
            values=answer.values,
            metrics=dict(answer.metrics),
            loads={k: dict(v) for k, v in answer.loads.items()},
            extra={
                GPU_S_ATTR: answer.seconds,
                TRUE_VALUE_ATTR: true.value,
                TRUE_FEASIBLE_ATTR: self.oracle.feasible(config),
                **({TRUE_LOADS_ATTR: true_loads} if true_loads else {}),
            },
        )
        if self.engine is not None:
            plan = self.oracle.model.plan_startup(config)
            lines = [line for phase in plan.phases for line in phase.lines]
            reading = self.engine.read_memory(lines, config)
            if reading is not None:
                record.extra[MEMORY_ATTR] = reading.to_dict()
        return record
