"""Order statistics shared by the benchmark and the simulator."""

from __future__ import annotations

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
