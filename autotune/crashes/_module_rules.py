"""A rule set built from an engine's rule module: the questions about one line, answered there.

An engine keeps what its log lines mean in a module of plain functions (SGLang's
:mod:`autotune.engines.sglang._crash_rules`, vLLM's :mod:`autotune.engines.vllm._crash_rules`):
the specific cause a line names, what a traceback frame was doing, the hint a line gives. The
cheap questions the classifier asks of every line (could it matter at all, is it known noise, is
it a warning, does only a dying server print it) are the same test over each engine's own words:
:class:`LineMarks` holds those words. :class:`ModuleCrashRules` joins the two into a
:class:`~autotune.crashes.CrashRules`; an engine's subclass adds its progress lines, settings and
advice.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from autotune.crashes._ruleset import CrashRules, Progress

#: A warning-level line as Python's logging, PyTorch's C++ log, glog and NCCL print one.
WARNING_LINE = re.compile(r"\bWARNING\b|\bWARN\b|Warning:|\w+Warning\b|^\s*\[W[\d ]|^\s*W\d{4} ")


#: An engine's ``specific_cause`` (see :meth:`CrashRules.specific_cause
#: <autotune.crashes.CrashRules.specific_cause>`): the line, its parsed exception, the frame tags
#: of its traceback, whether CUDA-graph capture is under way -> the category and where its text
#: starts.
CauseReader = Callable[
    [str, "tuple[str, str] | None", frozenset[str], bool], "tuple[str, int] | None"
]


#: How far into a line a noise marker may start for the line to be noise (a host:pid:tid tag or a
#: logger prefix comes before it; a paste that ran many lines together has it much further on).
NOISE_MARKER_WITHIN = 160


@dataclass(frozen=True)
class LineMarks:
    """An engine's words for the cheap questions about a line.

    ``trigger``: lowercase words of which a line must contain one to mean anything to the
    engine's rules (matched on the lowercased line: much faster than a case-insensitive search
    over every log line); ``noise``: texts of lines known to be harmless however alarming they
    look; ``strong``: what only a dying server prints; ``warning``: a warning-level line.
    """

    trigger: re.Pattern[str]
    noise: tuple[str, ...]
    strong: re.Pattern[str]
    warning: re.Pattern[str] = WARNING_LINE

    def may_matter(self, line: str) -> bool:
        return self.trigger.search(line.lower()) is not None

    def is_noise(self, line: str) -> bool:
        # a harmless line starts with its marker (after a host or logger tag); a marker far
        # into a line is a paste that lost its line breaks, whose earlier text still counts
        return any(0 <= line.find(marker) < NOISE_MARKER_WITHIN for marker in self.noise)

    def is_warning(self, line: str) -> bool:
        return self.warning.search(line) is not None

    def is_strong_crash(self, line: str) -> bool:
        return self.strong.search(line) is not None


class LineRules(Protocol):
    """What an engine's rule module answers about one line (a module of these functions)."""

    MARKS: LineMarks

    @property
    def specific_cause(self) -> CauseReader: ...

    def frame_tags(self, path: str, func: str) -> frozenset[str]: ...

    def hint_of(self, line: str) -> tuple[str, int] | None: ...


class ModuleCrashRules(CrashRules):
    """A :class:`~autotune.crashes.CrashRules` whose line questions go to ``lines``, the
    engine's rule module, and to its :class:`LineMarks` (``lines.MARKS``).

    ``steps``: start-up steps by a text of their line, with the words for them (``"loading
    weights"`` is the step that begins loading the weights); see :meth:`step`.
    """

    lines: ClassVar[LineRules]
    steps: ClassVar[tuple[tuple[str, str], ...]] = ()

    def specific_cause(
        self,
        line: str,
        exception: tuple[str, str] | None,
        tags: frozenset[str],
        capture_phase: bool,
    ) -> tuple[str, int] | None:
        return self.lines.specific_cause(line, exception, tags, capture_phase)

    def frame_tags(self, path: str, func: str) -> frozenset[str]:
        return self.lines.frame_tags(path, func)

    def hint_of(self, line: str) -> tuple[str, int] | None:
        return self.lines.hint_of(line)

    def may_matter(self, line: str) -> bool:
        return self.lines.MARKS.may_matter(line)

    def is_noise(self, line: str) -> bool:
        return self.lines.MARKS.is_noise(line)

    def is_warning(self, line: str) -> bool:
        return self.lines.MARKS.is_warning(line)

    def is_strong_crash(self, line: str) -> bool:
        return self.lines.MARKS.is_strong_crash(line)

    def step(self, line: str) -> Progress | None:
        """The start-up step of :attr:`steps` that a line shows, if any."""
        for text, phase in self.steps:
            if text in line:
                return Progress("step", phase, loading=phase == "loading weights")
        return None
