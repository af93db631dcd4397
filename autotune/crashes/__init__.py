"""Crash classification of SGLang server logs.

``classify_text`` / ``classify_file`` give the verdict on a whole log; ``LiveClassifier`` reads a
starting server's log line by line and names a crash at the line that decides it. Every verdict
carries the deciding line, its line number and advice on what to change.
"""

from __future__ import annotations

from autotune.crashes._classifier import (
    Classification,
    LiveClassifier,
    classify_file,
    classify_text,
)
from autotune.crashes._rules import CRASH_CATEGORIES, HEALTHY_CATEGORIES

__all__ = [
    "CRASH_CATEGORIES",
    "HEALTHY_CATEGORIES",
    "Classification",
    "LiveClassifier",
    "classify_file",
    "classify_text",
]
