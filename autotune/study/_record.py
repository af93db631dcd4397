"""The trial record: the names the dashboard, the report, the notebook and outside tools rely on.

Every finished trial carries these user attributes, whatever its outcome:

``outcome``         ``ok``, a crash category (``oom_kv_pool``, ``oom_cuda_graph``, ...),
                    ``infeasible`` (refused before launch), ``timeout``, ``interrupted``, or
                    ``surplus`` (given back unrun: other workers held the study's last trials)
``output_tok_s``, ``accept_length``, ``accept_rate``, ``ttft_p99_ms``, ``itl_p99_ms``
                    measured figures (``None`` where not measured)
``startup_s``       seconds from launch to ready, or to the line that decided a crash
``command``         the launch command line as a user would type it, secrets redacted
``failure_line``    the log line that decided a crash outcome
``speedup``         the objective over the baseline's (measured trials, baseline measured)
``role``            ``baseline``, ``enqueued`` (from the space file), ``informed`` (chosen by
                    the tuner before searching), ``search`` (proposed by the sampler) or
                    ``rerun`` (a configuration interrupted earlier)

Optuna states follow the outcome: measured trials are COMPLETE; crashes, timeouts and refusals are
PRUNED (the dashboard shows them as pruned, with the reason in the attributes; the sampler still
learns from them, see :mod:`autotune.study._sampler`); an interrupted trial is FAIL and is run
again on resume; a surplus trial is FAIL and was never run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.crashes import CRASH_CATEGORIES

OK = "ok"
INFEASIBLE = "infeasible"
TIMEOUT = "timeout"
INTERRUPTED = "interrupted"
#: A trial given back unrun: other workers were already running the study's last trials.
SURPLUS = "surplus"

#: Outcomes of a server that could not be measured (pruned, learned from): the crash
#: classifier's categories and the start-up time-out.
CRASH_OUTCOMES: tuple[str, ...] = (*CRASH_CATEGORIES, TIMEOUT)

ROLES = ("baseline", "enqueued", "informed", "search", "rerun")

#: Metric user attributes recorded on every finished trial.
METRIC_ATTRS: tuple[str, ...] = (
    "output_tok_s",
    "accept_length",
    "accept_rate",
    "ttft_p99_ms",
    "itl_p99_ms",
)

# System attributes (not shown as user data; Optuna-internal bookkeeping of autotune)
SYS_PROCESS = "autotune:process"
SYS_TUNER = "autotune:tuner"
SYS_RERUN_OF = "autotune:rerun_of"

# Study user attributes
STUDY_FINGERPRINT = "autotune:fingerprint"
STUDY_SPACE_SOURCE = "autotune:space"
STUDY_SPACE_TEXT = "autotune:space_text"
STUDY_TARGET = "autotune:n_trials"
STUDY_REFUSED = "autotune:refused"
STUDY_METRIC = "autotune:metric"


@dataclass
class TrialRecord:
    """What one trial found out, before it is written to the study."""

    outcome: str
    role: str
    command: str | None = None
    failure_line: str | None = None
    advice: str | None = None
    startup_s: float | None = None
    benchmark_s: float | None = None
    value: float | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return self.outcome == OK and self.value is not None

    def user_attrs(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "outcome": self.outcome,
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
        attrs.update(self.extra)
        return attrs

    def line(self, number: int, metric: str) -> str:
        """One line for the study's progress: outcome, value or start-up time, the knobs."""
        knobs = " ".join(
            f"{k}={v}"
            for k, v in (self.extra.get("config") or {}).items()
            if k != "speculative_algorithm"
        )
        if self.measured:
            speedup = self.extra.get("speedup")
            tail = f" x{speedup:.2f}" if isinstance(speedup, (int, float)) else ""
            return f"trial {number} [{self.role}] ok: {self.value:.1f} {metric}{tail}  {knobs}"
        when = f" after {self.startup_s:.1f} s" if self.startup_s is not None else ""
        return f"trial {number} [{self.role}] {self.outcome}{when}  {knobs}"


def outcome_of(user_attrs: Mapping[str, Any]) -> str | None:
    value = user_attrs.get("outcome")
    return value if isinstance(value, str) else None


def is_crash(outcome: str | None) -> bool:
    return outcome in CRASH_OUTCOMES or outcome == INFEASIBLE
