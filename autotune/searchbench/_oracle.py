"""What a trial would have found and cost on the profiled hardware, without any process.

The oracle answers a configuration with the simulator's model (:meth:`SimModel.evaluate`) and
charges the time the trial would have held the GPUs: the start-up until ready or until the line
that decides a crash, plus the benchmark of a measured configuration, plus stopping the server.
GPU hours are that time multiplied by the number of GPUs of the profile. A measured value carries
the measurement noise of a real run (a seeded multiplicative error, 2% by default), so samplers
are compared on what they would have seen; the optimum is the noise-free value.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from autotune._knobs import ServerConfig
from autotune.bench import WorkloadSpec
from autotune.sim import SimModel

#: Seconds to stop a server and see its GPUs released, per trial that launched one.
STOP_S = 15.0


@dataclass(frozen=True)
class Answer:
    """One configuration's outcome, noise-free value and GPU seconds (per GPU)."""

    status: str
    value: float | None
    startup_s: float
    benchmark_s: float

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
        if verdict.status == "ok":
            value = getattr(verdict, self.metric, None)
            if value is None:
                value = verdict.details.get(self.metric)
        return Answer(verdict.status, value, verdict.startup_s, verdict.benchmark_s or 0.0)

    def measure(self, config: ServerConfig, *, noise: float, rng: random.Random) -> Answer:
        """The answer as one noisy measurement would report it."""
        answer = self.answer(config)
        if answer.value is None or noise <= 0:
            return answer
        factor = max(0.5, rng.gauss(1.0, noise))
        return Answer(answer.status, answer.value * factor, answer.startup_s, answer.benchmark_s)

    def gpu_hours(self, seconds: float) -> float:
        return seconds * self.gpus / 3600.0
