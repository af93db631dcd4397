"""The report of a study: the best configuration against the baseline, and what crashed.

The best is the best measured trial within the space's limits (``objective.constraints``); the
report says how many measured trials broke each limit. A multi-objective study's report lists
its Pareto front: the measured trials within the limits that no other such trial dominates (at
least as good in every objective and better in one), each with its figures; its best is the
front's best by the first objective.

Read-only: it opens the storage without heartbeats and never changes a study, so it is safe to
run while a study is running (and against a study another machine is running).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._errors import StorageError
from autotune._redact import redact_text, redact_url
from autotune.report._loads import (
    LoadReport,
    Planner,
    Refusal,
    Schedule,
    build_load_report,
    format_loads,
)
from autotune.study._record import (
    STUDY_CONFIRMATION,
    STUDY_LOADS,
    STUDY_METRIC,
    STUDY_REFUSED,
    STUDY_TARGET,
    Outcome,
    TrialRecord,
    outcome_of,
    within_limits,
)
from autotune.study._storage import StudyPaths, open_for_reading, storage_faults, study_paths
from autotune.study._verdict import Verdict

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class TrialRow:
    """One finished trial as the report shows it."""

    number: int
    role: str
    #: ``ok``, a crash category, ``timeout``, ``infeasible`` (a ``str`` enum: prints its value).
    outcome: Outcome
    value: float | None
    speedup: float | None
    startup_s: float | None
    config: dict[str, Any]
    accept_length: float | None = None
    #: Within the study's constraints (a server that did not start violates ``starts``).
    feasible: bool = True
    failure_line: str | None = None
    advice: str | None = None
    #: Every objective's value (a multi-objective study; else the one value).
    values: tuple[float, ...] = ()
    #: The limits of the space this measured trial broke (as the space describes them).
    violated: tuple[str, ...] = ()

    @property
    def measured(self) -> bool:
        return self.outcome is Outcome.OK and self.value is not None


#: The figures the report sets side by side for the choice and the baseline: throughput and
#: acceptance, then bench_serving's latencies (median and p99), by their trial-record names.
COMPARED_FIGURES: tuple[str, ...] = (
    "output_tok_s",
    "accept_length",
    "accept_rate",
    *(
        f"{family}_{stat}_ms"
        for family in ("ttft", "tpot", "itl", "e2e")
        for stat in ("median", "p99")
    ),
)


@dataclass(frozen=True)
class Comparison:
    """The chosen configuration's figures beside the baseline's, from their search runs."""

    #: ``confirmed choice``, ``confirmed leader (not chosen)``, or not confirmed ``best`` or
    #: ``best speculative`` (the baseline measured best).
    what: str
    trial: int
    baseline_trial: int
    #: Each of :data:`COMPARED_FIGURES`: ``{"choice": ..., "baseline": ...}`` (None: not
    #: measured).
    figures: dict[str, dict[str, float | None]]

    def lines(self) -> list[str]:
        head = (
            f"{self.what} (trial {self.trial}) against the baseline (trial {self.baseline_trial})"
        )
        out = [
            f"{head}, search runs:",
            f"    {'':<16}{f'trial {self.trial}':>12}{'baseline':>12}{'ratio':>9}",
        ]
        for name, pair in self.figures.items():
            mine, base = pair["choice"], pair["baseline"]
            if mine is None and base is None:
                continue
            ratio = f"x{mine / base:.2f}" if mine is not None and base else ""
            out.append(f"    {name:<16}{_figure(mine):>12}{_figure(base):>12}{ratio:>9}")
        return out


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


@dataclass(frozen=True)
class StudyReport:
    """Everything ``autotune study report`` prints."""

    study_name: str
    storage_url: str
    metric: str
    direction: str
    target: int | None
    finished: int
    running: int
    #: Interrupted trials (FAIL): they run again on ``autotune study resume``.
    failed: int
    baseline_value: float | None
    best: TrialRow | None
    best_command: str | None
    best_sglang_command: str | None
    #: Finished trials by outcome.
    outcomes: dict[Outcome, int]
    #: Proposals the tuner replaced before asking for a trial, by the failure they would meet.
    refused_before_launch: dict[str, int]
    rows: list[TrialRow] = field(default_factory=list)
    #: Every objective's metric and direction (one for a single-objective study).
    metrics: list[str] = field(default_factory=list)
    directions: list[str] = field(default_factory=list)
    #: Measured trials over each limit of the space, by the limit's description.
    violations: dict[str, int] = field(default_factory=dict)
    #: A multi-objective study's Pareto front (feasible, not dominated), by the first objective.
    pareto_front: list[TrialRow] = field(default_factory=list)
    #: With a load mix: the winners per load, the curve, where speculation stops paying.
    loads: LoadReport | None = None
    #: The confirmation's verdict (None: the study was not confirmed); when there is one,
    #: ``best`` is its choice (the baseline when speculation does not pay).
    verdict: Verdict | None = None
    #: The choice's (or the best's) throughput, acceptance and latency beside the baseline's;
    #: None where the baseline or a speculative choice was not measured.
    comparison: Comparison | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["verdict"] = None if self.verdict is None else self.verdict.to_dict()
        return out

    def top(self, n: int = 10) -> list[TrialRow]:
        """The ``n`` best measured trials within the constraints, best first (ties: earliest)."""
        measured = [r for r in self.rows if r.measured and r.feasible]
        ranked = sorted(
            measured, key=lambda r: float(r.value or 0.0), reverse=self.direction == "maximize"
        )
        return ranked[:n]

    def front(self) -> list[TrialRow]:
        """The measured trials within the limits that no other one dominates, best first by the
        first objective (ties: earliest)."""
        signs = [1.0 if d == "maximize" else -1.0 for d in self.directions]
        points = [r for r in self.rows if r.measured and r.feasible and r.values]

        def dominates(a: TrialRow, b: TrialRow) -> bool:
            pairs = [(s * x, s * y) for s, x, y in zip(signs, a.values, b.values, strict=True)]
            return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)

        front = [r for r in points if not any(dominates(o, r) for o in points if o is not r)]
        return sorted(front, key=lambda r: -signs[0] * r.values[0])

    def crashes(self) -> dict[Outcome, int]:
        """Finished trials that were not measured, by outcome (a crash category, a time-out, or
        ``infeasible``: refused before launch)."""
        return {k: v for k, v in sorted(self.outcomes.items()) if k is not Outcome.OK}


def load_study(
    name: str, *, storage: str | None = None, studies_dir: str | Path = "studies"
) -> tuple[optuna.Study, StudyPaths]:
    """Open an existing study for reading."""
    import optuna

    paths = study_paths(name, storage=storage, studies_dir=studies_dir)
    if paths.sqlite_file is not None and not paths.sqlite_file.exists():
        raise StorageError(
            f"no study database {str(paths.sqlite_file)!r}",
            hint="list studies with `autotune study list`, or pass --storage/--studies-dir",
        )
    rdb = open_for_reading(paths)  # (read-only where it cannot be written; damage: a message)
    with storage_faults(paths):
        names = {s.study_name for s in rdb.get_all_studies()}
    if name not in names:
        raise StorageError(
            f"no study named {name!r} in {redact_url(paths.storage_url)}",
            hint="studies there: " + (", ".join(sorted(names)) or "none"),
        )
    return optuna.load_study(study_name=name, storage=rdb), paths


def build_report(study: optuna.Study, paths: StudyPaths, *, schedule: bool = True) -> StudyReport:
    """What a study found: its best configuration against the baseline, and what failed.

    With a load mix, also what it found at each load (:mod:`autotune.report._loads`);
    ``schedule`` asks the study's engine for the launch that follows the per-load winners."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    records = {t.number: TrialRecord.from_trial(t) for t in finished}
    rows = [_row(t, records[t.number]) for t in finished]
    baseline = next((r.value for r in rows if r.role == "baseline" and r.measured), None)
    directions = [d.name.lower() for d in study.directions]
    maximize = directions[0] == "maximize"
    metric = str(study.user_attrs.get(STUDY_METRIC, "objective"))
    names = study.metric_names or [metric] + [f"objective {i}" for i in range(1, len(directions))]
    violations: Counter[str] = Counter()
    for t in finished:
        for name, value in (t.constraints or {}).items():
            if name != "starts" and value > 0 and outcome_of(t.user_attrs) is Outcome.OK:
                violations[name] += 1
    target = study.user_attrs.get(STUDY_TARGET)
    report = StudyReport(
        study_name=study.study_name,
        storage_url=redact_url(paths.storage_url),
        metric=metric,
        direction="maximize" if maximize else "minimize",
        target=target if isinstance(target, int) else None,
        finished=len(finished),
        running=sum(t.state == TrialState.RUNNING for t in trials),
        failed=sum(
            t.state == TrialState.FAIL and outcome_of(t.user_attrs) is not Outcome.SURPLUS
            for t in trials
        ),
        baseline_value=baseline,
        best=None,
        best_command=None,
        best_sglang_command=None,
        outcomes=dict(Counter(r.outcome for r in rows)),
        refused_before_launch=dict(study.user_attrs.get(STUDY_REFUSED) or {}),
        rows=rows,
        metrics=list(names),
        directions=directions,
        violations={**dict.fromkeys(_limits(study), 0), **violations},
        loads=_load_report(study, rows, records, maximize, schedule=schedule),
        verdict=recorded_verdict(study),
    )
    if len(directions) > 1:
        report = replace(report, pareto_front=report.front())
    report = replace(report, comparison=_comparison(report, records))
    best = _confirmed_choice(report)
    if best is None:
        top = report.top(1)
        if not top:
            return report
        best = top[0]
    record = records[best.number]
    command = _text(record.command)
    return replace(
        report,
        best=best,
        best_command=command,
        best_sglang_command=_text(record.sglang_command) or command,
    )


def _limits(study: optuna.Study) -> list[str]:
    """The names of the space's limits, as the trials record them (``starts`` left out)."""
    names: dict[str, None] = {}
    for t in study.get_trials(deepcopy=False):
        for name in t.constraints or {}:
            if name != "starts":
                names[name] = None
    return list(names)


def _load_report(
    study: optuna.Study,
    rows: list[TrialRow],
    records: dict[int, TrialRecord],
    maximize: bool,
    *,
    schedule: bool,
) -> LoadReport | None:
    points = study.user_attrs.get(STUDY_LOADS)
    if not isinstance(points, list) or not points:
        return None
    entries = [(r.number, r.role, r.value, records[r.number], r.feasible) for r in rows]
    refusal, planner = _engine_planner(study) if schedule else (None, None)
    verdict = recorded_verdict(study)
    confirmed = ratios = None
    if verdict is not None and verdict.loads:
        # a candidate below the baseline at a point: no speculation wins there
        confirmed = {c.label: (c.trial if c.ratio >= 1.0 else None) for c in verdict.loads}
        # each point's confirmed figures, for a launch that cannot follow the winner there;
        # a candidate dropped as unstable or over a limit is no choice
        judged = [
            a
            for a in verdict.arms
            if a.trial is not None and (a.dropped is None or a.dropped.startswith("behind "))
        ]
        ratios = {
            c.label: {None: 1.0, **{a.trial: a.at_loads[c.label] for a in judged
                                    if c.label in a.at_loads}}
            for c in verdict.loads
        }  # fmt: skip
    return build_load_report(
        [p for p in points if isinstance(p, dict) and "label" in p and "weight" in p],
        entries,
        metric=str(study.user_attrs.get(STUDY_METRIC, "objective")),
        maximize=maximize,
        refusal=refusal,
        planner=planner,
        confirmed=confirmed,
        confirmed_ratios=ratios,
    )


def _engine_planner(study: optuna.Study) -> tuple[Refusal, Planner]:
    """The study's engine, asked whether a configuration can be one load's choice of a single
    server and for that server's launch; a space that cannot be read says so instead."""
    from autotune._errors import AutotuneError
    from autotune._knobs import ServerConfig
    from autotune.engines import create_engine
    from autotune.study._setup import load_study_space

    try:
        space = load_study_space(study, None)
        engine = create_engine(space.engine)
    except AutotuneError as e:
        why = f"the study's space cannot be read here ({e.message})"
        return (lambda knobs: why), (lambda choices, base: Schedule(reason=why))

    def config_of(knobs: Mapping[str, Any] | None) -> ServerConfig:
        return space.baseline_config() if knobs is None else space.config_for(knobs)

    def refusal(knobs: Mapping[str, Any] | None) -> str | None:
        try:
            return engine.schedule_refusal(config_of(knobs))
        except AutotuneError as e:
            return e.message

    def planner(
        choices: Sequence[tuple[int, Mapping[str, Any] | None]], base: Mapping[str, Any]
    ) -> Schedule:
        try:
            plan = engine.load_schedule(
                [(size, config_of(knobs)) for size, knobs in choices], config_of(base)
            )
        except AutotuneError as e:
            return Schedule(reason=e.message)
        return Schedule(
            command=plan.command, files=dict(plan.files), note=plan.note, reason=plan.reason
        )

    return refusal, planner


def recorded_verdict(study: optuna.Study) -> Verdict | None:
    """The verdict of the study's last finished confirmation, if it has one."""
    state = study.user_attrs.get(STUDY_CONFIRMATION)
    if not isinstance(state, dict) or not isinstance(state.get("verdict"), dict):
        return None
    return Verdict.from_dict(state["verdict"])


def _confirmed_choice(report: StudyReport) -> TrialRow | None:
    """The row the verdict chose: its trial, or the baseline when speculation does not pay."""
    verdict = report.verdict
    if verdict is None or verdict.kind == "none":
        return None
    if verdict.choice is None:
        return next((r for r in report.rows if r.role == "baseline" and r.measured), None)
    return next((r for r in report.rows if r.number == verdict.choice), None)


def _comparison(report: StudyReport, records: Mapping[int, TrialRecord]) -> Comparison | None:
    """The figures of the verdict's choice (where speculation does not pay: its leader) or, not
    confirmed, of the best, beside the baseline's."""
    baseline = next((r for r in report.rows if r.role == "baseline" and r.measured), None)
    verdict = report.verdict
    if verdict is not None and verdict.kind != "none":
        what = "confirmed choice" if verdict.choice is not None else "confirmed leader (not chosen)"
        number = (
            verdict.choice
            if verdict.choice is not None
            else (verdict.leader.trial if verdict.leader is not None else None)
        )
    else:
        top = report.top(len(report.rows))
        speculative = [r for r in top if r.role != "baseline"]
        what = "best" if top and top[0].role != "baseline" else "best speculative"
        number = speculative[0].number if speculative else None
    if baseline is None or number is None or number == baseline.number or number not in records:
        return None
    mine, base = records[number], records[baseline.number]
    return Comparison(
        what=what,
        trial=number,
        baseline_trial=baseline.number,
        figures={
            name: {"choice": mine.metric(name), "baseline": base.metric(name)}
            for name in COMPARED_FIGURES
        },
    )


def _text(value: str | None) -> str | None:
    """A recorded text, with any secret in it redacted (studies recorded before redaction)."""
    return redact_text(value) if value else None


def _row(trial: optuna.trial.FrozenTrial, record: TrialRecord) -> TrialRow:
    return TrialRow(
        number=trial.number,
        role=record.role,
        outcome=record.outcome,
        value=record.value,
        speedup=record.speedup,
        startup_s=record.startup_s,
        config=dict(record.config if record.config is not None else trial.params),
        accept_length=record.accept_length,
        feasible=within_limits(trial),
        failure_line=_text(record.failure_line),
        advice=_text(record.advice),
        values=tuple(trial.values or ()) if record.measured else (),
        violated=tuple(
            name
            for name, value in (trial.constraints or {}).items()
            if name != "starts" and value > 0 and record.measured
        ),
    )


def format_report(report: StudyReport) -> str:
    """The report as text for a terminal: the verdict first."""
    verdict = report.verdict
    if verdict is not None:
        head = [verdict.headline]
    elif report.best is not None:
        head = [
            "not confirmed: the best of single measurements below; for a verdict with "
            f"confidence run `autotune study confirm --study-name {report.study_name}`"
        ]
    else:
        head = []
    lines = [
        *head,
        f"study {report.study_name}  ({report.storage_url})",
        f"trials: {report.finished} finished"
        + (f" of {report.target}" if report.target else "")
        + (f", {report.running} running" if report.running else "")
        + (f", {report.failed} interrupted" if report.failed else ""),
    ]
    if report.baseline_value is not None:
        lines.append(f"baseline (no speculation): {report.baseline_value:.2f} {report.metric}")
    else:
        lines.append("baseline: not measured")
    best = report.best
    if best is None:
        lines.append("best: no configuration was measured yet")
    else:
        speed = f"  x{best.speedup:.2f} over the baseline" if best.speedup is not None else ""
        what = "confirmed choice" if verdict is not None and verdict.kind != "none" else "best"
        lines.append(
            f"{what}: trial {best.number} ({best.role}): {best.value:.2f} {report.metric}{speed}"
            + (" in its search run" if what != "best" else "")
        )
        for key, value in best.config.items():
            lines.append(f"    {key} = {value}")
        if best.role == "baseline" and verdict is None:
            lines.append("    no speculative configuration beat the baseline")
        if report.best_sglang_command:
            lines.append("launch it with:")
            lines.append(f"    {report.best_sglang_command}")
    if report.violations:
        lines.append(
            "measured over a limit (left out of the best): "
            + ", ".join(
                f"{name}: {n} trial{'s' if n != 1 else ''}" for name, n in report.violations.items()
            )
        )
    if len(report.directions) > 1:
        lines += _front_lines(report)
    if report.comparison is not None:
        lines += report.comparison.lines()
    if verdict is not None:
        lines += verdict.lines()[1:]
    if report.loads is not None:
        lines += format_loads(report.loads)
    lines.append("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(report.outcomes.items())))
    if report.refused_before_launch:
        lines.append(
            "proposals refused before launch (no GPU time spent): "
            + ", ".join(f"{k} {v}" for k, v in sorted(report.refused_before_launch.items()))
        )
    return "\n".join(lines)


def _front_lines(report: StudyReport) -> list[str]:
    objectives = ", ".join(
        f"{d} {m}" for m, d in zip(report.metrics, report.directions, strict=False)
    )
    lines = [f"Pareto front ({objectives}): {len(report.pareto_front)} trials"]
    for row in report.pareto_front:
        figures = ", ".join(
            f"{m} {v:.2f}" for m, v in zip(report.metrics, row.values, strict=False)
        )
        knobs = " ".join(f"{k}={v}" for k, v in row.config.items() if k != "speculative_algorithm")
        lines.append(f"    trial {row.number} ({row.role}): {figures}  {knobs}")
    return lines
