"""A load mix: the load points a study measures every configuration at, and their weights.

``objective.loads`` lists points of closed-loop concurrency (``{concurrency: 16, weight: 0.3}``)
or of Poisson arrivals (``{request_rate: 2.5, weight: 0.2}``, optionally capped by
``concurrency``). A weight is the share of time the server spends at that load, so the weights
sum to 1 and the objective is the weighted mean of the metric over the points: for a throughput
that is the number of tokens the server delivers per second over the whole mix.

Each point has a stable label, ``c16`` for a concurrency, ``r2.5`` for a request rate
(``r2.5c64`` with a cap), which names it in the trial records and the report. A point may name
its own ``num_prompts``; a concurrency point otherwise measures at least two prompts per
concurrent request, so that the load is reached. A space without
``loads`` has one implied point, the workload's own load, and studies run exactly as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from autotune._document import Section
from autotune._workload import WorkloadSpec

#: How far the weights may sum from 1 (they are written by hand as shares of time).
WEIGHT_TOLERANCE = 1e-3
#: The most load points a mix may name (each is a benchmark run of every trial).
MAX_LOADS = 16
#: Prompts a concurrency point measures per concurrent request, at least.
PROMPTS_PER_SLOT = 2
_KEYS = ("concurrency", "request_rate", "weight", "num_prompts")


@dataclass(frozen=True)
class LoadPoint:
    """One load of the mix: a concurrency, or a request rate (with an optional cap)."""

    weight: float
    concurrency: int | None = None
    request_rate: float | None = None
    #: Prompts measured at this point (None: see :meth:`workload`).
    num_prompts: int | None = None

    @property
    def label(self) -> str:
        """``c16``, ``r2.5`` or ``r2.5c64``: the point's name in records and reports."""
        if self.request_rate is None:
            return f"c{self.concurrency}"
        cap = "" if self.concurrency is None else f"c{self.concurrency}"
        return f"r{self.request_rate:g}{cap}"

    def describe(self) -> str:
        if self.request_rate is None:
            return f"concurrency {self.concurrency}"
        cap = "" if self.concurrency is None else f", at most {self.concurrency} at once"
        return f"{self.request_rate:g} req/s{cap}"

    def workload(self, base: WorkloadSpec) -> WorkloadSpec:
        """``base`` at this load.

        A concurrency point measures at least :data:`PROMPTS_PER_SLOT` prompts per concurrent
        request (a run of fewer prompts than its concurrency never reaches that load), unless
        the point names its own ``num_prompts``. A request rate without a cap lets every
        prompt be in flight at once (the benchmark client's ``--max-concurrency`` unset).
        """
        if self.request_rate is None:
            assert self.concurrency is not None
            prompts = self.num_prompts or max(base.num_prompts, PROMPTS_PER_SLOT * self.concurrency)
            return base.with_changes(
                concurrency=self.concurrency, request_rate=None, num_prompts=prompts
            )
        prompts = self.num_prompts or base.num_prompts
        cap = self.concurrency if self.concurrency is not None else prompts
        return base.with_changes(
            concurrency=cap, request_rate=self.request_rate, num_prompts=prompts
        )


def parse_loads(sec: Section, *, max_concurrency: int = 100_000) -> tuple[LoadPoint, ...]:
    """``objective.loads`` (``()`` when absent), every point checked where it is written.

    Raises:
        ConfigError: ``file:line (objective.loads[i].key)``: not a list, an empty list, an item
            that is not a mapping, an unknown key, a point with neither concurrency nor
            request rate, a weight that is not a positive number, two points of the same load,
            weights that do not sum to 1.
    """
    if "loads" not in sec.data:
        return ()
    raw = sec.data["loads"]
    example = "e.g. loads: [{concurrency: 1, weight: 0.5}, {concurrency: 64, weight: 0.5}]"
    if not isinstance(raw, list):
        raise sec.error("loads must be a list of load points", "loads", hint=example)
    if not raw:
        raise sec.error("loads is empty: name at least one load point", "loads", hint=example)
    if len(raw) > MAX_LOADS:
        raise sec.error(
            f"{len(raw)} load points; at most {MAX_LOADS}",
            "loads",
            hint="each point is one more benchmark run of every trial",
        )
    points: list[LoadPoint] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw):
        path = (*sec.path, "loads", i)
        if not isinstance(item, dict):
            raise sec.doc.error("a load point must be a mapping", path, hint=example)
        point = _parse_point(Section(sec.doc, path, item), max_concurrency)
        if point.label in seen:
            raise sec.doc.error(
                f"load point {point.label} ({point.describe()}) is named twice (first as "
                f"loads[{seen[point.label]}])",
                path,
                hint="merge the two points into one and add their weights",
            )
        seen[point.label] = i
        points.append(point)
    total = math.fsum(p.weight for p in points)
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        raise sec.error(
            f"the weights sum to {total:g}, not 1: a weight is the share of time the server "
            "spends at that load",
            "loads",
            hint="scale the weights so that they add up to 1",
        )
    return tuple(points)


def _parse_point(c: Section, max_concurrency: int) -> LoadPoint:
    c.check_keys(_KEYS)
    if "weight" not in c.data:
        raise c.error(
            "missing key 'weight'", hint="the share of time at this load, e.g. weight: 0.5"
        )
    weight = c.number("weight", None, positive=True, maximum=1.0)
    if weight is None:
        raise c.error("weight must be a number, got null", "weight", hint="e.g. weight: 0.5")
    concurrency = (
        c.integer("concurrency", None, minimum=1, maximum=max_concurrency)
        if "concurrency" in c.data
        else None
    )
    rate = c.number("request_rate", None, positive=True) if "request_rate" in c.data else None
    if concurrency is None and rate is None:
        raise c.error(
            "a load point needs concurrency or request_rate",
            hint="e.g. {concurrency: 16, weight: 0.3} or {request_rate: 2.5, weight: 0.3}",
        )
    prompts = (
        c.integer("num_prompts", None, minimum=1, maximum=1_000_000)
        if "num_prompts" in c.data
        else None
    )
    return LoadPoint(float(weight), concurrency, None if rate is None else float(rate), prompts)


def weighted_mean(
    points: tuple[LoadPoint, ...], figures: Mapping[str, float | None]
) -> float | None:
    """The weighted mean of ``figures`` (by label) over ``points``; None when one is missing."""
    total = 0.0
    for point in points:
        value = figures.get(point.label)
        if value is None or not math.isfinite(value):
            return None
        total += point.weight * value
    return total
