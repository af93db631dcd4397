"""The simulated-engine adapters: SGLang's command line (``engine.kind: sim``) or vLLM's
(``engine.kind: sim-vllm``), run by ``python -m autotune.sim``."""

from __future__ import annotations

from autotune.engines.sim._adapter import SIM_DIALECTS, SimEngine, check_sim_options
from autotune.engines.sim._vllm import SIM_VLLM_RELEASES, SimVLLMEngine

__all__ = ["SIM_DIALECTS", "SIM_VLLM_RELEASES", "SimEngine", "SimVLLMEngine", "check_sim_options"]
