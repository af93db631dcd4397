"""The simulated SGLang and vLLM servers and the model behind them.

``python -m autotune.sim --model-path M [SGLang flags] [--sim-* options]`` (or ``autotune sim
serve``) starts a server with SGLang's command line, start-up log, crashes and HTTP endpoints;
``python -m autotune.sim serve M [vllm serve flags] [--sim-* options]`` one with vLLM's. Both are
paced by :class:`SimModel` (``engine="vllm"``: vLLM's memory rule and defaults); ``autotune sim
eval`` asks the model directly, without a server.
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
