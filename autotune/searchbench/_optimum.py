"""The true optimum of a space: every configuration evaluated by the model.

Every parameter must take finitely many values (int ranges, stepped floats, categoricals).
Configurations SGLang's rules refuse are skipped, as the tuner never launches them; with
constraints (``objective.constraints``, the oracle's), the optimum is the best configuration whose
noise-free figures meet them, and the best without them is kept too, to show whether a limit
binds. The result also tells how the space is made: how many configurations start, crash (by
category) or are refused, and how many break a limit. With a load mix it also holds the optimum
at each load point (the best configuration of the space at that load alone), from the same
evaluations.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from autotune._errors import ConfigError
from autotune.engines import Engine, create_engine
from autotune.searchbench._oracle import Oracle
from autotune.searchbench._parallel import fork_map, usable_jobs
from autotune.space import SearchSpace


@dataclass(frozen=True)
class Optimum:
    value: float
    params: dict[str, Any]
    evaluated: int
    statuses: dict[str, int] = field(default_factory=dict)
    #: How many configurations reach 95% and 98% of the optimum.
    near_95: int = 0
    near_98: int = 0
    #: With constraints: the best value without them, and how many measured configurations
    #: break one (None: no constraints).
    unconstrained_value: float | None = None
    violating: int | None = None
    #: With a load mix: the best value at each load point (by label) and its parameters.
    loads: dict[str, float] = field(default_factory=dict)
    load_params: dict[str, dict[str, Any]] = field(default_factory=dict)


def grid(space: SearchSpace) -> Iterator[dict[str, Any]]:
    """Every combination of the parameters' values, honouring ``when`` conditions."""
    for param in space.parameters:
        if param.values() is None:
            raise ConfigError(
                f"parameter {param.name} has infinitely many values; the search benchmark needs "
                "a step for float parameters",
                source=space.source,
            )

    def walk(i: int, chosen: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if i == len(space.parameters):
            yield dict(chosen)
            return
        param = space.parameters[i]
        if not param.active({**space.fixed, **chosen}):
            yield from walk(i + 1, chosen)
            return
        for value in param.values() or ():
            chosen[param.name] = value
            yield from walk(i + 1, chosen)
            del chosen[param.name]

    yield from walk(0, {})


@dataclass
class _Scan:
    """What one share of the grid holds (every ``parts``-th configuration from ``part``)."""

    count: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    values: list[float] = field(default_factory=list)
    #: (value, grid index, parameters): on equal values the first in the grid wins, however the
    #: grid is shared
    best: tuple[float, int, dict[str, Any]] | None = None
    free: float | None = None
    violating: int = 0
    per_load: dict[str, tuple[float, int, dict[str, Any]]] = field(default_factory=dict)

    def merge(self, other: _Scan, maximize: bool) -> None:
        self.count += other.count
        self.statuses.update(other.statuses)
        self.values += other.values
        self.violating += other.violating
        if other.best is not None and _first(other.best, self.best, maximize):
            self.best = other.best
        if other.free is not None and (
            self.free is None or (other.free > self.free if maximize else other.free < self.free)
        ):
            self.free = other.free
        for label, entry in other.per_load.items():
            if _first(entry, self.per_load.get(label), maximize):
                self.per_load[label] = entry


def _scan(
    space: SearchSpace, oracle: Oracle, engine: Engine, part: int = 0, parts: int = 1
) -> _Scan:
    maximize = space.objective.direction == "maximize"
    out = _Scan()
    for index, params in enumerate(grid(space)):
        if index % parts != part:
            continue
        out.count += 1
        config = space.config_for(params)
        refused = engine.check_rules(config)
        if refused is not None:
            out.statuses[f"refused:{refused.category}"] += 1
            continue
        answer = oracle.answer(config)
        out.statuses[answer.status] += 1
        if answer.value is None:
            continue
        if out.free is None or (answer.value > out.free if maximize else answer.value < out.free):
            out.free = answer.value
        if oracle.violated(answer):
            out.violating += 1
            continue
        out.values.append(answer.value)
        if _better(answer.value, out.best, maximize):
            out.best = (answer.value, index, params)
        for label, figures in answer.loads.items():
            value = figures.get("value")
            if value is not None and _better(value, out.per_load.get(label), maximize):
                out.per_load[label] = (value, index, params)
    return out


def find_optimum(
    space: SearchSpace, oracle: Oracle, engine: Engine | None = None, *, jobs: int = 1
) -> Optimum:
    """The best configuration of ``space`` by ``oracle``, skipping what ``engine``'s rules refuse
    (the space's own engine when not given); ``jobs``: worker processes sharing the grid."""
    engine = engine or create_engine(space.engine)
    maximize = space.objective.direction == "maximize"
    parts = usable_jobs(jobs)
    scans = fork_map(lambda part: _scan(space, oracle, engine, part, parts), range(parts), parts)
    scan = scans[0]
    for other in scans[1:]:
        scan.merge(other, maximize)
    best, values, free = scan.best, scan.values, scan.free
    if best is None:
        what = "meets the constraints" if free is not None else "starts"
        raise ConfigError(f"no configuration of the space {what}", source=space.source)
    top = best[0]

    def within(share: float) -> int:
        if maximize:
            return sum(v >= share * top for v in values)
        return sum(v <= top / share for v in values)

    constrained = bool(oracle.constraints)
    per_load = scan.per_load
    return Optimum(
        top,
        best[2],
        scan.count,
        dict(scan.statuses),
        within(0.95),
        within(0.98),
        free if constrained else None,
        scan.violating if constrained else None,
        {k: v[0] for k, v in per_load.items()},
        {k: v[2] for k, v in per_load.items()},
    )


def _better(value: float, best: tuple[float, Any, Any] | None, maximize: bool) -> bool:
    return best is None or (value > best[0] if maximize else value < best[0])


def _first(
    entry: tuple[float, int, Any], best: tuple[float, int, Any] | None, maximize: bool
) -> bool:
    """Whether ``entry`` beats ``best``: a better value, or the same one earlier in the grid."""
    if best is None or _better(entry[0], best, maximize):
        return True
    return entry[0] == best[0] and entry[1] < best[1]


def space_size(space: SearchSpace) -> int:
    return sum(1 for _ in itertools.islice(grid(space), None))
