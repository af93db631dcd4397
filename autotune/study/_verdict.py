"""The verdict of a confirmed study: does speculation pay here, with what, by how much.

Built by :mod:`autotune.study._confirm` from the interleaved re-measurements, stored with the
study (``autotune:confirmation``) and read back by the report, whose first line it is:

* ``pays``: the leader's interval over the baseline lies above 1, e.g.
  ``EAGLE-3 pays: x1.04 [1.02, 1.06] over no speculation with speculative_num_steps=2, ...``;
* ``noise``: the leader's interval holds 1: ``no configuration beats no speculation beyond noise
  (best x1.01 [0.995, 1.03] ...)``, so run without speculation;
* ``costs``: even the leader is slower than no speculation, beyond noise;
* ``none``: nothing could be confirmed (no speculative configuration was measured, or the
  baseline did not start during the confirmation).

The figures are printed by :func:`ratio_interval`, with three decimals where a bound lies within
1% of 1, so the digits that decide the verdict are always shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.space import ConfirmSpec

KINDS = ("pays", "noise", "costs", "none")
_NAMES = {"EAGLE3": "EAGLE-3", "EAGLE": "EAGLE-2", "NEXTN": "NextN (MTP)"}


@dataclass(frozen=True)
class ArmFigure:
    """One candidate's confirmed figure: its ratio to the baseline with the interval."""

    key: str
    trial: int | None
    config: Mapping[str, Any]
    #: The single measurement of the search that made it a candidate.
    searched: float | None
    ratio: float | None
    low: float | None
    high: float | None
    #: Confirmation starts of this configuration, and how many did not give a figure.
    runs: int
    failed: int = 0
    #: Why it stopped being measured (worse than the leader, unstable), or None.
    dropped: str | None = None
    #: With a load mix: why it is out of the running by the objective (behind its leader)
    #: while it is still measured for the load points it may win (:attr:`contends`).
    behind: str | None = None
    #: With a load mix: the load points at which it may still be the best.
    contends: tuple[str, ...] = ()
    #: With a load mix: its ratio to the baseline at each load point, by label.
    at_loads: Mapping[str, float] = field(default_factory=dict)

    def with_dropped(self, why: str) -> ArmFigure:
        return dataclasses.replace(self, dropped=why)

    @property
    def running(self) -> bool:
        """Still in the running for the verdict's choice (measured, and not behind)."""
        return self.dropped is None and self.behind is None and self.ratio is not None

    def interval(self) -> str:
        if self.ratio is None or self.low is None or self.high is None:
            return "x? (fewer than two paired rounds)"
        return ratio_interval(self.ratio, self.low, self.high, digits=3)

    def to_dict(self) -> dict[str, Any]:
        out = {**dataclasses.asdict(self), "config": dict(self.config)}
        out["contends"] = list(self.contends)
        out["at_loads"] = dict(self.at_loads)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArmFigure:
        names = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in data.items() if k in names}
        given["contends"] = tuple(str(x) for x in given.get("contends") or ())
        raw = given.get("at_loads")
        given["at_loads"] = {
            str(k): float(v)
            for k, v in (raw.items() if isinstance(raw, Mapping) else ())
            if isinstance(v, (int, float))
        }
        return cls(**given)


@dataclass(frozen=True)
class LoadChoice:
    """With a load mix: the candidate with the best confirmed ratio to the baseline at one load
    point (below 1: no candidate beats the baseline there)."""

    label: str
    key: str
    trial: int | None
    ratio: float
    low: float
    high: float
    #: Rounds in which it and the baseline were both measured at that point.
    runs: int
    #: Candidates it was not told apart from at that point when the rounds ran out (each may
    #: still beat it there by more than the margin).
    rivals: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["rivals"] = list(self.rivals)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadChoice:
        names = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in data.items() if k in names}
        given["rivals"] = tuple(str(x) for x in given.get("rivals") or ())
        return cls(**given)

    def line(self) -> str:
        tail = (
            ""
            if self.low > 1.0
            else " (not beyond noise)"
            if self.high >= 1.0
            else (" (below the baseline: no speculation wins here)")
        )
        if self.rivals:
            tail += f"; not told apart from {', '.join(self.rivals)} there"
        return (
            f"    at {self.label}: {self.key} "
            f"{ratio_interval(self.ratio, self.low, self.high, digits=3)} "
            f"over the baseline there, {self.runs} rounds{tail}"
        )


@dataclass(frozen=True)
class Verdict:
    """What the confirmation concluded (see the module docstring)."""

    kind: str
    headline: str
    #: The configuration to run: the leader's trial number, or None (no speculation).
    choice: int | None
    leader: ArmFigure | None
    arms: tuple[ArmFigure, ...] = ()
    rounds: int = 0
    starts: int = 0
    gpu_hours: float = 0.0
    confidence: float = 0.95
    margin: float = 0.01
    notes: tuple[str, ...] = field(default=())
    #: With a load mix: each load point's confirmed winner among the candidates.
    loads: tuple[LoadChoice, ...] = ()

    @property
    def pays(self) -> bool:
        return self.kind == "pays"

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["leader"] = None if self.leader is None else self.leader.to_dict()
        out["arms"] = [a.to_dict() for a in self.arms]
        out["notes"] = list(self.notes)
        out["loads"] = [c.to_dict() for c in self.loads]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict | None:
        """The verdict a study recorded; None when it is missing or not one this version reads."""
        try:
            leader = data.get("leader")
            return cls(
                kind=str(data["kind"]),
                headline=str(data["headline"]),
                choice=data.get("choice"),
                leader=None if not leader else ArmFigure.from_dict(leader),
                arms=tuple(ArmFigure.from_dict(a) for a in data.get("arms") or ()),
                rounds=int(data.get("rounds") or 0),
                starts=int(data.get("starts") or 0),
                gpu_hours=float(data.get("gpu_hours") or 0.0),
                confidence=float(data.get("confidence") or 0.95),
                margin=float(data.get("margin") or 0.01),
                notes=tuple(str(n) for n in data.get("notes") or ()),
                loads=tuple(LoadChoice.from_dict(c) for c in data.get("loads") or ()),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def lines(self) -> list[str]:
        """The verdict as the report prints it: the headline, then how it was reached."""
        out = [self.headline]
        out.append(
            f"confirmed: {self.rounds} interleaved rounds, {self.starts} server starts, "
            f"{self.gpu_hours:.2f} GPU h of the box (a simulator's faster clocks counted as "
            f"the box's); intervals {self.confidence:.0%} family-wise"
        )
        for arm in self.arms:
            state = "" if arm.dropped is None else f"  dropped: {arm.dropped}"
            if arm.dropped is None and arm.behind is not None:
                state = f"  kept for {', '.join(arm.contends)}: {arm.behind} by the objective"
            searched = "" if arm.searched is None else f", searched {arm.searched:.2f}"
            failed = f", {arm.failed} did not start" if arm.failed else ""
            out.append(
                f"    {arm.key}: {arm.interval()} over the baseline, {arm.runs} runs"
                f"{failed}{searched}{state}"
            )
        if self.loads:
            out.append("  confirmed best at each load point:")
            out += [c.line() for c in self.loads]
        out += [f"    {n}" for n in self.notes]
        return out

    def load_choice(self, label: str) -> LoadChoice | None:
        return next((c for c in self.loads if c.label == label), None)


def judge(
    figures: Sequence[ArmFigure],
    *,
    rounds: int,
    starts: int,
    gpu_hours: float,
    spec: ConfirmSpec,
    shown: Sequence[str] = (),
    notes: Sequence[str] = (),
    loads: Sequence[LoadChoice] = (),
) -> Verdict:
    """The verdict of the candidates' figures: the leader (best ratio among those standing)
    against 1 (see the module docstring). ``shown``: the knobs the headline names."""

    def verdict(kind: str, headline: str, choice: int | None, leader: ArmFigure | None) -> Verdict:
        return Verdict(
            kind,
            headline,
            choice,
            leader,
            arms=tuple(figures),
            rounds=rounds,
            starts=starts,
            gpu_hours=gpu_hours,
            confidence=spec.confidence,
            margin=spec.margin,
            notes=tuple(notes),
            loads=tuple(loads),
        )

    standing = [f for f in figures if f.running]
    if not standing:
        dropped = [f"{f.key} {f.dropped}" for f in figures if f.dropped is not None]
        if not figures:
            why = "no speculative configuration was measured"
        elif dropped:
            why = "every candidate was dropped: " + "; ".join(dropped)
        else:
            why = "no candidate was measured beside the baseline in two rounds"
        return verdict("none", f"not confirmed: {why}", None, None)
    leader = max(standing, key=lambda f: f.ratio or 0.0)
    assert leader.low is not None and leader.high is not None
    knobs = ", ".join(
        f"{k}={_show(leader.config[k])}" for k in shown if leader.config.get(k) is not None
    ) or ", ".join(f"{k}={_show(v)}" for k, v in leader.config.items() if v is not None)
    name = _NAMES.get(str(leader.config.get("speculative_algorithm")), "speculation")
    assert leader.ratio is not None
    figure = ratio_interval(leader.ratio, leader.low, leader.high)
    if leader.low > 1.0:
        kind = "pays"
        headline = f"{name} pays: {figure} over no speculation with {knobs}"
        choice = leader.trial
    elif leader.high < 1.0:
        kind = "costs"
        headline = (
            f"{name} costs here: the best configuration runs at {figure} of no speculation "
            f"({knobs}); serve without it"
        )
        choice = None
    else:
        kind = "noise"
        headline = (
            f"no configuration beats no speculation beyond noise (best {figure}, {knobs}); "
            "serve without it, or confirm with more rounds"
        )
        choice = None
    return verdict(kind, headline, choice, leader)


def ratio_interval(ratio: float, low: float, high: float, *, digits: int = 2) -> str:
    """A ratio to the baseline with its interval, e.g. ``x1.05 [1.004, 1.10]``: the one way a
    verdict's figure is printed (the headline, the report, the dashboard note, the end of a run).

    Each number has ``digits`` decimals, more where it lies within 1% of 1 (three, then as many
    as it takes, up to six, not to round onto 1.000), so an interval whose lower bound is 1.004
    (speculation pays) never prints as one whose lower bound is 0.995 (it does not beyond noise).
    """
    return f"x{_near_one(ratio, digits)} [{_near_one(low, digits)}, {_near_one(high, digits)}]"


def _near_one(value: float, digits: int) -> str:
    places = max(digits, 3) if abs(value - 1.0) < 0.01 else digits
    while places < 6 and value != 1.0 and round(value, places) == 1.0:
        places += 1
    return f"{value:.{places}f}"


def _show(value: Any) -> str:
    return f"{value:.12g}" if isinstance(value, float) else str(value)
