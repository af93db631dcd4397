"""Bookkeeping of simulated studies: progress towards the optimum, GPU time, crash share.

A study is booked from what the loop recorded in its storage (:func:`trace_of`): each finished
trial's role and outcome, its measured value, and the oracle's charge and true value.

The incumbent after each trial is the configuration with the best *measured* value so far among
those measured within the space's constraints (as a user, and the report, would pick it), judged
by its *true* value. With constraints, a study also books whether its final incumbent meets them
at noise 0, and the share of its trials measured over a limit in its first and its second half
(the sampler should learn the region beyond a limit after its first violations). A study
"reaches" a share of the optimum at the first trial whose incumbent's true value is at least
that share; trials and GPU hours are counted up to and including that trial (the baseline trial
counts: the tuner always runs it). Besides, a study books the first trial that measured a
configuration within 98% of the optimum at all: where it is earlier than the reach, or the study
never reached 98%, the search had found such a configuration and its noisy measurement fell
below a luckier one's (the measured best, not the search, was wrong).

With a load mix, each load point's winner at the end of the study (the configuration measured
best at that point) is judged by its true value at that point against the point's own optimum.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.searchbench._oracle import (
    GPU_S_ATTR,
    TRUE_FEASIBLE_ATTR,
    TRUE_LOADS_ATTR,
    TRUE_VALUE_ATTR,
)
from autotune.study._record import Outcome, TrialRecord, first_value, outcome_of

if TYPE_CHECKING:
    import optuna

    from autotune.study._verdict import Verdict

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
    #: Measured over a limit of the space (its recorded constraints other than ``starts``).
    violated: bool = False
    #: Its noise-free figures meet every constraint (None: not measured by the oracle).
    true_feasible: bool | None = None
    #: With a load mix: the measured and the noise-free objective at each load point.
    measured_loads: Mapping[str, float] = field(default_factory=dict)
    true_loads: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfirmTrace:
    """What the study's confirmation concluded and cost."""

    #: The verdict's kind (``pays``, ``noise``, ``costs``, ``none``).
    kind: str
    #: The trial to run (None: no speculation), and the leader the verdict judged.
    choice: int | None
    leader: int | None
    gpu_hours: float
    starts: int
    #: With a load mix: the candidate confirmed best at each load point (its trial number).
    load_choices: Mapping[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class StudyTrace:
    strategy: str
    seed: int
    trials: tuple[TrialTrace, ...]
    confirmation: ConfirmTrace | None = None


def confirm_trace(verdict: Verdict | None) -> ConfirmTrace | None:
    if verdict is None:
        return None
    leader = verdict.leader.trial if verdict.leader is not None else None
    return ConfirmTrace(
        verdict.kind,
        verdict.choice,
        leader,
        verdict.gpu_hours,
        verdict.starts,
        {c.label: c.trial for c in verdict.loads},
    )


def trace_of(
    study: optuna.Study, strategy: str, seed: int, verdict: Verdict | None = None
) -> StudyTrace:
    """The finished trials of ``study`` in order, as the loop recorded them, and what its
    confirmation (``verdict``) concluded."""
    from optuna.trial import TrialState

    trials = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        attrs = t.user_attrs
        outcome = outcome_of(attrs)
        true = attrs.get(TRUE_VALUE_ATTR)
        complete = t.state == TrialState.COMPLETE
        limits = [v for name, v in (t.constraints or {}).items() if name != "starts"]
        true_feasible = attrs.get(TRUE_FEASIBLE_ATTR)
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
                first_value(t) if complete else None,
                None if true is None else float(true),
                float(attrs.get(GPU_S_ATTR) or 0.0),
                complete and any(v > 0 for v in limits),
                true_feasible if isinstance(true_feasible, bool) else None,
                measured_loads if t.state == TrialState.COMPLETE else {},
                true_loads,
            )
        )
    ordered = tuple(sorted(trials, key=lambda t: t.number))
    return StudyTrace(strategy, seed, ordered, confirm_trace(verdict))


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
    #: Trials measured over a limit: in the first half of the study, in the second half.
    violations: tuple[int, int] = (0, 0)
    #: Trials in each half.
    halves: tuple[int, int] = (0, 0)
    #: The final incumbent meets every constraint at noise 0 (None: no incumbent).
    final_feasible: bool | None = None
    #: The first trial (1-based) that measured a configuration within 98% of the optimum
    #: within the space's limits, whether or not its measurement led (None: none did).
    found_98: int | None = None

    def violation_shares(self) -> tuple[float, float]:
        """The share of trials measured over a limit in each half of the study."""
        return (
            self.violations[0] / self.halves[0] if self.halves[0] else 0.0,
            self.violations[1] / self.halves[1] if self.halves[1] else 0.0,
        )

    #: With a load mix: each load point's winner (best measured there, baseline aside), its
    #: true value's share of that point's optimum.
    load_shares: dict[str, float] = field(default_factory=dict)

    @property
    def loads_within_98(self) -> bool | None:
        """Whether every load point's winner is within 98% of that point's optimum."""
        if not self.load_shares:
            return None
        return all(v >= 0.98 - 1e-12 for v in self.load_shares.values())

    #: The confirmed choice's true value over the best of the optimum and the baseline (the
    #: right answer may be "no speculation"); None: not confirmed.
    confirmed: float | None = None
    verdict: str | None = None
    #: The verdict said "pays" while the leader's true value is at most the baseline's.
    wrong_pays: bool = False
    confirm_gpu_hours: float = 0.0
    #: The confirmed choice meets the space's limits at noise 0 (None: no limits, or no choice).
    confirmed_feasible: bool | None = None

    @property
    def final(self) -> float:
        """The share of the optimum of the best measured configuration after the last trial."""
        return self.history[-1] if self.history else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The study's row in the benchmark's JSON: where it reached 95% and 98%, where it
        ended, what it cost and what its confirmation concluded."""

        def rounded(v: float | None, digits: int) -> float | None:
            return None if v is None else round(v, digits)

        return {
            "strategy": self.strategy,
            "seed": self.seed,
            "trials": len(self.history),
            "trials_to_95": self.trials_to.get(0.95),
            "trials_to_98": self.trials_to.get(0.98),
            "trials_to_find_98": self.found_98,
            "gpu_hours_to_98": rounded(self.gpu_hours_to.get(0.98), 3),
            "final": round(self.final, 4),
            "gpu_hours": round(self.gpu_hours, 3),
            "crash_share": round(self.crash_share, 4),
            "crashes": self.crashes,
            "refused": self.refused,
            "verdict": self.verdict,
            "confirmed": rounded(self.confirmed, 4),
            "confirm_gpu_hours": round(self.confirm_gpu_hours, 3),
        }


def load_winner_shares(
    trace: StudyTrace, optima: Mapping[str, float], *, maximize: bool
) -> dict[str, float]:
    """Per load point: the true value of the study's winner there, as a share of the point's
    optimum (0: none measured). The winner is the candidate the confirmation found best at that
    point, or without a confirmation the configuration measured best there (the baseline aside
    in both, as it is outside the space)."""
    choices = trace.confirmation.load_choices if trace.confirmation is not None else {}
    by_number = {t.number: t for t in trace.trials}
    shares: dict[str, float] = {}
    for label, optimum in optima.items():
        best: TrialTrace | None = None
        chosen = choices.get(label)
        if chosen is not None and label in by_number[chosen].true_loads:
            best = by_number[chosen]
        else:
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
    final_feasible: bool | None = None
    incumbent_true = 0.0
    history: list[float] = []
    seconds = 0.0
    crash_seconds = 0.0
    crashes = refused = 0
    found_98: int | None = None
    trials_to: dict[float, int | None] = dict.fromkeys(SHARES)
    hours_to: dict[float, float | None] = dict.fromkeys(SHARES)
    for i, trial in enumerate(trace.trials):
        seconds += trial.seconds
        if trial.status == "refused":
            refused += 1
        elif trial.status != "ok":
            crashes += 1
            crash_seconds += trial.seconds
        within = not trial.violated
        if trial.role != "baseline" and trial.measured is not None and trial.true_value and within:
            mine = trial.true_value / optimum if maximize else optimum / trial.true_value
            if found_98 is None and mine >= 0.98 - 1e-12:
                found_98 = i + 1
            better = best_measured is None or (
                trial.measured > best_measured if maximize else trial.measured < best_measured
            )
            if better:
                best_measured = trial.measured
                incumbent_true = mine
                final_feasible = trial.true_feasible
        history.append(incumbent_true)
        for share in SHARES:
            if trials_to[share] is None and incumbent_true >= share - 1e-12:
                trials_to[share] = i + 1
                hours_to[share] = seconds * gpus / 3600.0
    half = (len(trace.trials) + 1) // 2
    first, second = trace.trials[:half], trace.trials[half:]
    confirmed, wrong, confirm_hours, confirmed_feasible = _confirmed(
        trace, optimum, maximize=maximize
    )
    return StudyScore(
        trace.strategy,
        trace.seed,
        tuple(history),
        trials_to,
        hours_to,
        seconds * gpus / 3600.0 + confirm_hours,
        crash_seconds / seconds if seconds > 0 else 0.0,
        crashes,
        refused,
        (sum(t.violated for t in first), sum(t.violated for t in second)),
        (len(first), len(second)),
        final_feasible,
        found_98,
        load_winner_shares(trace, load_optima, maximize=maximize) if load_optima else {},
        confirmed,
        None if trace.confirmation is None else trace.confirmation.kind,
        wrong,
        confirm_hours,
        confirmed_feasible,
    )


def _confirmed(
    trace: StudyTrace, optimum: float, *, maximize: bool
) -> tuple[float | None, bool, float, bool | None]:
    """The confirmed choice's share of the best answer, whether "pays" was wrong, its cost,
    and whether the choice meets the space's limits at noise 0 (None: no limits)."""
    conf = trace.confirmation
    if conf is None:
        return None, False, 0.0, None
    by_number = {t.number: t for t in trace.trials}
    baseline = next((t for t in trace.trials if t.role == "baseline"), None)
    if baseline is None or baseline.true_value is None:
        return None, False, conf.gpu_hours, None
    base = baseline.true_value

    def share(value: float | None, best: float) -> float:
        if not value:
            return 0.0
        return value / best if maximize else best / value

    # no speculation is a right answer only where the baseline itself meets the limits
    best = optimum
    if baseline.true_feasible is not False:
        best = max(optimum, base) if maximize else min(optimum, base)
    chosen = baseline if conf.choice is None else by_number.get(conf.choice)
    leader = None if conf.leader is None else by_number.get(conf.leader)
    wrong = conf.kind == "pays" and (leader is None or share(leader.true_value, base) <= 1.0)
    feasible = None if chosen is None else chosen.true_feasible
    value = None if chosen is None else chosen.true_value
    return share(value, best), wrong, conf.gpu_hours, feasible


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
    #: Share of seeds that measured a configuration within 98% at all (reached or not).
    found_98: float = 0.0
    #: Seeds whose final incumbent meets every constraint at noise 0.
    final_feasible: int = 0
    #: Mean over seeds of the share of trials measured over a limit, per half of the study.
    violation_share_first_half: float = 0.0
    violation_share_second_half: float = 0.0
    #: With a load mix: seeds whose every per-load winner is within 98% of the per-load optimum.
    loads_within_98: int | None = None
    #: Confirmed studies: median share of the confirmed choice, seeds within 98%, verdicts.
    median_confirmed: float | None = None
    confirmed_98: float | None = None
    verdicts: dict[str, int] | None = None
    wrong_pays: int = 0
    median_confirm_gpu_hours: float | None = None
    #: Seeds whose confirmed choice meets the space's limits at noise 0 (None: no limits).
    confirmed_feasible: int | None = None

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
        median_final=statistics.median(s.final for s in scores),
        median_gpu_hours=statistics.median(s.gpu_hours for s in scores),
        found_98=sum(s.found_98 is not None for s in scores) / len(scores),
        final_feasible=sum(s.final_feasible is True for s in scores),
        violation_share_first_half=statistics.fmean(s.violation_shares()[0] for s in scores),
        violation_share_second_half=statistics.fmean(s.violation_shares()[1] for s in scores),
        loads_within_98=(
            None
            if scores[0].loads_within_98 is None
            else sum(bool(s.loads_within_98) for s in scores)
        ),
        **_confirmed_summary(scores),
    )


def _confirmed_summary(scores: Sequence[StudyScore]) -> dict[str, Any]:
    confirmed = [s for s in scores if s.verdict is not None]
    if not confirmed:
        return {}
    shares = [s.confirmed or 0.0 for s in confirmed]
    kinds: dict[str, int] = {}
    for s in confirmed:
        kinds[str(s.verdict)] = kinds.get(str(s.verdict), 0) + 1
    return {
        "median_confirmed": statistics.median(shares),
        "confirmed_98": sum(v >= 0.98 - 1e-12 for v in shares) / len(confirmed),
        "verdicts": dict(sorted(kinds.items())),
        "wrong_pays": sum(s.wrong_pays for s in confirmed),
        "median_confirm_gpu_hours": statistics.median(s.confirm_gpu_hours for s in confirmed),
        "confirmed_feasible": (
            None
            if all(s.confirmed_feasible is None for s in confirmed)
            else sum(s.confirmed_feasible is True for s in confirmed)
        ),
    }


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
