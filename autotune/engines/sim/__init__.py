"""The simulated-SGLang adapter: SGLang's command line, run by ``python -m autotune.sim``."""

from __future__ import annotations

from autotune.engines.sim._adapter import SIM_DIALECTS, SimEngine, check_sim_options

__all__ = ["SIM_DIALECTS", "SimEngine", "check_sim_options"]
