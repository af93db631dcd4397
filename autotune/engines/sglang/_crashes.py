"""SGLang's crash rules: how its server log is read by the generic classifier.

:class:`SGLangCrashRules` hands the classifier of :mod:`autotune.crashes` the patterns of
:mod:`autotune.engines.sglang._crash_rules`, the advice of
:mod:`autotune.engines.sglang._crash_advice` and the healthy progress lines below: the ready line,
serving lines, start-up steps, the ``--mem-fraction-static`` the server used and the one SGLang's
KV-budget message suggests, and which way a memory crash needs the fraction to move. Progress
lines never decide a crash; they tell how far a start-up got (for advice and for the ``ready`` /
``running`` / ``starting`` verdicts).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import ClassVar, Literal

from autotune.crashes import AdviceContext, LineRules, ModuleCrashRules, Move, Progress
from autotune.engines.sglang import _crash_memory as memory
from autotune.engines.sglang import _crash_rules as rules
from autotune.engines.sglang._crash_advice import advise, moves

READY_TEXT = "The server is fired up and ready to roll"
#: A serving server's batch lines, and its retraction of requests when the KV pool is full
#: ("Decode out of memory happened. #retracted_reqs: 1"): how it goes on serving, not a crash.
_RUNNING = re.compile(
    r"\b(?:Decode|Prefill) batch\b|#retracted_reqs:|KV cache pool is full\. Retract requests"
)
_CAPTURE_BEGIN = re.compile(r"Capture (?:(draft|draft extend|piecewise) )?cuda graph begin", re.I)
_CAPTURE_END = re.compile(r"Capture (?:[\w ]+ )?cuda graph end", re.I)
_CAPTURING = re.compile(r"Capturing batches|Capture cuda graph bs", re.I)
_MEM_FRACTION = re.compile(
    r"mem_fraction_static\s*[=:]\s*([0-9]*\.?[0-9]+)|--mem-fraction-static[= ]+([0-9]*\.?[0-9]+)"
    r"|Current value:\s*([0-9]*\.[0-9]+)"
)
#: Start-up steps by the text of their line, and the words for them.
_STEPS = (
    # the first lines of every launch: the arguments read, torch.distributed being set up
    ("server_args=ServerArgs(", "arguments read"),
    ("Init torch distributed begin", "setting up torch.distributed"),
    ("Load weight begin", "loading weights"),
    ("Load weight end", "weights loaded"),
    ("KV Cache is allocated", "KV cache allocated"),
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


class SGLangCrashRules(ModuleCrashRules):
    """The rule set of SGLang's log (and of the simulated server's, which logs the same)."""

    lines: ClassVar[LineRules] = rules
    tag_hints = rules.TAG_HINTS
    steps = _STEPS

    def is_warning(self, line: str) -> bool:
        """A warning-level line: it can hint at a cause but never decides a crash (a KV pool of
        no tokens decides, at whatever level it is logged)."""
        return super().is_warning(line) and not memory.is_nonpositive_pool(line)

    def settings(self, line: str) -> Mapping[str, str]:
        found = dict(memory.fraction_settings(line))
        value = mem_fraction_value(line)
        if value is not None:
            found["mem_fraction_static"] = value
        return found

    def fraction_fix(self, category: str, evidence: str | None) -> Literal["raise", "lower"] | None:
        """A KV pool that does not fit the budget needs a higher fraction; one that ran out of GPU
        memory while allocated, and CUDA graphs that did not fit, need a lower one."""
        if category == "oom_kv_pool":
            return "lower" if memory.is_cuda_oom(evidence or "") else "raise"
        if category == "oom_cuda_graph":
            return "lower"
        return None

    def pick_cause(self, found: Collection[str]) -> tuple[str, str] | None:
        if (
            "oom_kv_pool" not in found
            and "graph_capture_other" in found
            and "oom_runtime" in found
            and "oom_cuda_graph" not in found
        ):
            # "CUDA graph capture failed." after a plain out-of-memory exception
            return "oom_cuda_graph", "oom_runtime"
        return super().pick_cause(found)

    def progress(self, line: str) -> Progress | None:
        if is_ready(line):
            return Progress("ready", "ready")
        if is_running(line):
            return Progress("running")
        kind = capture_begin(line)
        if kind is not None:
            draft = kind == "draft"
            which = "draft" if draft else "target"
            return Progress("capture_begin", f"capturing the {which} CUDA graphs", draft=draft)
        if is_capture_end(line):
            return Progress("capture_end", "CUDA graphs captured")
        if is_capturing(line):
            return Progress("capturing", "capturing CUDA graphs")
        return self.step(line)

    def advise(self, ctx: AdviceContext) -> str:
        return advise(ctx)

    def moves(self, ctx: AdviceContext) -> tuple[Move, ...]:
        return moves(ctx)


#: The one :class:`SGLangCrashRules` (it holds no state).
SGLANG_CRASH_RULES = SGLangCrashRules()
