"""The trial record: the names the dashboard, the report, the notebook and outside tools rely on.

Every finished trial carries these user attributes, whatever its outcome:

``outcome``         ``ok``, a crash category (``oom_kv_pool``, ``oom_cuda_graph``, ...,
                    ``port_in_use``), ``infeasible`` (refused before launch), ``timeout``,
                    ``interrupted``, or ``surplus`` (given back unrun: other workers held the
                    study's last trials); the values of :class:`Outcome`
``output_tok_s``, ``total_tok_s``, ``request_throughput``, ``goodput``, ``accept_length``,
``accept_rate``, ``<ttft|tpot|itl|e2e>_<mean|median|p90|p99>_ms``
                    measured figures, medians over repeats (``None`` where not measured;
                    ``goodput`` only where the space gives per-request limits); every metric an
                    objective or a constraint may name is among them
``values``          every objective's value, in the space's order (multi-objective studies)
``startup_s``       seconds from launch to ready, or to the line that decided a crash
``command``         the launch command line as a user would type it, secrets redacted
``failure_line``    the log line that decided a crash outcome
``speedup``         the objective over the baseline's (measured trials, baseline measured)
``config``          the knobs of the configuration: what differs from SGLang's defaults, and
                    every searched knob
``sglang_command``  the same configuration as a ``python -m sglang.launch_server`` command line
``loads``           with a load mix (``objective.loads``): each load point's figures by its
                    label (``{"c16": {"value": ..., "output_tok_s": ..., ...}}``), ``value``
                    being the objective's figure at that point; the trial's value is their
                    weighted mean. Absent without a load mix.
``memory``          what the start printed about its memory, per GPU (weights, KV pool, CUDA
                    graphs, what each left: :class:`autotune.engines.MemoryReading`); absent
                    where the log printed none
``role``            ``baseline``, ``enqueued`` (from the space file), ``informed`` (chosen by
                    the tuner before searching), ``search`` (proposed by the sampler) or
                    ``rerun`` (a configuration interrupted earlier)

Optuna states follow the outcome: measured trials are COMPLETE; crashes, timeouts and refusals are
PRUNED (the dashboard shows them as pruned, with the reason in the attributes; the sampler still
learns from them, see :mod:`autotune.study._sampler`); an interrupted trial is FAIL and is run
again on resume; a surplus trial is FAIL and was never run.

:meth:`TrialRecord.from_trial` reads these back, parsed once into typed fields: the report, the
figures and the review notebook read records, never the attributes themselves.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.crashes import CRASH_CATEGORIES

if TYPE_CHECKING:
    import optuna


class Outcome(str, enum.Enum):
    """How a trial ended: the ``outcome`` user attribute.

    A ``str`` enum, so that what is stored is the plain value (``"ok"``, ``"oom_kv_pool"``, ...)
    and the databases of earlier versions read the same; ``str()`` and formatting give the value.
    The crash members are the crash classifier's categories (checked when this module loads).
    """

    OK = "ok"
    OOM_KV_POOL = "oom_kv_pool"
    OOM_CUDA_GRAPH = "oom_cuda_graph"
    OOM_RUNTIME = "oom_runtime"
    UNSUPPORTED_ARCH = "unsupported_arch"
    GRAPH_CAPTURE_OTHER = "graph_capture_other"
    NCCL_ERROR = "nccl_error"
    BAD_ARGS = "bad_args"
    #: Another program held the port: says nothing about the configuration (launched again).
    PORT_IN_USE = "port_in_use"
    OTHER_CRASH = "other_crash"
    UNKNOWN_CRASH = "unknown_crash"
    #: The server did not become ready in time, or the benchmark ran out of time.
    TIMEOUT = "timeout"
    #: Refused before launch: a rule, the engine release or a lesson rules it out.
    INFEASIBLE = "infeasible"
    #: Stopped by a signal: failed, and run again on resume.
    INTERRUPTED = "interrupted"
    #: Given back unrun: other workers were already running the study's last trials.
    SURPLUS = "surplus"
    #: Never written: a trial whose stored outcome is missing or not one this version knows.
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def parse(cls, value: object) -> Outcome | None:
        """The outcome a stored value names; ``None`` when there is none, :attr:`UNKNOWN` when it
        is not one this version knows."""
        if value is None:
            return None
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN

    @classmethod
    def of_crash(cls, category: str | None) -> Outcome:
        """The outcome of a crash the classifier named by ``category`` (``other_crash`` when it
        names none, or one that is not a crash category)."""
        outcome = cls.parse(category)
        return outcome if outcome is not None and outcome.crashed else cls.OTHER_CRASH

    @property
    def crashed(self) -> bool:
        """A server that could not be measured: a crash category or a time-out."""
        return self in CRASH_OUTCOMES

    @property
    def unmeasurable(self) -> bool:
        """The configuration itself could not be measured: a crash, a time-out or a refusal
        before launch (what the sampler and the feasibility lessons learn from). A port that
        another program holds says nothing of the configuration, so it is not counted."""
        return (self.crashed and self is not Outcome.PORT_IN_USE) or self is Outcome.INFEASIBLE


#: Outcomes of a server that could not be measured (pruned, learned from): the crash
#: classifier's categories and the start-up time-out. (Outcome(c) fails at import for a
#: category of the classifier that :class:`Outcome` lacks.)
CRASH_OUTCOMES: tuple[Outcome, ...] = (
    *(Outcome(c) for c in CRASH_CATEGORIES),
    Outcome.TIMEOUT,
)

ROLES = ("baseline", "enqueued", "informed", "search", "rerun")

#: The figures recorded at each load point of a load mix (``value``: the objective's score).
LOAD_FIGURES: tuple[str, ...] = (
    "value",
    "output_tok_s",
    "total_tok_s",
    "accept_length",
    "ttft_p99_ms",
    "itl_p99_ms",
    "tpot_p99_ms",
)

#: Metric user attributes recorded on every finished trial.
METRIC_ATTRS: tuple[str, ...] = (
    "output_tok_s",
    "total_tok_s",
    "request_throughput",
    "goodput",
    "accept_length",
    "accept_rate",
    *(
        f"{family}_{stat}_ms"
        for family in ("ttft", "tpot", "itl", "e2e")
        for stat in ("mean", "median", "p90", "p99")
    ),
)

# System attributes (not shown as user data; Optuna-internal bookkeeping of autotune)
SYS_PROCESS = "autotune:process"
SYS_TUNER = "autotune:tuner"
SYS_RERUN_OF = "autotune:rerun_of"

# Study user attributes
STUDY_FINGERPRINT = "autotune:fingerprint"
STUDY_SPACE_SOURCE = "autotune:space"
#: The space text of studies created by earlier versions (now a system attribute and a study
#: artifact: :mod:`autotune.study._space_record`); still read where a study has it.
STUDY_SPACE_TEXT = "autotune:space_text"
STUDY_TARGET = "autotune:n_trials"
#: What ``study start`` was asked (``{"n_trials": 3, "confirm": False}``; ``confirm`` None: as
#: the space says), written right after the study row, before anything else: ``study resume``
#: keeps them unless its own options override them.
STUDY_OPTIONS = "autotune:start_options"
STUDY_REFUSED = "autotune:refused"
STUDY_METRIC = "autotune:metric"
#: The load mix: ``[{"label": "c16", "weight": 0.3, "concurrency": 16, "request_rate": None}]``.
STUDY_LOADS = "autotune:loads"
STUDY_CONFIRMATION = "autotune:confirmation"
#: The twin sampler's ranking of the measured configurations at the end of the search:
#: ``{"trials": [complete trial numbers it saw], "ranking": [trial numbers, best first]}``; the
#: confirmation takes its best few among its candidates.
STUDY_TWIN_RANKING = "autotune:twin_ranking"
#: The tuner confirming the study, and the server of its confirmation run (for a kill -9).
STUDY_CONFIRMING = "autotune:confirming"
STUDY_CONFIRM_PROCESS = "autotune:confirm_process"
#: The verdict's headline and the trial it chose (None: run without speculation), written with
#: the verdict where a reader of the study's attributes (optuna-dashboard's study page) sees
#: them first: plain names, not ``autotune:`` ones.
STUDY_VERDICT = "verdict"
STUDY_CONFIRMED_TRIAL = "confirmed_trial"


@dataclass
class TrialRecord:
    """What one trial found out: built by the trial and written to the study
    (:meth:`user_attrs`), or read back from a finished trial (:meth:`from_trial`).

    ``extra`` holds the attributes no reader of records needs (benchmark details, the stop);
    they are written, and not read back.
    """

    outcome: Outcome
    role: str
    command: str | None = None
    failure_line: str | None = None
    advice: str | None = None
    startup_s: float | None = None
    benchmark_s: float | None = None
    #: The (first) objective's value.
    value: float | None = None
    #: Every objective's value (a multi-objective study); ``None``: one objective.
    values: tuple[float, ...] | None = None
    #: The figures of :data:`METRIC_ATTRS` by name (``None`` where not measured).
    metrics: dict[str, float | None] = field(default_factory=dict)
    #: The objective over the baseline's (measured trials, once the baseline is measured).
    speedup: float | None = None
    #: The knobs of the configuration (``None``: not recorded; readers fall back on params).
    config: dict[str, Any] | None = None
    #: The configuration as an SGLang launch command (where the engine gives one).
    sglang_command: str | None = None
    #: Why the benchmark failed (the error's message), where it did.
    benchmark_error: str | None = None
    #: With a load mix: each load point's figures (:data:`LOAD_FIGURES`) by the point's label.
    loads: dict[str, dict[str, float | None]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.outcome = Outcome(self.outcome)  # a plain value names its member

    @property
    def measured(self) -> bool:
        return self.outcome is Outcome.OK and self.value is not None

    @property
    def accept_length(self) -> float | None:
        return self.metrics.get("accept_length")

    def metric(self, name: str) -> float | None:
        """One recorded figure by its name (``None`` where not measured)."""
        return self.metrics.get(name)

    def at_load(self, label: str, figure: str = "value") -> float | None:
        """The trial's ``figure`` at the load point ``label`` (None where not measured)."""
        return self.loads.get(label, {}).get(figure)

    @classmethod
    def from_attrs(
        cls,
        attrs: Mapping[str, Any],
        *,
        value: float | None = None,
        values: Sequence[float] | None = None,
    ) -> TrialRecord:
        """The record of a trial's user attributes, each parsed once: numbers that are not
        numbers and texts that are not texts read as ``None``; a missing role as ``search``; a
        missing or unknown outcome as :attr:`Outcome.UNKNOWN`. ``value``: the trial's value;
        ``values``: its values, where it has several."""
        config = attrs.get("config")
        return cls(
            outcome=Outcome.parse(attrs.get("outcome")) or Outcome.UNKNOWN,
            role=str(attrs.get("role", "search")),
            command=_text(attrs.get("command")),
            failure_line=_text(attrs.get("failure_line")),
            advice=_text(attrs.get("advice")),
            startup_s=_number(attrs.get("startup_s")),
            benchmark_s=_number(attrs.get("benchmark_s")),
            value=value,
            values=tuple(values) if values is not None and len(values) > 1 else None,
            metrics={name: _number(attrs.get(name)) for name in METRIC_ATTRS},
            speedup=_number(attrs.get("speedup")),
            config=dict(config) if isinstance(config, dict) else None,
            sglang_command=_text(attrs.get("sglang_command")),
            benchmark_error=_text(attrs.get("benchmark_error")),
            loads=_loads(attrs.get("loads")),
        )

    @classmethod
    def from_trial(cls, trial: optuna.trial.FrozenTrial) -> TrialRecord:
        """The record of a finished trial (see :meth:`from_attrs`)."""
        values = trial.values
        return cls.from_attrs(trial.user_attrs, value=values[0] if values else None, values=values)

    def user_attrs(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "outcome": self.outcome.value,
            "role": self.role,
            "command": self.command,
            "failure_line": self.failure_line,
            "startup_s": None if self.startup_s is None else round(self.startup_s, 3),
        }
        for name in METRIC_ATTRS:
            value = self.metrics.get(name)
            attrs[name] = None if value is None else round(float(value), 4)
        if self.advice:
            attrs["advice"] = self.advice
        if self.benchmark_s is not None:
            attrs["benchmark_s"] = round(self.benchmark_s, 3)
        if self.sglang_command is not None:
            attrs["sglang_command"] = self.sglang_command
        if self.benchmark_error is not None:
            attrs["benchmark_error"] = self.benchmark_error
        if self.loads:
            attrs["loads"] = {
                label: {k: None if v is None else round(float(v), 4) for k, v in figures.items()}
                for label, figures in self.loads.items()
            }
        attrs.update(self.extra)
        if self.values is not None:
            attrs["values"] = [round(float(v), 4) for v in self.values]
        if self.speedup is not None:
            attrs["speedup"] = self.speedup
        if self.config is not None:
            attrs["config"] = self.config
        return attrs

    def line(self, number: int, metric: str) -> str:
        """One line for the study's progress: outcome, value or start-up time, the knobs."""
        knobs = " ".join(
            f"{k}={v}" for k, v in (self.config or {}).items() if k != "speculative_algorithm"
        )
        if self.measured:
            tail = f" x{self.speedup:.2f}" if self.speedup is not None else ""
            return f"trial {number} [{self.role}] ok: {self.value:.1f} {metric}{tail}  {knobs}"
        when = f" after {self.startup_s:.1f} s" if self.startup_s is not None else ""
        return f"trial {number} [{self.role}] {self.outcome}{when}  {knobs}"


def first_value(trial: optuna.trial.FrozenTrial) -> float | None:
    """A finished trial's (first) objective value; ``None`` when it has none. (``trial.value``
    raises on a multi-objective study's trial.)"""
    values = trial.values
    return float(values[0]) if values else None


#: A study's constraint values of a trial (feasible where all are <= 0), as the loop computes them.
ConstraintsFn = Callable[["optuna.trial.FrozenTrial"], Sequence[float]]


def within_limits(
    trial: optuna.trial.FrozenTrial, constraints: ConstraintsFn | None = None
) -> bool:
    """Whether ``trial`` is within the study's limits: every constraint value is <= 0, those
    ``constraints`` computes, else those recorded with the trial (none recorded: within).

    The recorded values include ``starts`` (> 0: the server did not start and was not measured)
    and one per limit of the space (``objective.constraints``).
    """
    if constraints is not None:
        return all(v <= 0 for v in constraints(trial))
    recorded = trial.constraints
    return all(v <= 0 for v in recorded.values()) if recorded else True


def feasible_trials(
    trials: Iterable[optuna.trial.FrozenTrial], constraints: ConstraintsFn | None = None
) -> list[optuna.trial.FrozenTrial]:
    """The measured trials within the study's limits, in the order given: complete, with an
    objective value, measured (outcome ``ok``, or none: a trial Optuna recorded itself) and
    :func:`within_limits`. The one definition the loop, the samplers and the report use."""
    from optuna.trial import TrialState

    return [
        t
        for t in trials
        if t.state == TrialState.COMPLETE
        and first_value(t) is not None
        and outcome_of(t.user_attrs) in (None, Outcome.OK)
        and within_limits(t, constraints)
    ]


def best_feasible_trial(
    trials: Iterable[optuna.trial.FrozenTrial],
    *,
    maximize: bool,
    constraints: ConstraintsFn | None = None,
) -> optuna.trial.FrozenTrial | None:
    """The best of :func:`feasible_trials` by the (first) objective, the first of equal values
    in the order given; None when no trial is feasible."""
    feasible = feasible_trials(trials, constraints)
    if not feasible:
        return None
    sign = 1.0 if maximize else -1.0
    return max(feasible, key=lambda t: sign * (first_value(t) or 0.0))


def twin_ranking(study: optuna.Study) -> list[Any] | None:
    """The twin sampler's stored ranking (:data:`STUDY_TWIN_RANKING`) where it ranks the study's
    complete trials as they are; None where there is none, it has another shape, or the study
    measured more since."""
    from optuna.trial import TrialState

    kept = study.user_attrs.get(STUDY_TWIN_RANKING)
    if not isinstance(kept, dict) or not isinstance(kept.get("ranking"), list):
        return None
    complete = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    return kept["ranking"] if kept.get("trials") == sorted(complete) else None


def outcome_of(user_attrs: Mapping[str, Any]) -> Outcome | None:
    """The outcome of a trial's user attributes (see :meth:`Outcome.parse`)."""
    return Outcome.parse(user_attrs.get("outcome"))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _loads(value: Any) -> dict[str, dict[str, float | None]]:
    """The ``loads`` attribute as written, or what of it is well formed."""
    if not isinstance(value, dict):
        return {}
    return {
        str(label): {name: _number(figures.get(name)) for name in LOAD_FIGURES}
        for label, figures in value.items()
        if isinstance(figures, dict)
    }


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
