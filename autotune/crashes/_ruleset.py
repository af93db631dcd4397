"""What a crash classifier asks of an engine: the rule set that reads its server's log lines.

The classifier (:mod:`autotune.crashes._classifier`) is generic: it follows a log line by line,
keeps tracebacks, start-up phases and findings, and weighs specific causes against generic signs
of a crash. What the lines *mean* is the engine's: an adapter gives a :class:`CrashRules`
(:meth:`Engine.crash_rules <autotune.engines.Engine.crash_rules>`) whose methods each answer one
question about one normalised line (see :mod:`autotune.crashes._lines`): a specific cause, a
generic sign of a crash, a hint, a healthy start-up step, a setting's value, and the advice for
a verdict. Python's and PyTorch's own log shapes (traceback frames, exception lines, ``^^^``
marks, torch's ``[E...]`` error lines), which every Python engine shares, are read here by
default.

Crash categories are the tuner's vocabulary, the same for every engine: :data:`CRASH_CATEGORIES`
and :data:`HEALTHY_CATEGORIES`.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

#: The crash categories, most specific first.
CRASH_CATEGORIES: tuple[str, ...] = (
    "oom_kv_pool",
    "oom_cuda_graph",
    "oom_runtime",
    "unsupported_arch",
    "graph_capture_other",
    "nccl_error",
    "bad_args",
    "port_in_use",
    "other_crash",
    "unknown_crash",
)
#: When a log shows several specific causes, the first of these wins (every engine's order unless
#: its rules say otherwise). A port taken comes late (a server that died of something else never
#: got to bind it); NCCL failures come last: they are usually the other ranks noticing that one
#: rank died of something else.
CAUSE_PRIORITY: tuple[str, ...] = (
    "oom_kv_pool",
    "oom_cuda_graph",
    "graph_capture_other",
    "oom_runtime",
    "unsupported_arch",
    "bad_args",
    "port_in_use",
    "other_crash",
    "nccl_error",
)
#: The crash category of a log whose server is gone (it exited, or the log shows only generic signs
#: of a crash: a traceback cut before its exception, a wrapper's "hit an exception") while nothing
#: in it decides why; its advice names what was found and never a knob.
UNKNOWN_CRASH = "unknown_crash"
#: The kinds of evidence a verdict can rest on, strongest first: the final exception's type and
#: message (or a line that names its cause as plainly: an argparse error, NCCL's own error line);
#: the frame the exception was raised in (the innermost one a cut traceback shows; a frame the
#: traceback only passed through, such as a capture context or a wrapper, decides nothing); the
#: engine's own memory and start-up messages (a KV budget at or below zero, "Capture cuda graph
#: begin"); the process's state (exited with a code, killed by a signal, alive).
EVIDENCE_KINDS: tuple[str, ...] = ("exception", "raise_frame", "engine_message", "process_state")
#: Which evidence may decide each crash category (the same for every engine); the classifier gives
#: a category from a cut traceback's frames only where ``raise_frame`` is listed (``other_crash``
#: needs the final error's own words). A category the log does not decide is not given: the
#: verdict falls to :data:`UNKNOWN_CRASH` when a crash is certain (a traceback, a fatal line, a
#: process known to be gone), to "starting" while the process is alive or the log ends in a
#: known start-up step, and to :data:`UNDECIDED` otherwise. ``engine_message``: the engine's
#: memory and start-up lines (a KV budget at or below zero, CUDA-graph capture under way).
DECIDED_BY: Mapping[str, tuple[str, ...]] = {
    "oom_kv_pool": ("exception", "raise_frame", "engine_message"),
    "oom_cuda_graph": ("exception", "raise_frame", "engine_message"),
    "oom_runtime": ("exception", "raise_frame"),
    "unsupported_arch": ("exception", "raise_frame"),
    "graph_capture_other": ("exception", "raise_frame", "engine_message"),
    "nccl_error": ("exception", "raise_frame"),
    "bad_args": ("exception", "raise_frame"),
    "port_in_use": ("exception", "raise_frame"),
    "other_crash": ("exception",),
    "unknown_crash": ("process_state",),
}
#: Crash causes that no tuned setting cures, named by the final error's message the same way for
#: every engine (``other_crash``): the engine does not serve the model's architecture; a compiled
#: extension does not load (an installation whose parts do not match); the host ran out of memory
#: (its OOM killer ended the job, or torch's CPU allocator failed).
NOT_A_SETTING = re.compile(
    r"Model architectures?\b.{0,300}?\bnot supported"
    r"|\bundefined symbol: \w|Could not load any common_ops library"
    r"|\boom[-_]kill\b|\btask \d+: Out Of Memory|CPUAllocator: not enough memory",
    re.I,
)
#: A kernel that does not support the model's shapes on this GPU ("This flash attention build does
#: not support headdim not being a multiple of 32", "Unsupported head_dim: 96", FlashInfer's
#: "Invalid configuration : NUM_MMA_Q=...", Triton's "out of resource: shared memory"): the backend
#: must change, as for a kernel that does not support the GPU (``unsupported_arch``).
KERNEL_SHAPE = re.compile(
    r"(?:does not|doesn't|do not) support head[ _]?(?:dim|size)"
    r"|\bUnsupported head[ _]?(?:dim|size)\b|head[ _]?(?:dim|size) \d+ (?:is )?not supported"
    # FlashInfer's checks of a kernel's tile configuration and of the head dim it takes
    r"|\bInvalid configuration : NUM_MMA|\bExpect \(\d+ <= headDim"
    # a Triton kernel whose tiles need more shared memory than this GPU has
    r"|out of resource: shared memory",
    re.I,
)
#: A backend named in the settings that a part of the model refuses ("Attention backend 'sage_attn'
#: is not supported by this attention layer"): the setting's value must change (``bad_args``).
BACKEND_REFUSED = re.compile(r"\bbackend '[^']+' is not supported\b", re.I)
#: torch's other collective backend failing to connect the ranks ("Gloo connectFullMesh failed"):
#: the same cause as an NCCL set-up failure (``nccl_error``).
COMM_SETUP = re.compile(r"\bGloo connectFullMesh failed|\bProcessGroupGloo\S*\s.{0,80}failed", re.I)
#: An ``assert`` statement a traceback shows in the frame that raised it, whose message names the
#: GPU generations the kernel runs on ('assert arch // 10 == 10, "FP8 is only supported on SM100
#: ..."'): the kernel does not support this GPU (``unsupported_arch``), even when the excerpt
#: ends before the AssertionError line.
ASSERT_ARCH = re.compile(
    r"^\s*assert\b.*,\s*f?[\"'].*?\b(?:only supported on|only supports?|requires?)\s+"
    r"(?:SM|sm_?)\s*\d{2,3}",
    re.I,
)
#: A knob and the way a verdict's advice moves it: ``("mem_fraction_static", "raise")``. The
#: directions are ``raise``, ``lower``, ``enable``, ``disable``, ``change`` (pick another value,
#: such as another backend), ``fix`` (the value is invalid) and ``check`` (a system setting).
Move = tuple[str, str]
#: The verdicts on a log that shows no crash.
HEALTHY_CATEGORIES: tuple[str, ...] = ("ready", "running", "starting")
#: The verdict on a log that shows no start-up step of the engine's, no sign of a crash and no
#: exit status, read when its process is not known to be alive: nothing says whether a server
#: is starting, crashed, or wrote it at all (an excerpt too short, another program's output).
#: Neither a crash nor "starting"; its advice names no knob.
UNDECIDED = "undecided"

#: Frame tags the classifier itself adds from the start-up phase: the draft model's CUDA graphs
#: were being captured; weights were being loaded.
TAG_DRAFT = "draft"
TAG_LOADING = "loading"
#: The verdict comes from the frames of a traceback cut before its exception line: they tell what
#: the code was doing, not what failed, so advice must not name a cause the frames do not show.
TAG_UNFINISHED = "unfinished"
#: With :data:`TAG_UNFINISHED`: the evidence frame is the innermost one the excerpt shows (the
#: error was raised in it or below it), not one the traceback only passed through (a context
#: manager's ``yield``, a wrapper).
TAG_INNERMOST = "innermost"

_FRAME = re.compile(r'^\s*File "([^"]*)"?(?:, line \d*)?(?:, in ([\w<>.]+))?')
_EXCEPTION = re.compile(
    r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault))"
    r"(?::\s*(.*))?$"
)
_CPP_WHAT = re.compile(r"^\s*what\(\):\s*(.*)$")
# the last line of an excerpt cut inside the name of torch's out-of-memory exception ("torch.O",
# "torch.cuda.OutOfMem"): no other exception in torch's or torch.cuda's namespace starts so
_CUT_OOM_NAME = re.compile(
    r"^\s*torch\.(?:cuda\.)?O(?:u(?:t(?:O(?:f(?:M(?:e(?:m(?:o(?:r(?:y(?:E(?:r(?:r(?:o)?)?)?)?)?)?)?)?)?)?)?)?)?)?\s*$"
)
_SOURCE_MARKS = re.compile(r"^\s*[\^~]+\s*$")
# the rest of a frame line that a terminal wrapped after the file's path: ', line 257, in __init__'
_FRAME_TAIL = re.compile(r"^\s*, line \d+(?:, in ([\w<>.]+))?\s*$")
_CALL = re.compile(r"([A-Za-z_]\w*)\s*\(")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
# a Python statement, as a traceback shows it under a frame: "raise RuntimeError(...)",
# "return GroupCoordinator(", "self.x = f(", "initialize_model_parallel(" (not "ValueError(...)")
_STATEMENT = re.compile(
    r"^\s*(?:(?:raise|return|yield|await|assert|del|with|if|for|while|elif)\s"
    r"|(?!\w*(?:Error|Exception|Warning)\()[A-Za-z_][\w.]*(?:\[[^\]]*\])?"
    r"(?:\s*:\s*[\w.\[\], ]+)?(?:\s+[-+*/|&]?=\s|\())"
)
_C10_ERROR = re.compile(r"^\s*\[E\d{3,4}[ \]]")  # [E1118 ...], [E130 ...] (month 1, day 30)
#: A CUDA runtime error as PyTorch, a kernel library or a C++ check reports it: "CUDA error: an
#: illegal memory access was encountered", "Cuda error /workspace/csrc/custom_all_reduce.cuh:164
#: 'invalid argument'", "CUDA error (csrc/get_mla_metadata.cu:93): ...", "cudaErrorIllegalAddress",
#: "CUDA_ERROR_LAUNCH_FAILED". What it means depends on when it came: while CUDA graphs were being
#: captured it is that capture failing (an engine's rules decide; the more specific causes, out of
#: memory or no kernel image for the GPU, are read first).
CUDA_ERROR = re.compile(r"\bCUDA error\b|\bcudaError[A-Z]\w*|\bCUDA_ERROR_[A-Z_]+", re.I)
#: Custom all-reduce named in a failing line (its CUDA source, its Python module, the registration
#: of a captured graph's buffers): an all-reduce mode an engine can switch off.
CUSTOM_ALL_REDUCE = re.compile(r"custom[_ ]all[_-]?reduce|\b(?:register|get)_graph_buffer", re.I)


@dataclass(frozen=True)
class Progress:
    """A healthy start-up step that one log line shows.

    ``kind``: the server is ``ready`` or ``running`` (serving), a CUDA-graph capture begins
    (``capture_begin``; ``draft``: of the draft model), ends (``capture_end``) or goes on
    (``capturing``), or another ``step`` was reached. ``phase`` names the step in words (for
    advice: "last step seen"); ``loading``: the step begins loading the weights.
    """

    kind: Literal["ready", "running", "capture_begin", "capture_end", "capturing", "step"]
    phase: str | None = None
    draft: bool = False
    loading: bool = False


@dataclass(frozen=True)
class AdviceContext:
    """What the advice on a verdict may draw on besides the category.

    ``settings`` are values the log shows (``{"mem_fraction_static": "0.88"}``); ``tags`` what
    the failing code was doing (frame tags of the engine's rules, and :data:`TAG_DRAFT`,
    :data:`TAG_LOADING`, :data:`TAG_UNFINISHED`); ``phase`` names the last start-up step seen
    (for ``starting``); ``exit_code`` is the server process's exit status where the caller knows
    it (negative: killed by that signal).
    """

    category: str
    evidence: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    tags: frozenset[str] = frozenset()
    phase: str | None = None
    exit_code: int | None = None

    @property
    def draft(self) -> bool:
        return TAG_DRAFT in self.tags


class CrashRules(abc.ABC):
    """One engine's reading of its server log (see the module docstring).

    ``cause_priority``: when a log shows several specific causes, the first of these wins
    (:data:`CAUSE_PRIORITY` by default).
    ``tag_hints``: which category an unfinished traceback (frames, no exception line) points to,
    by the frame tags it shows, best first.
    """

    cause_priority: tuple[str, ...] = CAUSE_PRIORITY
    tag_hints: tuple[tuple[str, str], ...] = ()

    # --- the engine's own reading ------------------------------------------------------------
    @abc.abstractmethod
    def specific_cause(
        self,
        line: str,
        exception: tuple[str, str] | None,
        tags: frozenset[str],
        capture_phase: bool,
    ) -> tuple[str, int] | None:
        """The crash category a non-warning line names by itself or with its traceback's
        frames, and where in the line the deciding text starts.

        ``exception`` is the line parsed by :meth:`parse_exception`; ``tags`` the frame tags of
        the traceback the line ends; ``capture_phase`` says that CUDA-graph capture had begun
        and not ended.
        """

    @abc.abstractmethod
    def is_strong_crash(self, line: str) -> bool:
        """A line that only a dying server prints (a generic sign: the cause may follow)."""

    @abc.abstractmethod
    def frame_tags(self, path: str, func: str) -> frozenset[str]:
        """What the code of one traceback frame was doing, as far as its file and function
        tell."""

    @abc.abstractmethod
    def progress(self, line: str) -> Progress | None:
        """The healthy start-up step a line shows, if any."""

    @abc.abstractmethod
    def advise(self, ctx: AdviceContext) -> str:
        """One or two sentences: what happened, in terms of the settings, and what to change."""

    def moves(self, ctx: AdviceContext) -> tuple[Move, ...]:
        """The knobs :meth:`advise` moves for this verdict, and which way (none by default): the
        machine-readable form of the advice, checked for direction by the tests."""
        return ()

    def may_matter(self, line: str) -> bool:
        """False for lines no rule looks at (a fast filter: most log lines are neither)."""
        return True

    def is_noise(self, line: str) -> bool:
        """Lines known to be harmless however alarming they look."""
        return False

    def is_warning(self, line: str) -> bool:
        """A warning-level line: it can hint at a cause but never decides a crash."""
        return False

    def hint_of(self, line: str) -> tuple[str, int] | None:
        """A category a line suggests without deciding it, and where the text starts."""
        return None

    def settings(self, line: str) -> Mapping[str, str]:
        """Values of the engine's settings that a line shows, by knob name (for advice)."""
        return {}

    def fraction_fix(self, category: str, evidence: str | None) -> Literal["raise", "lower"] | None:
        """Which way the static memory fraction must move to cure a crash of ``category`` whose
        deciding line was ``evidence``, or ``None`` when the verdict does not say (by default)."""
        return None

    def shared_cause(self, line: str) -> tuple[str, int] | None:
        """The category an error line names in words every engine shares, asked when the
        engine's :meth:`specific_cause` names none: a kernel refusing the model's shapes
        (:data:`KERNEL_SHAPE`), Gloo failing to connect the ranks (:data:`COMM_SETUP`), a backend
        setting refused (:data:`BACKEND_REFUSED`), a cause no setting cures
        (:data:`NOT_A_SETTING`, ``other_crash``); and where its text starts."""
        for pattern, category in (
            (KERNEL_SHAPE, "unsupported_arch"),
            (COMM_SETUP, "nccl_error"),
            (BACKEND_REFUSED, "bad_args"),
            (NOT_A_SETTING, "other_crash"),
        ):
            m = pattern.search(line)
            if m is not None:
                return category, m.start()
        return None

    def pick_cause(self, found: Collection[str]) -> tuple[str, str] | None:
        """The verdict among the specific causes ``found``: ``(category, category whose
        finding is the evidence)``; by default the first of :attr:`cause_priority`."""
        for category in self.cause_priority:
            if category in found:
                return category, category
        return None

    # --- Python's and PyTorch's log shapes ---------------------------------------------------
    def parse_frame(self, line: str) -> tuple[str, str] | None:
        """``(path, function)`` of a traceback frame line (either may be empty when cut)."""
        m = _FRAME.match(line)
        if m is None:
            return None
        return m.group(1), m.group(2) or ""

    def parse_frame_tail(self, line: str) -> str | None:
        """The function of a frame whose line was wrapped after its path (the next line reads
        ``, line 257, in __init__``), ``""`` when the tail names none, ``None`` when ``line``
        is not such a tail."""
        m = _FRAME_TAIL.match(line)
        if m is None:
            return None
        return m.group(1) or ""

    def called_function(self, source: str) -> str:
        """The function a traceback source line calls (``self.init_memory_pool(x)``), or
        ``""``."""
        m = _CALL.search(source)
        return m.group(1) if m else ""

    def is_source_code(self, line: str) -> bool:
        """A traceback source line pasted without its indentation (a Python statement that is
        not an exception line); only asked of the line right under a frame."""
        return self.parse_exception(line) is None and _STATEMENT.match(line) is not None

    def is_source_marks(self, line: str) -> bool:
        """A line of ``^^^^`` / ``~~~`` under a traceback source line."""
        return _SOURCE_MARKS.match(line) is not None

    def parse_exception(self, line: str) -> tuple[str, str] | None:
        """``(type, message)`` of a Python exception line or a C++ ``what():`` line."""
        m = _EXCEPTION.match(line)
        if m is not None:
            name = m.group(1)
            return name.rsplit(".", 1)[-1], m.group(2) or ""
        w = _CPP_WHAT.match(line)
        if w is not None:
            return "what()", w.group(1)
        if _CUT_OOM_NAME.match(line):
            return "OutOfMemoryError", ""
        return None

    def is_traceback_start(self, line: str) -> bool:
        return _TRACEBACK.search(line) is not None

    def is_c10_error(self, line: str) -> bool:
        """A torch C++ error-level log line (``[E1118 10:23:45 ...]``)."""
        return _C10_ERROR.match(line) is not None

    def is_interruption(self, exception: tuple[str, str]) -> bool:
        """A traceback that ends in Ctrl-C or a clean exit: the server was stopped, not
        crashed."""
        return exception[0] in ("KeyboardInterrupt", "SystemExit")
