"""Bookkeeping of simulated studies: progress towards the optimum, GPU time, crash share.

A study is booked from what the loop recorded in its storage (:func:`trace_of`): each finished
trial's role and outcome, its measured value, and the oracle's charge and true value.

The incumbent after each trial is the configuration with the best *measured* value so far (as a
user would pick it), judged by its *true* value. A study "reaches" a share of the optimum at the
first trial whose incumbent's true value is at least that share; trials and GPU hours are
counted up to and including that trial (the baseline trial counts: the tuner always runs it).

With a load mix, each load point's winner at the end of the study (the configuration measured
best at that point) is judged by its true value at that point against the point's own optimum.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.searchbench._oracle import GPU_S_ATTR, TRUE_LOADS_ATTR, TRUE_VALUE_ATTR
from autotune.study._record import Outcome, TrialRecord, outcome_of

if TYPE_CHECKING:
    import optuna

SHARES = (0.95, 0.98)


@dataclass(frozen=True)
class TrialTrace:
    """One trial as the benchmark books it."""

    number: int
    role: str
    status: str  # "ok", a crash category, or "refused"
    measured: float | None
    true_value: float | None
    seconds: float
    #: With a load mix: the measured and the noise-free objective at each load point.
    measured_loads: Mapping[str, float] = field(default_factory=dict)
    true_loads: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StudyTrace:
    strategy: str
    seed: int
    trials: tuple[TrialTrace, ...]


def trace_of(study: optuna.Study, strategy: str, seed: int) -> StudyTrace:
    """The finished trials of ``study`` in order, as the loop recorded them."""
    from optuna.trial import TrialState

    trials = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        attrs = t.user_attrs
        outcome = outcome_of(attrs)
        true = attrs.get(TRUE_VALUE_ATTR)
        record = TrialRecord.from_attrs(attrs)
        measured_loads = {k: v for k in record.loads if (v := record.at_load(k)) is not None}
        true_loads = {
            str(k): float(v)
            for k, v in (attrs.get(TRUE_LOADS_ATTR) or {}).items()
            if isinstance(v, (int, float))
        }
        trials.append(
            TrialTrace(
                t.number,
                str(attrs.get("role") or "search"),
                "refused" if outcome is Outcome.INFEASIBLE else str(outcome),
                t.value if t.state == TrialState.COMPLETE else None,
                None if true is None else float(true),
                float(attrs.get(GPU_S_ATTR) or 0.0),
                measured_loads if t.state == TrialState.COMPLETE else {},
                true_loads,
            )
        )
    return StudyTrace(strategy, seed, tuple(sorted(trials, key=lambda t: t.number)))


@dataclass(frozen=True)
class StudyScore:
    strategy: str
    seed: int
    history: tuple[float, ...]  # incumbent's true value / optimum, after each trial (0: none)
    trials_to: dict[float, int | None]
    gpu_hours_to: dict[float, float | None]
    gpu_hours: float
    crash_share: float
    crashes: int
    refused: int
    #: With a load mix: each load point's winner (best measured there, baseline aside), its
    #: true value's share of that point's optimum.
    load_shares: dict[str, float] = field(default_factory=dict)

    @property
    def loads_within_98(self) -> bool | None:
        """Whether every load point's winner is within 98% of that point's optimum."""
        if not self.load_shares:
            return None
        return all(v >= 0.98 - 1e-12 for v in self.load_shares.values())


def load_winner_shares(
    trace: StudyTrace, optima: Mapping[str, float], *, maximize: bool
) -> dict[str, float]:
    """Per load point: the true value of the configuration measured best there (the baseline
    aside, as it is outside the space), as a share of the point's optimum (0: none measured)."""
    shares: dict[str, float] = {}
    for label, optimum in optima.items():
        best: TrialTrace | None = None
        for trial in trace.trials:
            mine = trial.measured_loads.get(label)
            if trial.role == "baseline" or mine is None or label not in trial.true_loads:
                continue
            theirs = None if best is None else best.measured_loads[label]
            if theirs is None or (mine > theirs if maximize else mine < theirs):
                best = trial
        if best is None:
            shares[label] = 0.0
            continue
        true = best.true_loads[label]
        shares[label] = true / optimum if maximize else optimum / true
    return shares


def score_study(
    trace: StudyTrace,
    optimum: float,
    gpus: int,
    *,
    maximize: bool,
    load_optima: Mapping[str, float] | None = None,
) -> StudyScore:
    best_measured: float | None = None
    incumbent_true = 0.0
    history: list[float] = []
    seconds = 0.0
    crash_seconds = 0.0
    crashes = refused = 0
    trials_to: dict[float, int | None] = dict.fromkeys(SHARES)
    hours_to: dict[float, float | None] = dict.fromkeys(SHARES)
    for i, trial in enumerate(trace.trials):
        seconds += trial.seconds
        if trial.status == "refused":
            refused += 1
        elif trial.status != "ok":
            crashes += 1
            crash_seconds += trial.seconds
        if trial.role != "baseline" and trial.measured is not None and trial.true_value:
            better = best_measured is None or (
                trial.measured > best_measured if maximize else trial.measured < best_measured
            )
            if better:
                best_measured = trial.measured
                share = trial.true_value / optimum if maximize else optimum / trial.true_value
                incumbent_true = share
        history.append(incumbent_true)
        for share in SHARES:
            if trials_to[share] is None and incumbent_true >= share - 1e-12:
                trials_to[share] = i + 1
                hours_to[share] = seconds * gpus / 3600.0
    return StudyScore(
        trace.strategy,
        trace.seed,
        tuple(history),
        trials_to,
        hours_to,
        seconds * gpus / 3600.0,
        crash_seconds / seconds if seconds > 0 else 0.0,
        crashes,
        refused,
        load_winner_shares(trace, load_optima, maximize=maximize) if load_optima else {},
    )


@dataclass(frozen=True)
class StrategySummary:
    """Medians over seeds (``None``: not reached in at least half of the seeds)."""

    strategy: str
    seeds: int
    median_trials_to_95: float | None
    median_trials_to_98: float | None
    median_gpu_hours_to_98: float | None
    reached_98: float  # share of seeds that reached 98%
    median_crash_share: float
    median_final: float  # incumbent's share of the optimum at the end of the budget
    median_gpu_hours: float
    #: With a load mix: seeds whose every per-load winner is within 98% of the per-load optimum.
    loads_within_98: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(scores: Sequence[StudyScore]) -> StrategySummary:
    def median_or_none(values: Sequence[float | None]) -> float | None:
        filled = [math.inf if v is None else float(v) for v in values]
        m = statistics.median(filled)
        return None if math.isinf(m) else m

    return StrategySummary(
        strategy=scores[0].strategy,
        seeds=len(scores),
        median_trials_to_95=median_or_none([s.trials_to[0.95] for s in scores]),
        median_trials_to_98=median_or_none([s.trials_to[0.98] for s in scores]),
        median_gpu_hours_to_98=median_or_none([s.gpu_hours_to[0.98] for s in scores]),
        reached_98=sum(s.trials_to[0.98] is not None for s in scores) / len(scores),
        median_crash_share=statistics.median(s.crash_share for s in scores),
        median_final=statistics.median(s.history[-1] if s.history else 0.0 for s in scores),
        median_gpu_hours=statistics.median(s.gpu_hours for s in scores),
        loads_within_98=(
            None
            if scores[0].loads_within_98 is None
            else sum(bool(s.loads_within_98) for s in scores)
        ),
    )


def quartiles(scores: Sequence[StudyScore], length: int) -> list[tuple[float, float, float]]:
    """Per trial index: (first quartile, median, third quartile) of the incumbent share."""
    out = []
    for i in range(length):
        values = sorted(s.history[min(i, len(s.history) - 1)] if s.history else 0.0 for s in scores)
        q = (
            statistics.quantiles(values, n=4, method="inclusive")
            if len(values) > 1
            else [values[0]] * 3
        )
        out.append((q[0], statistics.median(values), q[2]))
    return out
