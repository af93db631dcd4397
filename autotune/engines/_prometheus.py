"""Reading a server's ``/metrics``: samples of a Prometheus text exposition, by metric name.

The text is parsed with ``prometheus_client``'s own parser. A text that parser refuses as a
whole (a server's malformed line, a truncated answer) is read line by line, so that one bad
sample does not hide the others: the lines the parser refuses are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable


def sample_values(text: str, names: Collection[str]) -> dict[str, list[float]]:
    """The finite values of the samples named ``names`` in ``text``, one per label set, by name
    (a name without samples is left out)."""
    out: dict[str, list[float]] = {}
    for name, value in _samples(text, names):
        if math.isfinite(value):
            out.setdefault(name, []).append(value)
    return out


def _samples(text: str, names: Collection[str]) -> Iterable[tuple[str, float]]:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, IndexError, TypeError):
        families = []
        for line in text.splitlines():
            if not any(line.startswith(name) for name in names):
                continue
            try:
                families += text_string_to_metric_families(line + "\n")
            except (ValueError, IndexError, TypeError):
                continue
    for family in families:
        for sample in family.samples:
            if sample.name in names:
                yield sample.name, float(sample.value)
