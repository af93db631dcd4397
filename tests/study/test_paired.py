"""Paired comparisons of confirmation runs: pairs by round, the leader of a figure, who is
behind it and who is not told apart from it yet."""

from __future__ import annotations

import random

import pytest

from autotune.study._paired import Paired

#: True figures by arm: by the objective, and at two load points.
TRUE = {
    "baseline": (100.0, {"c1": 100.0, "c64": 100.0}),
    "a": (150.0, {"c1": 180.0, "c64": 120.0}),
    "b": (120.0, {"c1": 200.0, "c64": 60.0}),
    "c": (149.0, {"c1": 179.0, "c64": 121.0}),
}


def _runs(rounds: int, noise: float, seed: int = 0) -> list[tuple[int, str, float | None, dict]]:
    rng = random.Random(seed)
    out: list[tuple[int, str, float | None, dict]] = []
    for r in range(rounds):
        for arm, (value, loads) in TRUE.items():
            out.append(
                (
                    r,
                    arm,
                    value * rng.gauss(1.0, noise),
                    {k: v * rng.gauss(1.0, noise) for k, v in loads.items()},
                )
            )
    return out


def test_pairs_are_taken_within_a_round_and_oriented_by_the_direction() -> None:
    runs = [(0, "a", 10.0, {"c1": 4.0}), (0, "b", 5.0, {"c1": 8.0}), (1, "a", 12.0, {})]
    runs.append((1, "b", None, {}))  # a run that gave no figure pairs with nothing
    up = Paired(runs, baseline="b", maximize=True)
    assert up.pairs("a", "b") == [(10.0, 5.0)]
    assert up.pairs("a", "b", "c1") == [(4.0, 8.0)]
    down = Paired(runs, baseline="b", maximize=False)
    assert down.pairs("a", "b") == [(5.0, 10.0)]  # lower is better: a ratio above 1 is b's
    assert down.versus("a", "b", 0.9) is None  # one pair: no spread to judge by


def test_each_figure_has_its_own_leader_and_its_own_arms_behind() -> None:
    paired = Paired(_runs(8, 0.01), baseline="baseline", maximize=True)
    arms = ["a", "b", "c"]
    by_objective = paired.contest(arms, 0.95, 0.01)
    assert by_objective.leader in ("a", "c") and set(by_objective.behind) == {"b"}
    at_c1 = paired.contest(arms, 0.95, 0.01, "c1")
    assert at_c1.leader == "b" and set(at_c1.behind) == {"a", "c"}
    at_c64 = paired.contest(arms, 0.95, 0.01, "c64")
    assert "b" in at_c64.behind and at_c64.leader in ("a", "c")
    ratio, low, high = at_c1.behind["a"]
    assert low <= ratio <= high < 1.0 and ratio == pytest.approx(0.9, abs=0.03)
    assert set(at_c1.standing) == set(arms)


def test_two_arms_within_the_margin_stay_rivals_until_enough_rounds_tell_them_apart() -> None:
    """a and c differ by under 1%: with 2% noise a few rounds cannot say that c may not beat a
    by more than the margin; with little noise and many rounds they can."""
    few = Paired(_runs(3, 0.02), baseline="baseline", maximize=True).contest(["a", "c"], 0.95, 0.01)
    assert not few.apart and few.rivals and not few.behind
    many = Paired(_runs(40, 0.002), baseline="baseline", maximize=True)
    settled = many.contest(["a", "c"], 0.95, 0.01)
    assert settled.apart and settled.leader in ("a", "c")


def test_an_arm_without_two_paired_rounds_at_a_load_point_is_not_judged_there() -> None:
    runs = [(r, arm, 1.0 + r, {"c1": 1.0 + r} if arm != "b" or r == 0 else {})
            for r in range(3) for arm in ("baseline", "a", "b")]  # fmt: skip
    contest = Paired(runs, baseline="baseline", maximize=True).contest(["a", "b"], 0.9, 0.01, "c1")
    assert contest.standing == ("a",) and contest.leader == "a" and contest.apart


def test_pooled_the_intervals_to_the_baseline_narrow_and_keep_their_ratios() -> None:
    runs = _runs(4, 0.02, seed=5)
    alone = Paired(runs, baseline="baseline", maximize=True)
    pooled = Paired(runs, baseline="baseline", maximize=True, pool=True)
    for arm in ("a", "b", "c"):
        own = alone.to_baseline(arm, 0.99)
        shared = pooled.to_baseline(arm, 0.99)
        assert own is not None and shared is not None
        assert shared[0] == pytest.approx(own[0])
    widths = [(i[2] - i[1]) for a in "abc" if (i := pooled.to_baseline(a, 0.99)) is not None]
    lone = [(i[2] - i[1]) for a in "abc" if (i := alone.to_baseline(a, 0.99)) is not None]
    assert sum(widths) < sum(lone)
