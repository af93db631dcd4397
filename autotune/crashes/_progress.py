"""Healthy progress in an SGLang log: the ready line, serving lines, start-up steps, settings.

These lines never decide a crash; they tell how far a start-up got (for advice and for the
``ready`` / ``running`` / ``starting`` verdicts) and which ``--mem-fraction-static`` was used.
"""

from __future__ import annotations

import re

READY_TEXT = "The server is fired up and ready to roll"
_RUNNING = re.compile(r"\b(?:Decode|Prefill) batch\b")
_CAPTURE_BEGIN = re.compile(r"Capture (?:(draft|draft extend|piecewise) )?cuda graph begin", re.I)
_CAPTURE_END = re.compile(r"Capture (?:[\w ]+ )?cuda graph end", re.I)
_CAPTURING = re.compile(r"Capturing batches|Capture cuda graph bs", re.I)
_MEM_FRACTION = re.compile(
    r"mem_fraction_static\s*[=:]\s*([0-9]*\.?[0-9]+)|--mem-fraction-static[= ]+([0-9]*\.?[0-9]+)"
    r"|Current value:\s*([0-9]*\.[0-9]+)"
)


def is_ready(line: str) -> bool:
    return READY_TEXT in line


def is_running(line: str) -> bool:
    return _RUNNING.search(line) is not None


def capture_begin(line: str) -> str | None:
    """``"target"`` or ``"draft"`` when the line starts a CUDA-graph capture, else ``None``."""
    m = _CAPTURE_BEGIN.search(line)
    if m is None:
        return None
    return "draft" if m.group(1) and m.group(1).startswith("draft") else "target"


def is_capture_end(line: str) -> bool:
    return _CAPTURE_END.search(line) is not None


def is_capturing(line: str) -> bool:
    return _CAPTURING.search(line) is not None


def mem_fraction_value(line: str) -> str | None:
    """The ``--mem-fraction-static`` value a line shows (server args, an error message)."""
    m = _MEM_FRACTION.search(line)
    if m is None:
        return None
    return next(g for g in m.groups() if g)
