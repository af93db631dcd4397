"""The load mix of a study's report: who wins at each load, and where speculation stops paying.

Every trial of a study with ``objective.loads`` was measured at each load point; its record holds
the figure at each (:attr:`TrialRecord.loads`). From them:

* the winner per load point: the best measured trial at that point (the baseline included), its
  figure and its speed-up over the baseline's figure at that point; in a confirmed study, the
  candidate the confirmation found best there (the baseline where none beats it);
* the throughput-vs-load table of the baseline and the best few configurations (by the weighted
  objective), each figure with its speed-up over the baseline at that load;
* the load at which the best speculative configuration falls below the baseline (speculation
  stops paying there), or that it never does;
* where the engine can run a per-load choice as one server (SGLang's adaptive speculation), the
  launch that follows the winners; where a winner cannot be part of it, the best at that load
  that can (in a confirmed study, by the confirmation's figures there, the baseline among
  them); otherwise why the release cannot express it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.study._record import TrialRecord

#: How many configurations besides the baseline the throughput-vs-load table shows.
CURVE_CONFIGS = 3


@dataclass(frozen=True)
class LoadWinner:
    """The best measured trial at one load point."""

    label: str
    weight: float
    trial: int
    role: str
    value: float
    baseline: float | None
    speedup: float | None
    config: dict[str, Any]
    #: Chosen on the confirmation's re-measurements rather than on the search's figure.
    confirmed: bool = False


@dataclass(frozen=True)
class CurveRow:
    """One configuration's figure (and speed-up over the baseline) at every load point."""

    trial: int
    role: str
    value: float | None
    figures: dict[str, float | None]
    speedups: dict[str, float | None]


@dataclass(frozen=True)
class Schedule:
    """The launch that follows the per-load winners, or why there is none."""

    command: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    note: str | None = None
    reason: str | None = None
    #: Per load point: the trial the launch follows there (the winner or the best that fits).
    follows: dict[str, int] = field(default_factory=dict)
    #: Load points whose winner the launch cannot run, with why and what it runs instead.
    substitutes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadReport:
    """What a study found across its load mix (see the module docstring)."""

    metric: str
    points: tuple[dict[str, Any], ...]
    winners: tuple[LoadWinner, ...]
    curve: tuple[CurveRow, ...]
    #: The best speculative configuration (by the weighted objective) and the first load,
    #: in increasing load, at which it falls below the baseline (None: it never does).
    best_speculative: int | None
    stops_paying_at: str | None
    schedule: Schedule | None


#: (trial number, role, weighted value, record, feasible) of a finished trial.
Entry = tuple[int, str, float | None, TrialRecord, bool]
#: Asked for the launch: the chosen configuration (knobs) by concurrency, the server-wide one.
Planner = Callable[[Sequence[tuple[int, Mapping[str, Any] | None]], Mapping[str, Any]], Schedule]
#: Why the engine cannot run a trial's knobs (None: it can; ``None`` knobs: the baseline).
Refusal = Callable[[Mapping[str, Any] | None], str | None]


def build_load_report(
    points: Sequence[Mapping[str, Any]],
    entries: Sequence[Entry],
    *,
    metric: str,
    maximize: bool,
    refusal: Refusal | None = None,
    planner: Planner | None = None,
    confirmed: Mapping[str, int | None] | None = None,
    confirmed_ratios: Mapping[str, Mapping[int | None, float]] | None = None,
) -> LoadReport:
    """The load report of a study's load ``points`` (``label``, ``weight``, ``concurrency``,
    ``request_rate``) from its finished trials; ``refusal`` and ``planner`` come from the
    engine (None: no launch is proposed); ``confirmed``: the confirmation's winner at each load
    point, by label (a trial number; None: the baseline); ``confirmed_ratios``: at each load
    point, the confirmed ratio to the baseline of each candidate (None: the baseline, 1)."""
    ordered = sorted(points, key=_load_order)
    measured = [e for e in entries if e[3].measured and e[4] and e[3].loads]
    baseline = next((e for e in measured if e[1] == "baseline"), None)

    def better(a: float, b: float) -> bool:
        return a > b if maximize else a < b

    def best_at(label: str, pool: Sequence[Entry]) -> Entry | None:
        found: Entry | None = None
        for e in pool:
            v = e[3].at_load(label)
            if v is not None and (found is None or better(v, found[3].at_load(label) or 0.0)):
                found = e
        return found

    def speedup(value: float | None, label: str) -> float | None:
        base = None if baseline is None else baseline[3].at_load(label)
        if value is None or not base:
            return None
        return value / base if maximize else base / value

    def confirmed_at(label: str) -> Entry | None:
        if confirmed is None or label not in confirmed:
            return None
        trial = confirmed[label]
        if trial is None:
            return baseline
        return next((e for e in measured if e[0] == trial), None)

    winners = []
    for p in ordered:
        label = str(p["label"])
        chosen = confirmed_at(label)
        e = chosen or best_at(label, measured)
        if e is None:
            continue
        value = float(e[3].at_load(label) or 0.0)
        winners.append(
            LoadWinner(
                label,
                float(p["weight"]),
                e[0],
                e[1],
                value,
                None if baseline is None else baseline[3].at_load(label),
                speedup(value, label),
                dict(e[3].config or {}),
                chosen is not None,
            )
        )
    ranked = sorted(
        (e for e in measured if e[1] != "baseline" and e[2] is not None),
        key=lambda e: float(e[2] or 0.0),
        reverse=maximize,
    )
    shown = ([baseline] if baseline is not None else []) + ranked[:CURVE_CONFIGS]
    labels = [str(p["label"]) for p in ordered]
    curve = tuple(
        CurveRow(
            e[0],
            e[1],
            e[2],
            {k: e[3].at_load(k) for k in labels},
            {k: speedup(e[3].at_load(k), k) for k in labels},
        )
        for e in shown
    )
    top = ranked[0] if ranked else None
    stops = None
    if top is not None and baseline is not None:
        stops = next(
            (k for k in labels if (s := speedup(top[3].at_load(k), k)) is not None and s < 1.0),
            None,
        )
    schedule = None
    if refusal is not None and planner is not None and winners:
        schedule = _schedule(
            ordered, winners, measured, best_at, refusal, planner, confirmed_ratios or {}
        )
    return LoadReport(
        metric,
        tuple(dict(p) for p in ordered),
        tuple(winners),
        curve,
        None if top is None else top[0],
        stops,
        schedule,
    )


def _schedule(
    points: Sequence[Mapping[str, Any]],
    winners: Sequence[LoadWinner],
    measured: Sequence[Entry],
    best_at: Callable[[str, Sequence[Entry]], Entry | None],
    refusal: Refusal,
    planner: Planner,
    ratios: Mapping[str, Mapping[int | None, float]],
) -> Schedule:
    """The per-load launch: each concurrency's winner, or the best there it can run (by the
    confirmed ``ratios`` at that point where they name one, else by the search's figures)."""
    rates = [str(p["label"]) for p in points if p.get("request_rate") is not None]
    if rates:
        return Schedule(
            reason=f"load point {rates[0]} is a request rate: a per-load launch chooses by the "
            "number of running requests, which a request rate does not fix"
        )
    by_label = {w.label: w for w in winners}
    weights = {str(p["label"]): float(p["weight"]) for p in points}

    def knobs(e: Entry) -> Mapping[str, Any] | None:
        return None if e[1] == "baseline" else dict(e[3].config or {})

    fits = [e for e in measured if refusal(knobs(e)) is None]
    choices: list[tuple[int, Mapping[str, Any] | None]] = []
    follows: dict[str, int] = {}
    substitutes: dict[str, str] = {}
    chosen: dict[str, Entry] = {}
    for p in points:
        label = str(p["label"])
        winner = next(e for e in measured if e[0] == by_label[label].trial)
        pick = winner
        why = refusal(knobs(winner))
        if why is not None:
            found, share, how = _confirmed_fit(label, winner, measured, fits, ratios)
            if found is None:
                found = best_at(label, fits)
                if found is None:
                    return Schedule(reason=f"the winner at {label} (trial {winner[0]}): {why}")
                share = (found[3].at_load(label) or 0.0) / by_label[label].value
                how = "of its figure"
            pick = found
            substitutes[label] = (
                f"the winner, trial {winner[0]}, cannot be followed ({why}); trial {found[0]} "
                f"instead, {share:.1%} {how}"
            )
        chosen[label] = pick
        follows[label] = pick[0]
        choices.append((int(p["concurrency"]), knobs(pick)))
    speculative = [k for k, e in chosen.items() if e[1] != "baseline"]
    if not speculative:
        return Schedule(
            reason="no speculative configuration wins at any load: launch without speculation",
            follows=follows,
            substitutes=substitutes,
        )
    if len({chosen[k][0] for k in chosen}) == 1:
        return Schedule(
            reason=f"trial {chosen[speculative[0]][0]} wins at every load: launch it as it is",
            follows=follows,
            substitutes=substitutes,
        )
    heaviest = max(speculative, key=lambda k: weights[k])
    plan = planner(choices, dict(chosen[heaviest][3].config or {}))
    return Schedule(
        command=plan.command,
        files=dict(plan.files),
        note=plan.note,
        reason=plan.reason,
        follows=follows,
        substitutes=substitutes,
    )


def _confirmed_fit(
    label: str,
    winner: Entry,
    measured: Sequence[Entry],
    fits: Sequence[Entry],
    ratios: Mapping[str, Mapping[int | None, float]],
) -> tuple[Entry | None, float, str]:
    """The best at ``label`` by the confirmation's figures there among the trials the launch
    can run (``fits``), its share of the winner's confirmed figure, and how that share reads;
    ``None`` when the confirmation judged none of them there."""
    at = ratios.get(label) or {}
    mine = at.get(None if winner[1] == "baseline" else winner[0])
    if not mine:
        return None, 0.0, ""
    best: tuple[float, Entry] | None = None
    for e in fits:
        ratio = at.get(None if e[1] == "baseline" else e[0])
        if ratio is not None and e in measured and (best is None or ratio > best[0]):
            best = (ratio, e)
    if best is None:
        return None, 0.0, ""
    return best[1], best[0] / mine, "of its confirmed figure there"


def _load_order(point: Mapping[str, Any]) -> tuple[int, float]:
    """Concurrencies first, lowest first; then request rates, lowest first."""
    rate = point.get("request_rate")
    if rate is None:
        return 0, float(point.get("concurrency") or 0)
    return 1, float(rate)


def format_loads(report: LoadReport) -> list[str]:
    """The load part of ``autotune study report``, as lines of text."""
    mix = ", ".join(f"{p['label']} {float(p['weight']):g}" for p in report.points)
    lines = [f"load mix: {mix} (weight: share of time at that load)", "winner per load:"]
    if any(w.confirmed for w in report.winners):
        lines[-1] = "winner per load (confirmed: chosen on the confirmation's re-measurements):"
    for w in report.winners:
        speed = "" if w.speedup is None else f"  x{w.speedup:.2f} over the baseline"
        base = "" if w.baseline is None else f" ({w.baseline:.2f})"
        knobs = " ".join(
            f"{k}={v}" for k, v in w.config.items() if k not in ("speculative_algorithm", "tp_size")
        )
        mark = ", confirmed" if w.confirmed else ""
        lines.append(
            f"    {w.label:<8} trial {w.trial} ({w.role}{mark}): {w.value:.2f} {report.metric}"
            f"{speed}{base}  {knobs}".rstrip()
        )
    labels = [str(p["label"]) for p in report.points]
    header = ["trial", "role", "weighted", *labels]
    rows = [header]
    for r in report.curve:
        cells = [str(r.trial), r.role, "" if r.value is None else f"{r.value:.2f}"]
        for k in labels:
            v, s = r.figures.get(k), r.speedups.get(k)
            text = "" if v is None else f"{v:.2f}"
            if s is not None and r.role != "baseline":
                text += f" x{s:.2f}"
            cells.append(text)
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines.append(f"{report.metric} by load (x: speed-up over the baseline at that load):")
    for row in rows:
        lines.append("    " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    if report.best_speculative is not None and any(r.role == "baseline" for r in report.curve):
        if report.stops_paying_at is None:
            lines.append(
                f"speculation pays at every load: the best speculative configuration (trial "
                f"{report.best_speculative}) beats the baseline at each"
            )
        else:
            lines.append(
                f"speculation stops paying at {report.stops_paying_at}: the best speculative "
                f"configuration (trial {report.best_speculative}) falls below the baseline there"
            )
    lines += _format_schedule(report.schedule)
    return [line.rstrip() for line in lines]


def _format_schedule(schedule: Schedule | None) -> list[str]:
    if schedule is None:
        return []
    lines = []
    if schedule.follows:
        lines.append(
            "per-load launch follows: "
            + ", ".join(f"{k} trial {v}" for k, v in schedule.follows.items())
        )
    for label, text in schedule.substitutes.items():
        lines.append(f"    at {label}: {text}")
    if schedule.command is None:
        lines.append(f"per-load launch: not expressible: {schedule.reason}")
        return lines
    lines.append("per-load launch (one server, speculative steps by running batch size):")
    lines.append(f"    {schedule.command}")
    for name, text in schedule.files.items():
        lines.append(f"    with {name}: {text}")
    if schedule.note:
        lines.append(f"    ({schedule.note})")
    return lines
