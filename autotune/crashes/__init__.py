"""Crash classification of server logs, by the rules of the engine that wrote them.

``classify_text`` / ``classify_file`` give the verdict on a whole log; ``LiveClassifier`` reads a
starting server's log line by line and names a crash at the line that decides it. Every verdict
carries the deciding line, its line number and advice on what to change. What the lines mean is
an engine's :class:`CrashRules` (SGLang's comes from its adapter: ``Engine.crash_rules()``); this
package holds the generic machinery: line normalisation, the classifier, the verdict, the
crash categories every engine shares, and :class:`ModuleCrashRules`, a rule set built from an
engine's module of line rules and its :class:`LineMarks`.
"""

from __future__ import annotations

from autotune.crashes._classifier import (
    Classification,
    LiveClassifier,
    classify_file,
    classify_text,
)
from autotune.crashes._module_rules import LineMarks, LineRules, ModuleCrashRules
from autotune.crashes._ruleset import (
    BACKEND_REFUSED,
    CAUSE_PRIORITY,
    CRASH_CATEGORIES,
    CUDA_ERROR,
    CUSTOM_ALL_REDUCE,
    DECIDED_BY,
    EVIDENCE_KINDS,
    HEALTHY_CATEGORIES,
    KERNEL_SHAPE,
    NOT_A_SETTING,
    TAG_DRAFT,
    TAG_INNERMOST,
    TAG_LOADING,
    TAG_UNFINISHED,
    UNDECIDED,
    UNKNOWN_CRASH,
    AdviceContext,
    CrashRules,
    Move,
    Progress,
)

__all__ = [
    "BACKEND_REFUSED",
    "CAUSE_PRIORITY",
    "CRASH_CATEGORIES",
    "CUDA_ERROR",
    "CUSTOM_ALL_REDUCE",
    "DECIDED_BY",
    "EVIDENCE_KINDS",
    "HEALTHY_CATEGORIES",
    "KERNEL_SHAPE",
    "NOT_A_SETTING",
    "TAG_DRAFT",
    "TAG_INNERMOST",
    "TAG_LOADING",
    "TAG_UNFINISHED",
    "UNDECIDED",
    "UNKNOWN_CRASH",
    "AdviceContext",
    "Classification",
    "CrashRules",
    "LineMarks",
    "LineRules",
    "LiveClassifier",
    "ModuleCrashRules",
    "Move",
    "Progress",
    "classify_file",
    "classify_text",
]
