"""Paired comparisons of a confirmation's runs, by the objective or at one load point.

A confirmation measures its arms in rounds (:mod:`autotune.study._confirm`); two arms measured
in the same round form a pair, so drift between rounds cancels in their ratio. Every
comparison here is made on such pairs: an arm's ratio to the baseline, to another arm, and the
contest of one figure (the weighted objective, or one load point's own figure) among the arms
still measured:

* the leader: the best ratio to the baseline there;
* behind: an arm whose ratio to the leader has an interval wholly below 1 (at
  :data:`CHOICE_CONFIDENCE`): it cannot be the best there;
* rivals: an arm not behind whose ratio to the leader may still exceed ``1 + margin``: the
  leader is not told apart from it yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autotune._stats import pooled_log_spread, ratio_interval

#: The level at which a candidate behind the leader stops being measured. Lower than the
#: verdict's: dropping a candidate that is truly as good as the leader costs little (the two
#: are close), while measuring every candidate to the end costs a start per round each.
CHOICE_CONFIDENCE = 0.8

Interval = tuple[float, float, float]


@dataclass(frozen=True)
class Contest:
    """One figure's contest among the arms still measured (see the module docstring)."""

    #: The load point (None: the weighted objective).
    load: str | None
    leader: str | None
    #: The arms with a ratio to the baseline here (the others lack two paired rounds).
    standing: tuple[str, ...] = ()
    #: Arms that cannot be the best here, each with its ratio to the leader.
    behind: Mapping[str, Interval] = field(default_factory=dict)
    #: Arms not told apart from the leader yet (their ratio to it may exceed 1 + margin).
    rivals: tuple[str, ...] = ()

    @property
    def apart(self) -> bool:
        return not self.rivals


class Paired:
    """The runs of a confirmation, paired by round (see the module docstring).

    ``runs``: ``(round, arm, value, loads)`` of every run that gave a figure (``loads``: the
    run's figure at each load point, by label); ``baseline``: the arm every ratio is taken
    against; ``maximize``: the objective's direction (a ratio above 1 always means better);
    ``pool``: each arm's interval against the baseline takes the spread pooled over every
    arm's pairs with the baseline (:func:`~autotune._stats.pooled_log_spread`: the noise of a
    start is the same whatever configuration is started), or its own where that is wider.
    """

    def __init__(
        self,
        runs: Sequence[tuple[int, str, float | None, Mapping[str, float]]],
        *,
        baseline: str,
        maximize: bool,
        pool: bool = False,
    ) -> None:
        self.baseline = baseline
        self.maximize = maximize
        self.pool = pool
        self._by: dict[str | None, dict[int, dict[str, float]]] = {}
        for r, arm, value, loads in runs:
            if value is None:
                continue
            figures: dict[str | None, float] = {None: value}
            figures.update(loads)
            for load, v in figures.items():
                if v > 0:
                    self._by.setdefault(load, {}).setdefault(r, {})[arm] = v

    def pairs(self, a: str, b: str, load: str | None = None) -> list[tuple[float, float]]:
        """``(a, b)`` of every round where both were measured (at ``load``, or by the
        objective), oriented so that a ratio above 1 means ``a`` is better."""
        out = []
        for values in self._by.get(load, {}).values():
            if a in values and b in values:
                x, y = values[a], values[b]
                out.append((x, y) if self.maximize else (y, x))
        return out

    def versus(self, a: str, b: str, level: float, load: str | None = None) -> Interval | None:
        """How many times better ``a`` is than ``b`` over their pairs, with the interval."""
        return ratio_interval(self.pairs(a, b, load), level)

    def to_baseline(self, arm: str, level: float, load: str | None = None) -> Interval | None:
        if not self.pool:
            return self.versus(arm, self.baseline, level, load)
        return ratio_interval(self.pairs(arm, self.baseline, load), level, self.pooled(load))

    def pooled(self, load: str | None = None) -> tuple[float, int] | None:
        """The spread of every arm's ratio to the baseline, pooled (at ``load``)."""
        arms = {a for values in self._by.get(load, {}).values() for a in values}
        arms.discard(self.baseline)
        return pooled_log_spread([self.pairs(a, self.baseline, load) for a in sorted(arms)])

    def contest(
        self, arms: Sequence[str], level: float, margin: float, load: str | None = None
    ) -> Contest:
        """The contest of ``arms`` by the objective (``load`` None) or at one load point; the
        leader is chosen on ratios to the baseline at ``level``."""
        ratios = {a: i for a in arms if (i := self.to_baseline(a, level, load)) is not None}
        if not ratios:
            return Contest(load, None)
        leader = max(ratios, key=lambda a: ratios[a][0])
        behind: dict[str, Interval] = {}
        rivals = []
        for a in ratios:
            if a == leader:
                continue
            versus = self.versus(a, leader, CHOICE_CONFIDENCE, load)
            if versus is not None and versus[2] < 1.0:
                behind[a] = versus
            elif versus is None or versus[2] > 1.0 + margin:
                rivals.append(a)
        return Contest(load, leader, tuple(ratios), behind, tuple(rivals))
