"""Engine adapters: how a configuration in canonical knobs becomes a server launch.

:func:`create_engine` picks the adapter of a space's ``engine.kind``: :class:`SGLangEngine` drives
``python -m sglang.launch_server`` in the flags of the installed release (detected, or from
``engine.sglang_version``); :class:`SimEngine` drives the simulated server, which speaks the same
command line. Both build a :class:`LaunchSpec` (argv, environment, secrets to redact), refuse
before launch what the release cannot express, and report hardware and weight sizes.
"""

from __future__ import annotations

from autotune.engines._base import READY_LINE, Engine, Hardware, Infeasible, create_engine
from autotune.engines._detect import detect_flagset
from autotune.engines._dialects import FlagSet, OptionInfo, dialect_for, known_flagset
from autotune.engines._redact import is_secret_name, redact_argv, redact_env, redact_text
from autotune.engines._sglang import SGLangEngine, max_running_requests_for
from autotune.engines._sim import SimEngine
from autotune.engines._spec import ENGINE_KINDS, EngineSpec, LaunchSpec, SimOptions, Timeouts

__all__ = [
    "ENGINE_KINDS",
    "READY_LINE",
    "Engine",
    "EngineSpec",
    "FlagSet",
    "Hardware",
    "Infeasible",
    "LaunchSpec",
    "OptionInfo",
    "SGLangEngine",
    "SimEngine",
    "SimOptions",
    "Timeouts",
    "create_engine",
    "detect_flagset",
    "dialect_for",
    "is_secret_name",
    "known_flagset",
    "max_running_requests_for",
    "redact_argv",
    "redact_env",
    "redact_text",
]
