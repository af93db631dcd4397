"""The simulated SGLang server and the model behind it.

``python -m autotune.sim --model-path M [SGLang flags] [--sim-* options]`` (or ``autotune sim
serve``) starts a server with SGLang's command line, start-up log, crashes and HTTP endpoints,
paced by :class:`SimModel`; ``autotune sim eval`` asks the model directly, without a server.
"""

from __future__ import annotations

from autotune.sim._args import DEFAULT_PROFILE, DIALECTS
from autotune.sim._faults import FaultPlan, parse_fault
from autotune.sim._model import SimModel
from autotune.sim._profile import Profile, load_profile

__all__ = [
    "DEFAULT_PROFILE",
    "DIALECTS",
    "FaultPlan",
    "Profile",
    "SimModel",
    "load_profile",
    "parse_fault",
]
