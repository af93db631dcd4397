"""Per-request latency limits and goodput, as DistServe defines it.

Goodput is the number of completed requests per second that meet *every* per-request limit:
their time to first token within ``ttft_ms``, their time per output token (after the first)
within ``tpot_ms``, their whole time within ``e2e_ms`` (each limit optional). A run's goodput is
that count divided by the run's duration, the same duration its throughputs divide by. The
benchmark client computes it from its request records and the simulator's model from its
virtual requests, so both read the same definition from here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: The keys of a space's ``objective.slo`` and what each bounds.
LIMIT_KEYS: Mapping[str, str] = {
    "ttft_ms": "time to first token",
    "tpot_ms": "time per output token after the first",
    "e2e_ms": "end-to-end latency",
}


@dataclass(frozen=True)
class RequestLimits:
    """Per-request limits in milliseconds; ``None``: no limit on that figure."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def met(self, ttft_s: float | None, tpot_s: float | None, e2e_s: float | None) -> bool:
        """Whether one completed request, with these figures in seconds, meets every limit.

        A request of one output token has no TPOT: a TPOT limit does not apply to it. A figure a
        limit needs but that was not measured fails the request.
        """
        checks = ((self.ttft_ms, ttft_s), (self.e2e_ms, e2e_s))
        for limit, value in checks:
            if limit is not None and (value is None or 1000.0 * value > limit):
                return False
        tpot = self.tpot_ms
        return not (tpot is not None and tpot_s is not None and 1000.0 * tpot_s > tpot)

    def goodput(
        self, requests: Iterable[tuple[float | None, float | None, float | None]], duration_s: float
    ) -> float:
        """Requests per second that meet every limit: ``requests`` are the completed requests'
        ``(ttft_s, tpot_s, e2e_s)``, ``duration_s`` the run's duration."""
        good = sum(1 for ttft, tpot, e2e in requests if self.met(ttft, tpot, e2e))
        return good / duration_s if duration_s > 0 and math.isfinite(duration_s) else 0.0

    def describe(self) -> str:
        parts = [
            f"{key.removesuffix('_ms').upper()} <= {value:g} ms"
            for key, value in self.to_mapping().items()
        ]
        return ", ".join(parts) or "no limit"

    def to_mapping(self) -> dict[str, float]:
        """The limits that are set, by their space key."""
        values = {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms}
        return {k: v for k, v in values.items() if v is not None}
