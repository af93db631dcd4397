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


def find_optimum(space: SearchSpace, oracle: Oracle, engine: Engine | None = None) -> Optimum:
    """The best configuration of ``space`` by ``oracle``, skipping what ``engine``'s rules refuse
    (the space's own engine when not given)."""
    engine = engine or create_engine(space.engine)
    maximize = space.objective.direction == "maximize"
    statuses: Counter[str] = Counter()
    values: list[float] = []
    best: tuple[float, dict[str, Any]] | None = None
    free: float | None = None
    violating = 0
    per_load: dict[str, tuple[float, dict[str, Any]]] = {}
    count = 0
    for params in grid(space):
        count += 1
        config = space.config_for(params)
        refused = engine.check_rules(config)
        if refused is not None:
            statuses[f"refused:{refused.category}"] += 1
            continue
        answer = oracle.answer(config)
        statuses[answer.status] += 1
        if answer.value is None:
            continue
        if free is None or (answer.value > free if maximize else answer.value < free):
            free = answer.value
        if oracle.violated(answer):
            violating += 1
            continue
        values.append(answer.value)
        if _better(answer.value, best, maximize):
            best = (answer.value, params)
        for label, figures in answer.loads.items():
            value = figures.get("value")
            if value is not None and _better(value, per_load.get(label), maximize):
                per_load[label] = (value, params)
    if best is None:
        what = "meets the constraints" if free is not None else "starts"
        raise ConfigError(f"no configuration of the space {what}", source=space.source)
    top = best[0]

    def within(share: float) -> int:
        if maximize:
            return sum(v >= share * top for v in values)
        return sum(v <= top / share for v in values)

    constrained = bool(oracle.constraints)
    return Optimum(
        top,
        best[1],
        count,
        dict(statuses),
        within(0.95),
        within(0.98),
        free if constrained else None,
        violating if constrained else None,
        {k: v[0] for k, v in per_load.items()},
        {k: v[1] for k, v in per_load.items()},
    )


def _better(value: float, best: tuple[float, Any] | None, maximize: bool) -> bool:
    return best is None or (value > best[0] if maximize else value < best[0])


def space_size(space: SearchSpace) -> int:
    return sum(1 for _ in itertools.islice(grid(space), None))
