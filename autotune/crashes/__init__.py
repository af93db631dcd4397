"""Crash classification of server logs, by the rules of the engine that wrote them.

``classify_text`` / ``classify_file`` give the verdict on a whole log; ``LiveClassifier`` reads a
starting server's log line by line and names a crash at the line that decides it. Every verdict
carries the deciding line, its line number and advice on what to change. What the lines mean is
an engine's :class:`CrashRules` (SGLang's comes from its adapter: ``Engine.crash_rules()``); this
package holds the generic machinery: line normalisation, the classifier, the verdict and the
crash categories every engine shares.
"""

from __future__ import annotations

from autotune.crashes._classifier import (
    Classification,
    LiveClassifier,
    classify_file,
    classify_text,
)
from autotune.crashes._ruleset import (
    CRASH_CATEGORIES,
    HEALTHY_CATEGORIES,
    TAG_DRAFT,
    TAG_LOADING,
    AdviceContext,
    CrashRules,
    Progress,
)

__all__ = [
    "CRASH_CATEGORIES",
    "HEALTHY_CATEGORIES",
    "TAG_DRAFT",
    "TAG_LOADING",
    "AdviceContext",
    "Classification",
    "CrashRules",
    "LiveClassifier",
    "Progress",
    "classify_file",
    "classify_text",
]
