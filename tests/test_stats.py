"""The ratio interval of paired measurements: the figure confirmation decides by."""

from __future__ import annotations

import math
import random

import pytest

from autotune._stats import (
    group_sequential_level,
    mean_interval,
    pooled_log_spread,
    ratio_interval,
    rounds_to_decide,
    sequential_level,
)


def test_the_ratio_is_the_geometric_mean_and_the_interval_students_t() -> None:
    pairs = [(110.0, 100.0), (121.0, 110.0), (99.0, 100.0)]
    ratio, low, high = ratio_interval(pairs, 0.95) or (0.0, 0.0, 0.0)
    logs = [math.log(a / b) for a, b in pairs]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.302652729911275 * sd / math.sqrt(3)  # t(0.975, 2 degrees of freedom)
    assert ratio == pytest.approx(math.exp(mean), rel=1e-12)
    assert (low, high) == pytest.approx((math.exp(mean - half), math.exp(mean + half)), rel=1e-9)


def test_one_pair_has_no_interval_and_a_drift_shared_by_both_cancels() -> None:
    assert ratio_interval([(2.0, 1.0)], 0.95) is None
    # the box slows down round by round; paired, the ratio stays 1.05 exactly
    drifting = [(1.05 * v, v) for v in (100.0, 90.0, 80.0, 70.0)]
    ratio, low, high = ratio_interval(drifting, 0.95) or (0.0, 0.0, 0.0)
    assert ratio == pytest.approx(1.05) and low == pytest.approx(1.05)
    assert high == pytest.approx(1.05)


@pytest.mark.parametrize("rounds", [3, 6, 10])
def test_the_interval_covers_the_true_ratio_as_often_as_it_says(rounds: int) -> None:
    rng = random.Random(rounds)
    true = 1.04
    covered = 0
    trials = 2000
    for _ in range(trials):
        pairs = [
            (true * 70.0 * rng.gauss(1.0, 0.02), 70.0 * rng.gauss(1.0, 0.02)) for _ in range(rounds)
        ]
        interval = ratio_interval(pairs, 0.95)
        assert interval is not None
        covered += interval[1] <= true <= interval[2]
    # 95% nominal; 2000 draws put the binomial's standard deviation at 0.5%
    assert 0.93 <= covered / trials <= 0.97, covered / trials


def test_mean_interval_holds_the_mean_and_widens_with_spread() -> None:
    assert mean_interval([5.0], 0.8) is None
    mean, low, high = mean_interval([49.0, 50.0, 51.0], 0.8) or (0, 0, 0)
    assert mean == pytest.approx(50.0)
    # t(0.9, 2) = 1.886, sd 1, n 3
    assert high - mean == pytest.approx(1.886 / 3**0.5, rel=1e-3)
    assert mean - low == pytest.approx(high - mean)
    _, low_wide, high_wide = mean_interval([48.0, 50.0, 52.0], 0.8) or (0, 0, 0)
    assert low_wide < low and high_wide > high
    _, low_sure, high_sure = mean_interval([49.0, 50.0, 51.0], 0.95) or (0, 0, 0)
    assert low_sure < low and high_sure > high


def _pairs(n: int, mean: float, sd: float) -> list[tuple[float, float]]:
    """``n`` pairs whose log ratios have exactly this mean and sample spread."""
    half = n // 2
    d = sd * math.sqrt((n - 1) / (2 * half))
    logs = [mean + d] * half + [mean - d] * half + [mean] * (n % 2)
    return [(100.0 * math.exp(x), 100.0) for x in logs]


@pytest.mark.parametrize(("mean", "sd"), [(0.04, 0.03), (0.02, 0.03), (-0.05, 0.04)])
def test_the_projected_rounds_are_the_first_at_which_the_interval_leaves_out_one(
    mean: float, sd: float
) -> None:
    level = 1 - 0.05 / 4
    need = rounds_to_decide(_pairs(3, mean, sd), level, 0.0)
    assert need is not None and need > 3
    # with the same mean and spread, ``need`` rounds decide and one fewer does not
    _, low, high = ratio_interval(_pairs(need, mean, sd), level) or (0, 0, 0)
    assert low > 1.0 or high < 1.0
    _, low, high = ratio_interval(_pairs(need - 1, mean, sd), level) or (0, 0, 0)
    assert low <= 1.0 <= high


def test_the_projection_grows_as_the_gain_shrinks_and_gives_up_near_one() -> None:
    level = 0.95
    near = rounds_to_decide(_pairs(4, 0.01, 0.03), level, 0.0)
    far = rounds_to_decide(_pairs(4, 0.02, 0.03), level, 0.0)
    assert near is not None and far is not None
    # the rounds go as (t s / mean) squared: half the gain takes about four times the rounds
    assert 3.0 < near / far < 5.0
    assert rounds_to_decide(_pairs(4, 0.001, 0.03), level, 0.0, cap=100) is None
    # already decided: the rounds there are
    assert rounds_to_decide(_pairs(5, 0.10, 0.01), level, 0.0) == 5
    assert rounds_to_decide([(1.0, 1.0)], level, 0.0) is None


def test_a_ratio_near_one_is_decided_once_it_lies_within_the_margin() -> None:
    pairs = _pairs(4, 0.001, 0.02)
    assert rounds_to_decide(pairs, 0.95, 0.0, cap=100) is None
    need = rounds_to_decide(pairs, 0.95, 0.01, cap=100)
    assert need is not None
    _, low, high = ratio_interval(_pairs(need, 0.001, 0.02), 0.95) or (0, 0, 0)
    assert low >= 0.99 and high <= 1.01
    _, low, high = ratio_interval(_pairs(need - 1, 0.001, 0.02), 0.95) or (0, 0, 0)
    assert low < 0.99 or high > 1.01


def _false_pays(
    level: float, *, candidates: int, runs: int = 1500, seed: int = 0, pool: bool = False
) -> float:
    """Share of simulated confirmations with no true gain (every candidate as fast as the
    baseline, 2% noise a start) that end in "pays": rounds 3 to 10, stopping at the first
    round whose leader's interval lies wholly above or wholly below 1; ``pool``: each interval
    with the spread pooled over the candidates."""
    rng = random.Random(seed)
    pays = 0
    for _ in range(runs):
        pairs: list[list[tuple[float, float]]] = [[] for _ in range(candidates)]
        for n in range(1, 11):
            base = math.exp(rng.gauss(0.0, 0.02))
            for mine in pairs:
                mine.append((math.exp(rng.gauss(0.0, 0.02)), base))
            if n < 3:
                continue
            spread = pooled_log_spread(pairs) if pool else None
            leader = max((ratio_interval(p, level, spread) or (1.0, 0.0, 2.0)) for p in pairs)
            if leader[1] > 1.0:
                pays += 1
                break
            if leader[2] < 1.0:
                break
    return pays / runs


@pytest.mark.parametrize("candidates", [1, 3])
def test_looked_at_every_round_the_sequential_level_keeps_false_pays_within_its_confidence(
    candidates: int,
) -> None:
    looks = 10 - 3 + 1
    honest = _false_pays(sequential_level(0.95, candidates, looks), candidates=candidates)
    naive = _false_pays(sequential_level(0.95, candidates, 1), candidates=candidates)
    assert honest <= 0.05
    # the same intervals taken as if at one look fixed in advance say "pays" too often
    assert naive > 0.05


def test_the_sequential_level_narrows_with_comparisons_and_looks() -> None:
    assert sequential_level(0.95, 1, 1) == pytest.approx(0.95)
    assert sequential_level(0.95, 4, 8) == pytest.approx(1 - 0.05 / 32)
    assert sequential_level(0.95, 0, 0) == pytest.approx(0.95)


def test_pooled_over_the_candidates_the_sequential_level_still_keeps_false_pays_within() -> None:
    looks = 10 - 3 + 1
    level = sequential_level(0.95, 3, looks)
    assert _false_pays(level, candidates=3, pool=True, seed=1) <= 0.05
    # taken at one look fixed in advance, the pooled intervals say "pays" too often too
    assert _false_pays(sequential_level(0.95, 3, 1), candidates=3, pool=True, seed=1) > 0.05


def test_the_pooled_spread_narrows_an_interval_and_a_noisier_arm_keeps_its_own() -> None:
    rng = random.Random(3)
    quiet = [[(1.04 * rng.gauss(1.0, 0.02), 1.0) for _ in range(4)] for _ in range(3)]
    pooled = pooled_log_spread(quiet)
    assert pooled is not None and pooled[1] == 3 * 3
    own = ratio_interval(quiet[0], 0.99) or (0.0, 0.0, 0.0)
    shared = ratio_interval(quiet[0], 0.99, pooled) or (0.0, 0.0, 0.0)
    assert shared[0] == pytest.approx(own[0])
    assert shared[2] - shared[1] < own[2] - own[1]
    # an arm four times as noisy as the pool is not narrowed below its own spread's width
    noisy = [(1.04 * rng.gauss(1.0, 0.08), 1.0) for _ in range(4)]
    mine = ratio_interval(noisy, 0.99, pooled) or (0.0, 0.0, 0.0)
    logs = [math.log(a / b) for a, b in noisy]
    mean = sum(logs) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
    from scipy.stats import t

    half = float(t.ppf(0.995, 9)) * sd / 2.0
    assert (mine[1], mine[2]) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert pooled_log_spread([[(1.0, 1.0)]]) is None


@pytest.mark.parametrize(("candidates", "pool"), [(1, False), (3, False), (3, True)])
def test_the_group_sequential_level_keeps_false_pays_within_its_confidence(
    candidates: int, pool: bool
) -> None:
    level = group_sequential_level(0.95, candidates, 3, 10)
    assert _false_pays(level, candidates=candidates, pool=pool, seed=2) <= 0.05


def test_the_group_sequential_level_is_narrower_than_bonferroni_over_the_looks() -> None:
    for candidates in (1, 2, 3, 5):
        one_look = sequential_level(0.95, candidates, 1)
        bonferroni = sequential_level(0.95, candidates, 10 - 3 + 1)
        level = group_sequential_level(0.95, candidates, 3, 10)
        assert one_look < level < bonferroni
    # one look: nothing to correct for but the comparisons
    assert group_sequential_level(0.95, 3, 4, 4) == pytest.approx(1 - 0.05 / 3)
    # more looks need a wider boundary; the same arguments give the same level
    assert group_sequential_level(0.95, 3, 3, 16) > group_sequential_level(0.95, 3, 3, 10)
    group_sequential_level.cache_clear()
    assert group_sequential_level(0.95, 3, 3, 10) == group_sequential_level.__wrapped__(
        0.95, 3, 3, 10
    )


def test_looked_at_every_round_the_group_sequential_intervals_miss_no_more_than_allowed() -> None:
    """One candidate, its own spread (2 to 9 degrees of freedom: where a normal boundary taken
    as a t level misses too often), no true difference, rounds 3 to 10: the interval leaves
    out 1 on either side, at some look, in about 5% of runs, not more."""
    level = group_sequential_level(0.95, 1, 3, 10)
    rng = random.Random(11)
    runs = 4000
    missed = 0
    for _ in range(runs):
        pairs: list[tuple[float, float]] = []
        for n in range(1, 11):
            pairs.append((math.exp(rng.gauss(0.0, 0.02)), math.exp(rng.gauss(0.0, 0.02))))
            if n < 3:
                continue
            _, low, high = ratio_interval(pairs, level) or (1.0, 0.0, 2.0)
            if low > 1.0 or high < 1.0:
                missed += 1
                break
    # the binomial's standard deviation at 4000 runs is 0.35%
    assert missed / runs <= 0.057, missed / runs
