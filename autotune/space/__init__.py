"""Search spaces: the YAML file a user writes, validated, and SGLang's own rules.

``load_space("search_spaces/eagle3.yaml")`` reads a space file into a :class:`SearchSpace`:
the engine to launch, the workload to measure, the objective, the fixed knobs, the tuned
parameters (Optuna distributions, conditional ones included) and the trials to run first.
:func:`check_rules` refuses, before launch, configurations SGLang would refuse or rewrite.
"""

from __future__ import annotations

from autotune.space._params import ParamSpec
from autotune.space._rules import check_rules
from autotune.space._schema import load_space, parse_space
from autotune.space._space import METRICS, ConstraintSpec, ObjectiveSpec, SearchSpace

__all__ = [
    "METRICS",
    "ConstraintSpec",
    "ObjectiveSpec",
    "ParamSpec",
    "SearchSpace",
    "check_rules",
    "load_space",
    "parse_space",
]
