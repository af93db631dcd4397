"""The SGLang adapter: ``sglang serve`` in the flags of the installed release."""

from __future__ import annotations

from autotune.engines.sglang._adapter import SGLangEngine
from autotune.engines.sglang._crashes import SGLANG_CRASH_RULES, SGLangCrashRules
from autotune.engines.sglang._detect import detect_flagset
from autotune.engines.sglang._dialects import FlagSet, OptionInfo, dialect_for, known_flagset
from autotune.engines.sglang._rules import SGLangRules, max_running_requests_for
from autotune.engines.sglang._serving import (
    READINESS,
    READY_LINE,
    SGLANG_API,
    SGLangServerApi,
    acceptance_from_server,
)

__all__ = [
    "READINESS",
    "READY_LINE",
    "SGLANG_API",
    "SGLANG_CRASH_RULES",
    "FlagSet",
    "OptionInfo",
    "SGLangCrashRules",
    "SGLangEngine",
    "SGLangRules",
    "SGLangServerApi",
    "acceptance_from_server",
    "detect_flagset",
    "dialect_for",
    "known_flagset",
    "max_running_requests_for",
]
