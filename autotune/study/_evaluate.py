"""The evaluator seam of the study loop: what turns a proposed configuration into a trial record.

The loop (:class:`~autotune.study._runner.StudyRunner`) chooses the sampler, queues the first
trials, asks for a configuration, refuses it before launch when it is known not to start
(:func:`refusal`), learns from crashes, and records the result in the study's storage. Only the
step in between, *running* the configuration, is behind :class:`TrialEvaluator`:

* :class:`ServerEvaluator` (``autotune study start``): launch the server, follow its log to ready
  or to the crash line, benchmark it over HTTP, stop it
  (:class:`~autotune.study._trial.ServerEvaluator`);
* the search benchmark's oracle (``autotune bench search``,
  :class:`autotune.searchbench.OracleEvaluator`): the simulator's model, in process, charging the
  GPU time the trial would have cost.

So the benchmark measures the tuner users run, as httpx's transports let one client run against
a real server or an application in process.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._knobs import ServerConfig
from autotune.engines import Infeasible
from autotune.study._feasibility import Feasibility
from autotune.study._record import Outcome, TrialRecord

if TYPE_CHECKING:
    from autotune.bench import BenchmarkResult


@dataclass
class TrialFiles:
    """Files a trial leaves behind, uploaded as artifacts."""

    folder: Path
    server_log: Path | None = None
    results: Path | None = None

    def existing(self) -> list[Path]:
        return [p for p in (self.server_log, self.results) if p is not None and p.exists()]


@dataclass
class TrialHooks:
    """Callbacks of a running trial: the process record, phase changes, early stop."""

    #: Just before the launch: the server's pending record (its launch token, no pid yet), so
    #: that a tuner killed before ``on_launch`` still leaves a record that finds the server.
    before_launch: Callable[[dict[str, Any]], None] = lambda identity: None
    on_launch: Callable[[dict[str, Any]], None] = lambda identity: None
    #: Around the launch and ``on_launch``: holds Ctrl-C back until the server is recorded.
    launching: Callable[[], AbstractContextManager[None]] = nullcontext
    on_phase: Callable[[str], None] = lambda phase: None
    early_stop: Callable[[Sequence[BenchmarkResult]], bool] | None = None
    #: With a load mix: the early stop of the repeats at one load point (by its label).
    early_stop_at: Callable[[str], Callable[[Sequence[BenchmarkResult]], bool] | None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: Asked by the waits: True ends the trial (its server stopped) with :class:`Cancelled`.
    cancelled: Callable[[], bool] = lambda: False
    #: Asked while the server is being stopped: True sends SIGKILL without waiting for TERM.
    urgent: Callable[[], bool] = lambda: False


@dataclass(frozen=True)
class TrialContext:
    """What an evaluator is told about the trial it runs."""

    number: int
    #: ``baseline``, ``enqueued``, ``informed``, ``search`` or ``rerun``.
    role: str
    #: The searched knobs (None for the baseline, which is outside the space).
    params: Mapping[str, Any] | None
    #: Where the trial's files go (server log, raw results), uploaded as artifacts.
    files: TrialFiles
    #: The loop's callbacks: process record, phases, early stop, cancellation.
    hooks: TrialHooks


class TrialEvaluator(abc.ABC):
    """Runs one configuration the loop judged runnable; returns what the trial found out.

    The record's ``outcome`` is ``ok`` (with ``value``, the objective) or what stopped the
    server (a crash category, ``timeout``); the loop writes it to the study, its state follows
    (COMPLETE when measured, else PRUNED) and the lessons of crashes come from it. Raising
    :class:`~autotune._errors.Cancelled` (or ``KeyboardInterrupt``) records the trial as
    interrupted, to run again on resume.
    """

    @abc.abstractmethod
    def evaluate(self, config: ServerConfig, context: TrialContext) -> TrialRecord:
        """Run ``config`` as trial ``context.number``."""

    def gpu_seconds(self, record: TrialRecord, wall_s: float, gpus: int) -> float:
        """The GPU seconds a run cost: the ``wall_s`` it took to evaluate, ``gpus`` held."""
        return wall_s * gpus


def refusal(
    feasibility: Feasibility,
    config: ServerConfig,
    params: Mapping[str, Any] | None,
    *,
    role: str,
) -> TrialRecord | None:
    """The record of a trial refused before launch, or None when it may run.

    The baseline is never refused (it is the reference every speed-up is measured against);
    any other configuration is judged by ``feasibility`` (SGLang's rules, the engine release,
    known incompatibilities, the memory estimate, lessons of earlier crashes).
    """
    verdict = None if role == "baseline" else feasibility.check(config, params)
    if verdict is None:
        return None
    return TrialRecord(
        outcome=Outcome.INFEASIBLE,
        role=role,
        failure_line=verdict.reason,
        advice=f"refused before launch ({verdict.category})",
        extra={"refused_as": verdict.category},
    )


class RulesOnly(Feasibility):
    """Judges by SGLang's rules and the engine release alone: nothing known or learned.

    The loop without its own refusals (the search benchmark's ``no-refusal`` ablation and the
    strategies that stand for Optuna or SGLang as they come): what SGLang itself would refuse at
    start-up is still refused.
    """

    def known(self, config: ServerConfig) -> Infeasible | None:
        return None

    def learned(
        self, config: ServerConfig, params: Mapping[str, Any] | None = None
    ) -> Infeasible | None:
        return None
