"""Repeated measurement of one workload on one server, aggregated robustly.

Each metric is summarised over the repeats by its median and its median absolute deviation
(MAD, unscaled: the median of ``|x - median|``). A measurement is *noisy* when, for any checked
metric (``output_tok_s`` by default), ``MAD / median`` exceeds the threshold (2% by default): the
configuration should then be measured again or with more prompts before it is trusted.

Scores: ``median``, or ``conservative``: ``median - k * MAD`` for metrics where more is better
(throughputs, acceptance) and ``median + k * MAD`` for those where less is better (latencies in
ms, failures, duration), so a noisy configuration is judged by its worse side.

Synthetic prompts differ between repeats (same lengths, other token contents) so that the prefix
cache cannot favour a later repeat; file prompts are the same each time and the server's prefix
cache is flushed before each later repeat.

An early-stop hook, called with the results so far after each repeat but the last, may end the
measurement (the tuner stops measuring a configuration that is already clearly worse).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from autotune._errors import Cancelled, ConfigError
from autotune._workload import WorkloadSpec
from autotune.bench._client import BenchmarkClient, run_sync
from autotune.bench._metrics import BenchmarkResult

#: Called after each repeat but the last with the results so far; True stops further repeats.
EarlyStop = Callable[[Sequence[BenchmarkResult]], bool]

#: Asked while a measurement runs; True cancels it (:class:`Cancelled`).
CancelCheck = Callable[[], bool]

#: How often a measurement asks its :data:`CancelCheck`.
CANCEL_POLL_S = 0.05

T = TypeVar("T")

#: Default relative spread (MAD / median) above which a measurement is noisy.
NOISE_THRESHOLD = 0.02

SCORE_KINDS = ("median", "conservative")


def lower_is_better(metric: str) -> bool:
    """Whether a smaller value of ``metric`` is the better one."""
    return metric.endswith("_ms") or metric in ("failed", "duration_s", "warmup_failed")


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    centre = median(values)
    return median([abs(v - centre) for v in values])


@dataclass(frozen=True)
class Measurement:
    """The repeats of one workload on one server and their robust aggregate."""

    results: tuple[BenchmarkResult, ...]
    medians: Mapping[str, float]
    mads: Mapping[str, float]
    noisy: bool
    noisy_metrics: tuple[str, ...] = ()
    noise_threshold: float = NOISE_THRESHOLD
    checked_metrics: tuple[str, ...] = ("output_tok_s",)
    requested_repeats: int = 1
    stopped_early: bool = False
    acceptance_sources: tuple[str, ...] = field(default=())

    @classmethod
    def from_results(
        cls,
        results: Sequence[BenchmarkResult],
        *,
        noise_threshold: float = NOISE_THRESHOLD,
        checked_metrics: Sequence[str] = ("output_tok_s",),
        requested_repeats: int | None = None,
        stopped_early: bool = False,
    ) -> Measurement:
        """Aggregate ``results`` (at least one). With one repeat nothing can be judged noisy."""
        if not results:
            raise ConfigError("a measurement needs at least one benchmark result")
        per_metric: dict[str, list[float]] = {}
        for result in results:
            for name, value in result.metrics().items():
                if math.isfinite(value):
                    per_metric.setdefault(name, []).append(value)
        medians = {name: median(values) for name, values in per_metric.items()}
        mads = {name: mad(values) for name, values in per_metric.items()}
        noisy_metrics: list[str] = []
        for name in checked_metrics:
            spread = _relative(mads.get(name), medians.get(name))
            if (
                len(per_metric.get(name, ())) > 1
                and spread is not None
                and spread > noise_threshold
            ):
                noisy_metrics.append(name)
        return cls(
            results=tuple(results),
            medians=medians,
            mads=mads,
            noisy=bool(noisy_metrics),
            noisy_metrics=tuple(noisy_metrics),
            noise_threshold=noise_threshold,
            checked_metrics=tuple(checked_metrics),
            requested_repeats=requested_repeats or len(results),
            stopped_early=stopped_early,
            acceptance_sources=tuple(dict.fromkeys(r.acceptance_source for r in results)),
        )

    @property
    def repeats(self) -> int:
        return len(self.results)

    def relative_spread(self, metric: str) -> float | None:
        """``MAD / median`` of ``metric`` (None where the median is 0 or it was not measured)."""
        return _relative(self.mads.get(metric), self.medians.get(metric))

    def score(
        self, metric: str = "output_tok_s", kind: str = "median", mad_k: float = 1.0
    ) -> float:
        """The value the tuner optimises for ``metric`` (see the module docstring).

        Raises:
            ConfigError: an unknown ``kind`` or a metric no repeat measured.
        """
        if kind not in SCORE_KINDS:
            raise ConfigError(
                f"unknown score kind {kind!r}", hint="choose one of: " + ", ".join(SCORE_KINDS)
            )
        if metric not in self.medians:
            raise ConfigError(
                f"metric {metric!r} was not measured",
                hint="measured metrics: " + ", ".join(sorted(self.medians)),
            )
        centre = self.medians[metric]
        if kind == "median":
            return centre
        spread = mad_k * self.mads[metric]
        return centre + spread if lower_is_better(metric) else centre - spread

    def to_dict(self, *, requests: bool = False) -> dict[str, Any]:
        """A JSON-ready mapping: the aggregate and every repeat's figures."""
        return {
            "repeats": self.repeats,
            "requested_repeats": self.requested_repeats,
            "stopped_early": self.stopped_early,
            "noisy": self.noisy,
            "noisy_metrics": list(self.noisy_metrics),
            "noise_threshold": self.noise_threshold,
            "checked_metrics": list(self.checked_metrics),
            "acceptance_sources": list(self.acceptance_sources),
            "medians": dict(self.medians),
            "mads": dict(self.mads),
            "results": [r.to_dict(requests=requests) for r in self.results],
        }


async def measure(
    client: BenchmarkClient,
    workload: WorkloadSpec,
    *,
    repeats: int | None = None,
    early_stop: EarlyStop | None = None,
    noise_threshold: float = NOISE_THRESHOLD,
    checked_metrics: Sequence[str] = ("output_tok_s",),
    cancelled: CancelCheck | None = None,
) -> Measurement:
    """Run ``workload`` ``repeats`` times (default ``workload.repeats``) and aggregate.

    ``cancelled`` is asked every :data:`CANCEL_POLL_S` while the repeats run: once it answers
    True the requests in flight are cancelled and :class:`Cancelled` is raised.

    Raises:
        BenchmarkError: a repeat in which every request failed, or the server is unreachable
            (:class:`~autotune._errors.BenchmarkTimeout` when they all ran out of time).
        ConfigError: ``repeats`` below 1, or an unusable prompt file.
        Cancelled: ``cancelled`` answered True.
    """
    count = workload.repeats if repeats is None else repeats
    if count < 1:
        raise ConfigError(f"repeats must be >= 1, got {count}", location="repeats")
    results: list[BenchmarkResult] = []
    stopped = False
    for r in range(count):
        if cancelled is not None and cancelled():
            raise Cancelled("the measurement was stopped")
        flush = r > 0 and workload.source != "synthetic"
        run = client.run(workload, variant=r, flush_cache=flush)
        results.append(await run if cancelled is None else await until_cancelled(run, cancelled))
        if r + 1 < count and early_stop is not None and early_stop(tuple(results)):
            stopped = True
            break
    return Measurement.from_results(
        results,
        noise_threshold=noise_threshold,
        checked_metrics=checked_metrics,
        requested_repeats=count,
        stopped_early=stopped,
    )


def measure_sync(
    client: BenchmarkClient,
    workload: WorkloadSpec,
    *,
    repeats: int | None = None,
    early_stop: EarlyStop | None = None,
    noise_threshold: float = NOISE_THRESHOLD,
    checked_metrics: Sequence[str] = ("output_tok_s",),
    cancelled: CancelCheck | None = None,
) -> Measurement:
    """:func:`measure` for callers that are not async."""
    return run_sync(
        lambda: measure(
            client,
            workload,
            repeats=repeats,
            early_stop=early_stop,
            noise_threshold=noise_threshold,
            checked_metrics=checked_metrics,
            cancelled=cancelled,
        )
    )


async def until_cancelled(work: Awaitable[T], cancelled: CancelCheck) -> T:
    """Await ``work`` while asking ``cancelled`` every :data:`CANCEL_POLL_S`; once it answers
    True, cancel ``work``, wait for it to wind down (its requests closed) and raise
    :class:`Cancelled`."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=CANCEL_POLL_S)
            if done:
                return task.result()
            if cancelled():
                break
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    raise Cancelled("the measurement was stopped")


def _relative(spread: float | None, centre: float | None) -> float | None:
    if spread is None or centre is None or centre == 0:
        return None
    return spread / abs(centre)
