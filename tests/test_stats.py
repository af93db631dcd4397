"""The ratio interval of paired measurements: the figure confirmation decides by."""

from __future__ import annotations

import math
import random

import pytest

from autotune._stats import mean_interval, ratio_interval, rounds_to_decide


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
