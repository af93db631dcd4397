"""The vLLM adapter: ``vllm serve MODEL ...`` in the flags of the installed release."""

from __future__ import annotations

from autotune.engines.vllm._adapter import METHODS, VLLMEngine, build_serve_args
from autotune.engines.vllm._crashes import VLLM_CRASH_RULES, VLLMCrashRules
from autotune.engines.vllm._flags import VLLMFlags, detect_flags, known_flags, known_releases
from autotune.engines.vllm._serving import (
    READINESS,
    READY_LINE,
    VLLM_API,
    VLLMServerApi,
    acceptance_from_metrics,
)

__all__ = [
    "METHODS",
    "READINESS",
    "READY_LINE",
    "VLLM_API",
    "VLLM_CRASH_RULES",
    "VLLMCrashRules",
    "VLLMEngine",
    "VLLMFlags",
    "VLLMServerApi",
    "acceptance_from_metrics",
    "build_serve_args",
    "detect_flags",
    "known_flags",
    "known_releases",
]
