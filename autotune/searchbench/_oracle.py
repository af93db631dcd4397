"""What a trial would have found and cost on the profiled hardware, without any process.

The oracle answers a configuration with the simulator's model (:meth:`SimModel.evaluate`) and
charges the time the trial would have held the GPUs: the start-up until ready or until the line
that decides a crash, plus the benchmark of a measured configuration, plus stopping the server.
GPU hours are that time multiplied by the number of GPUs of the profile. A measured value carries
the measurement noise of a real run (a seeded multiplicative error, 2% by default), so samplers
are compared on what they would have seen; the optimum is the noise-free value.

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
from autotune.bench import WorkloadSpec
from autotune.sim import SimModel
from autotune.study._evaluate import TrialContext, TrialEvaluator
from autotune.study._record import METRIC_ATTRS, Outcome, TrialRecord

#: Seconds to stop a server and see its GPUs released, per trial that launched one.
STOP_S = 15.0

#: Trial user attributes the oracle adds to what a real trial records: the GPU seconds the trial
#: was charged (per GPU) and the configuration's noise-free value.
GPU_S_ATTR = "oracle_gpu_s"
TRUE_VALUE_ATTR = "oracle_true_value"


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

    @property
    def seconds(self) -> float:
        """Wall seconds the GPUs were held (stop included)."""
        return self.startup_s + self.benchmark_s + STOP_S


class Oracle:
    """Cached model answers for one profile and workload."""

    def __init__(self, model: SimModel, workload: WorkloadSpec, *, metric: str = "output_tok_s"):
        self.model = model
        self.workload = workload
        self.metric = metric
        self.gpus = model.profile.hardware.gpu_count
        self._cached = lru_cache(maxsize=None)(self._answer)

    def answer(self, config: ServerConfig) -> Answer:
        return self._cached(config)

    def _answer(self, config: ServerConfig) -> Answer:
        verdict = self.model.evaluate(config, self.workload)
        value = None
        metrics: dict[str, float | None] = {}
        if verdict.status == "ok":
            value = getattr(verdict, self.metric, None)
            if value is None:
                value = verdict.details.get(self.metric)
            metrics = {name: getattr(verdict, name, None) for name in METRIC_ATTRS}
            metrics[self.metric] = value
        return Answer(
            verdict.status,
            value,
            verdict.startup_s,
            verdict.benchmark_s or 0.0,
            verdict.failure_line,
            metrics,
        )

    def measure(self, config: ServerConfig, *, noise: float, rng: random.Random) -> Answer:
        """The answer as one noisy measurement would report it."""
        answer = self.answer(config)
        if answer.value is None or noise <= 0:
            return answer
        factor = max(0.5, rng.gauss(1.0, noise))
        value = answer.value * factor
        metrics = {**answer.metrics, self.metric: value}
        return Answer(
            answer.status,
            value,
            answer.startup_s,
            answer.benchmark_s,
            answer.failure_line,
            metrics,
        )

    def gpu_hours(self, seconds: float) -> float:
        return seconds * self.gpus / 3600.0


class OracleEvaluator(TrialEvaluator):
    """Trials answered by the oracle: one noisy measurement each, charged its GPU time.

    One evaluator per study: its noise is seeded by the study's seed and drawn once per trial
    that the loop lets run (refused trials cost nothing and draw nothing). The record carries
    what a real trial records (outcome, the line that decided a crash, start-up and benchmark
    seconds, the measured figures) plus :data:`GPU_S_ATTR` and :data:`TRUE_VALUE_ATTR` for the
    benchmark's bookkeeping.
    """

    def __init__(self, oracle: Oracle, *, seed: int, noise: float = 0.02) -> None:
        self.oracle = oracle
        self.noise = noise
        self.rng = random.Random(f"{seed}:noise")

    def gpu_seconds(self, record: TrialRecord, wall_s: float, gpus: int) -> float:
        """What the trial would have cost on the profiled box (not the oracle's own time)."""
        return float(record.extra.get(GPU_S_ATTR) or 0.0) * self.oracle.gpus

    def evaluate(self, config: ServerConfig, context: TrialContext) -> TrialRecord:
        answer = self.oracle.measure(config, noise=self.noise, rng=self.rng)
        outcome = Outcome(answer.status)
        measured = outcome is Outcome.OK
        return TrialRecord(
            outcome=outcome,
            role=context.role,
            failure_line=answer.failure_line,
            startup_s=answer.startup_s,
            benchmark_s=answer.benchmark_s if measured else None,
            value=answer.value,
            metrics=dict(answer.metrics),
            extra={
                GPU_S_ATTR: answer.seconds,
                TRUE_VALUE_ATTR: self.oracle.answer(config).value,
            },
        )
