"""Search spaces: the YAML file a user writes, validated.

``load_space("search_spaces/eagle3.yaml")`` reads a space file into a :class:`SearchSpace`:
the engine to launch, the workload to measure, the objective, the fixed knobs, the tuned
parameters (Optuna distributions, conditional ones included) and the trials to run first.
What the engine refuses or rewrites is the engine's to say
(:meth:`autotune.engines.Engine.check_rules`); a space that it would refuse throughout, and
enqueued configurations it would refuse, are refused when the file is read.
"""

from __future__ import annotations

from autotune.space._confirm import ConfirmSpec
from autotune.space._loads import LoadPoint, weighted_mean
from autotune.space._params import ParamSpec
from autotune.space._schema import load_space, parse_space
from autotune.space._space import METRICS, ConstraintSpec, ObjectiveSpec, SearchSpace

__all__ = [
    "METRICS",
    "ConfirmSpec",
    "ConstraintSpec",
    "LoadPoint",
    "ObjectiveSpec",
    "ParamSpec",
    "SearchSpace",
    "load_space",
    "parse_space",
    "weighted_mean",
]
