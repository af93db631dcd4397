"""Engine adapters: everything the tuner knows about an engine, behind one :class:`Engine`.

:func:`create_engine` picks the adapter of a space's ``engine.kind`` (:func:`engine_class` its
class, for what is known before one is built: its part of the space file's engine section, the
flags it owns). :class:`SGLangEngine` (``autotune.engines.sglang``) drives
``python -m sglang.launch_server`` in the flags of the installed release (detected, or from
``engine.sglang_version``); :class:`SimEngine` (``autotune.engines.sim``) drives the simulated
server, which speaks the same command line; :class:`VLLMEngine` (``autotune.engines.vllm``) drives
``vllm serve`` in the flags of the installed vLLM (or of ``engine.vllm_version``). Each builds a
:class:`LaunchSpec` (argv, environment, secrets to redact) and refuses before launch what the
release cannot express. The two SGLang adapters judge with SGLang's own knowledge
(``autotune.engines.sglang._rules``): its argument rules and draft tree, its automatic
speculative choice, its known incompatibilities by GPU architecture, and its running-request
cap; the vLLM adapter with vLLM's (one draft chain, its memory share, its flags).
"""

from __future__ import annotations

from autotune._knobs import Infeasible
from autotune._launch import LaunchSpec, Timeouts
from autotune._redact import is_secret_name, redact_argv, redact_env, redact_text
from autotune.engines._base import Engine, Hardware, LoadSchedule
from autotune.engines._memory import MemoryReading
from autotune.engines._registry import create_engine, engine_class, engine_kinds, server_api_for
from autotune.engines._serving import (
    ACCEPTANCE_SOURCES,
    NO_DRAFT_STATS,
    Acceptance,
    DraftStats,
    ServerApi,
)
from autotune.engines._spec import EngineSpec, SimOptions
from autotune.engines.sglang import (
    READY_LINE,
    FlagSet,
    OptionInfo,
    SGLangEngine,
    detect_flagset,
    dialect_for,
    known_flagset,
    max_running_requests_for,
)
from autotune.engines.sim import SimEngine
from autotune.engines.vllm import VLLMEngine

__all__ = [
    "ACCEPTANCE_SOURCES",
    "NO_DRAFT_STATS",
    "READY_LINE",
    "Acceptance",
    "DraftStats",
    "Engine",
    "EngineSpec",
    "FlagSet",
    "Hardware",
    "Infeasible",
    "LaunchSpec",
    "LoadSchedule",
    "MemoryReading",
    "OptionInfo",
    "SGLangEngine",
    "ServerApi",
    "SimEngine",
    "SimOptions",
    "Timeouts",
    "VLLMEngine",
    "create_engine",
    "detect_flagset",
    "dialect_for",
    "engine_class",
    "engine_kinds",
    "is_secret_name",
    "known_flagset",
    "max_running_requests_for",
    "redact_argv",
    "redact_env",
    "redact_text",
    "server_api_for",
]
