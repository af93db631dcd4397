"""Order statistics shared by the benchmark and the simulator."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between order statistics; ``values`` non-empty."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def weighted_percentile(samples: Iterable[tuple[float, int]], q: float) -> float:
    """:func:`percentile` of ``(value, count)`` samples: each value taken ``count`` times.

    The same figure as :func:`percentile` of the expanded list, without building it; counts
    below 1 are left out, and at least one must remain.
    """
    ordered = sorted((value, count) for value, count in samples if count > 0)
    total = sum(count for _, count in ordered)
    if total == 0:
        raise ValueError("no samples")
    rank = (total - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, total - 1)
    low_value = high_value = ordered[-1][0]
    seen = 0
    for value, count in ordered:
        if seen <= low < seen + count:
            low_value = value
        if seen <= high < seen + count:
            high_value = value
            break
        seen += count
    return low_value + (high_value - low_value) * (rank - low)


def _log_spread(pairs: Sequence[tuple[float, float]]) -> tuple[int, float, float] | None:
    """The count, mean and sample standard deviation of ``log(a / b)`` over the positive
    pairs; ``None`` with fewer than two."""
    logs = [math.log(a / b) for a, b in pairs if a > 0 and b > 0]
    n = len(logs)
    if n < 2:
        return None
    mean = sum(logs) / n
    return n, mean, math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))


def pooled_log_spread(groups: Sequence[Sequence[tuple[float, float]]]) -> tuple[float, int] | None:
    """The spread of ``log(a / b)`` pooled over several comparisons with the same ``b`` (each
    candidate of a confirmation against the baseline): the standard deviation from the sum of
    each group's squared deviations from its own mean, and its degrees of freedom (the pairs
    less one a group); ``None`` when no group has two pairs.

    The noise that decides a confirmation is a start's, the same for every configuration
    started on one box (a run that reads 2% fast reads 2% fast whatever it serves), so every
    candidate's spread measures the same noise, and the pooled one measures it with many more
    degrees of freedom than one candidate's few rounds: Student's t at 2 degrees of freedom is
    four times the normal quantile at the levels a confirmation takes, at 12 about 1.6 times.
    """
    ss = 0.0
    df = 0
    for pairs in groups:
        spread = _log_spread(pairs)
        if spread is None:
            continue
        n, _, sd = spread
        ss += sd * sd * (n - 1)
        df += n - 1
    if df == 0:
        return None
    return math.sqrt(ss / df), df


def ratio_interval(
    pairs: Sequence[tuple[float, float]],
    confidence: float,
    pooled: tuple[float, int] | None = None,
) -> tuple[float, float, float] | None:
    """The ratio ``a / b`` of paired positive measurements, with a confidence interval.

    Each pair is one measurement of ``a`` and one of ``b`` taken side by side (the same round
    of an interleaved confirmation), so drift between rounds cancels. The interval is Student's
    t on the mean of ``log(a / b)``, taken back by ``exp``: ``(ratio, low, high)``, the ratio
    being the geometric mean of the pairs' ratios. ``None`` with fewer than two pairs (no
    spread to judge by).

    ``pooled``: the spread of several comparisons alike (:func:`pooled_log_spread`) and its
    degrees of freedom; the interval then takes the larger of it and the pairs' own spread, at
    the pooled degrees of freedom, so a comparison noisier than the rest keeps its own width.
    """
    spread = _log_spread(pairs)
    if spread is None:
        return None
    n, mean, sd = spread
    df = n - 1
    if pooled is not None and pooled[1] > df:
        sd, df = max(sd, pooled[0]), pooled[1]
    from scipy.stats import t

    half = float(t.ppf(0.5 + confidence / 2.0, df)) * sd / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def mean_interval(values: Sequence[float], confidence: float) -> tuple[float, float, float] | None:
    """The mean of ``values`` with a two-sided Student-t interval at ``confidence``:
    ``(mean, low, high)``; ``None`` with fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))
    from scipy.stats import t

    half = float(t.ppf(0.5 + confidence / 2.0, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def rounds_to_decide(
    pairs: Sequence[tuple[float, float]], confidence: float, margin: float, *, cap: int = 100
) -> int | None:
    """How many paired rounds in all would decide the ratio ``a / b`` of :func:`ratio_interval`
    if the mean and the spread of the pairs so far held: the fewest ``N`` (at least the pairs
    there are) at which the interval at ``confidence`` would leave out 1, or lie within
    ``margin`` of 1 on both sides. A projection, not a promise: the next rounds move both.
    ``None`` with fewer than two pairs, or when not even ``cap`` rounds would decide it (a
    ratio this near 1 at this spread is as good as no difference).
    """
    spread = _log_spread(pairs)
    if spread is None:
        return None
    n, mean, sd = spread
    # The widest half-width (log scale) that decides: clear of 0, or inside the margin band.
    clear = abs(mean)
    inside = min(mean - math.log1p(-margin), math.log1p(margin) - mean) if margin > 0 else 0.0
    if sd == 0.0:
        return n if max(clear, inside) > 0.0 else None
    from scipy.stats import t

    for rounds in range(n, max(n, cap) + 1):
        half = float(t.ppf(0.5 + confidence / 2.0, rounds - 1)) * sd / math.sqrt(rounds)
        if half < clear or half <= inside:
            return rounds
    return None


def sequential_level(confidence: float, comparisons: int, looks: int) -> float:
    """The level of each interval when ``comparisons`` intervals are each looked at up to
    ``looks`` times and the rounds stop at the first look that decides: ``1 - (1 -
    confidence) / (comparisons * looks)`` (Bonferroni over the comparisons and the looks).

    A Student-t interval is exact at one look fixed in advance. Looked at after every round
    and stopped the first time it leaves out 1, it is not: on simulated paired rounds with no
    true gain, a 95% interval looked at from round 3 to round 10 says "better" in about 8% of
    runs, not 2.5%. By the union bound, the chance that any of the intervals misses at any of
    the looks is at most ``1 - confidence`` whatever the looks' correlation, so the intervals
    hold at every look together and the rounds may stop at the first that decides.
    """
    return 1.0 - (1.0 - confidence) / (max(1, comparisons) * max(1, looks))


#: Simulated rounds the group-sequential level is calibrated on (:func:`group_sequential_level`):
#: the chance it holds is estimated to within about 2% of itself (binomial, at 1.7%).
_PATHS = 200_000
#: The simulation's seed: the level is the same on every machine (numpy's PCG64).
_SEED = 46


@functools.lru_cache(maxsize=64)
def group_sequential_level(confidence: float, comparisons: int, first: int, last: int) -> float:
    """The level of each interval when ``comparisons`` intervals are each looked at after
    every round from round ``first`` to round ``last`` and the rounds stop at the first look
    that decides: Pocock's group-sequential boundary, one nominal level at every look, chosen
    so that the chance of any look's interval missing is ``(1 - confidence) / comparisons``
    for each comparison (Bonferroni over the comparisons only).

    :func:`sequential_level` takes the looks as if they were unrelated; they are not: the
    interval after round 6 holds the five rounds the one after round 5 held, so a mean that
    stays inside at one look mostly stays inside at the next. The level here is found for the
    looks as they are: Student-t intervals of the same simulated rounds (normal, no true
    difference, the spread each look's own, ``n - 1`` degrees of freedom) looked at from
    ``first`` to ``last``, the level raised until they miss at some look in no more than
    ``(1 - confidence) / comparisons`` of the runs (bisection on :data:`_PATHS` seeded runs).
    Calibrated on the t intervals themselves, not on the normal boundary taken as a t level
    (which at 2 to 9 degrees of freedom misses in 6-7% of runs where it should 5%). An
    interval with the spread pooled over the candidates has more degrees of freedom, so it
    misses less often at the same level. At 95% over 3 comparisons and rounds 3 to 16, each
    interval is taken at 99.74% instead of Bonferroni's 99.88%.
    """
    alpha = (1.0 - confidence) / max(1, comparisons)
    first = max(2, first)
    last = max(first, last)
    if first == last:
        return 1.0 - alpha
    import numpy as np
    from scipy.stats import t

    steps = np.random.default_rng(_SEED).standard_normal((_PATHS, last))
    n = np.arange(1, last + 1)
    sums = np.cumsum(steps, axis=1)
    squares = np.cumsum(steps * steps, axis=1) - sums * sums / n
    looks = np.arange(first, last + 1)
    score = np.abs(sums[:, looks - 1] / looks) / np.sqrt(
        squares[:, looks - 1] / (looks - 1) / looks
    )
    del steps, sums, squares

    def missed(level: float) -> float:
        bound = t.ppf(0.5 + level / 2.0, looks - 1)
        return float((score > bound).any(axis=1).mean())

    # between one look's level (misses too often) and Bonferroni's over the looks (too rarely)
    low, high = 1.0 - alpha, 1.0 - alpha / len(looks)
    for _ in range(40):
        middle = (low + high) / 2.0
        if missed(middle) > alpha:
            low = middle
        else:
            high = middle
    return high
