"""The crash classifier: a verdict on an SGLang server log, live or after the fact.

:class:`LiveClassifier` is fed a starting server's log one line at a time and says "crash" at the
first line that decides one, so that the tuner can stop a doomed start-up within seconds.
:func:`classify_text` and :func:`classify_file` feed a whole log through the same machine.

A verdict is chosen by specificity, not by the first match: a crash log usually has the generic
line first ("Scheduler hit an exception") and the cause last, lines of several ranks mixed in, and
noise after it. Specific causes anywhere in the log beat generic signs of a crash; a crash beats
the ready line; an unfinished traceback is judged by the code its frames were in.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from autotune._errors import ConfigError
from autotune.crashes import _progress as progress
from autotune.crashes import _rules as rules
from autotune.crashes._advice import AdviceContext, advise
from autotune.crashes._lines import evidence_text, normalise, split_segments

_READ_LIMIT = 1 << 16


@dataclass(frozen=True)
class Classification:
    """The verdict on a log.

    ``category`` is one of :data:`CRASH_CATEGORIES` or :data:`HEALTHY_CATEGORIES`;
    ``evidence`` the deciding log line without its prefixes (at most 500 characters) and
    ``line_number`` its 1-based position in the log (both ``None`` when nothing decided);
    ``advice`` what to do about it.
    """

    category: str
    evidence: str | None
    line_number: int | None
    advice: str

    @property
    def is_crash(self) -> bool:
        return self.category in rules.CRASH_CATEGORIES

    def to_dict(self) -> dict[str, str | int | bool | None]:
        """The verdict as plain JSON-ready values."""
        return {
            "category": self.category,
            "evidence": self.evidence,
            "line_number": self.line_number,
            "advice": self.advice,
            "is_crash": self.is_crash,
        }


@dataclass(frozen=True)
class _Finding:
    category: str
    evidence: str
    line_number: int
    tags: frozenset[str] = frozenset()


class LiveClassifier:
    """Fed a starting server's log one line at a time.

    :meth:`feed` returns a crash :class:`Classification` as soon as a line decides one (the
    KV-pool message, "Capture cuda graph failed: ...", an argparse error, a CUDA out-of-memory or
    NCCL exception line) and ``None`` for every other line, generic signs of a crash included:
    those are remembered until the cause shows up. :meth:`finish` gives the verdict on everything
    seen; :attr:`state` the verdict so far.
    """

    def __init__(self) -> None:
        self._line_no = 0
        self._causes: dict[str, _Finding] = {}
        self._strong: _Finding | None = None
        self._medium: _Finding | None = None
        self._generic: _Finding | None = None
        self._hint: _Finding | None = None
        self._healthy: _Finding | None = None
        self._mem_fraction: str | None = None
        self._phase: str | None = None
        self._capture: str | None = None
        self._tb_open = False
        self._tb_tags: set[str] = set()
        self._tb_tag_lines: dict[str, _Finding] = {}
        self._after_frame = False

    # --- public ------------------------------------------------------------------------------
    def feed(self, line: str) -> Classification | None:
        """Read one log line (a trailing newline is fine; embedded ones count as more lines).

        Returns the crash verdict when this line decides (or sharpens) it, else ``None``.
        """
        text = line[:-1] if line.endswith("\n") else line
        decided = False
        for physical in text.split("\n"):
            self._line_no += 1
            for segment in split_segments(physical):
                if self._read(normalise(segment)):
                    decided = True
        return self._classification() if decided else None

    def finish(self) -> Classification:
        """The verdict on every line fed so far (call it once the process has exited)."""
        return self._classification()

    @property
    def state(self) -> str:
        """The category the log shows so far: a crash category, ``ready``, ``running`` or
        ``starting``."""
        category, _ = self._verdict()
        return category

    @property
    def lines_seen(self) -> int:
        return self._line_no

    # --- reading one line --------------------------------------------------------------------
    def _read(self, line: str) -> bool:
        if not line.strip():
            self._after_frame = False
            return False
        if self._after_frame:
            self._after_frame = False
            if line.startswith("    ") and rules.parse_frame(line) is None:
                # The source line under a frame is code, not a message; what it calls is
                # still on the failing call chain (all a cut traceback may show).
                self._tag_frame(line, "", rules.called_function(line))
                return False
        if rules.is_source_marks(line) or rules.is_noise(line):
            return False
        if not rules.may_matter(line):
            return False
        value = progress.mem_fraction_value(line)
        if value is not None:
            self._mem_fraction = value
        if self._read_progress(line):
            return False
        frame = rules.parse_frame(line)
        if frame is not None:
            self._read_frame(line, *frame)
            return False
        if rules.is_traceback_start(line) and not self._tb_open:
            self._tb_tags.clear()
            self._tb_tag_lines.clear()
        exception = rules.parse_exception(line)
        if exception is None and rules.is_warning(line):
            hint = rules.hint_of(line)
            if hint is not None:
                self._note_hint(line, *hint)
            return False
        # the frames above an exception line tell what the failing code was doing
        tags = frozenset(self._tb_tags) if exception and self._tb_open else frozenset()
        if exception is not None:
            self._tb_open = False
            if rules.is_interruption(exception):
                self._medium = None  # the traceback was a stop, not a failure
                return False
        cause = rules.specific_cause(line, exception, tags, self._capture is not None)
        if cause is not None:
            category, at = cause
            if category not in self._causes:
                self._causes[category] = self._finding(category, line, at, tags)
            return True
        strong = rules.is_strong_crash(line)
        if exception is not None and not strong:
            # the first exception that is not itself a generic wrapper ("Initialization failed")
            if self._generic is None:
                self._generic = self._finding("other_crash", line, 0, tags)
            self._note_medium(line)
        if strong:
            if self._strong is None:
                self._strong = self._finding("other_crash", line, 0, tags)
        elif rules.is_traceback_start(line) or rules.is_c10_error(line):
            self._note_medium(line)
        hint = rules.hint_of(line)
        if hint is not None:
            self._note_hint(line, *hint)
        return False

    def _read_progress(self, line: str) -> bool:
        """Healthy markers and start-up steps; True when the line was one."""
        if progress.is_ready(line):
            self._set_healthy("ready", line)
            self._phase, self._capture = "ready", None
            return True
        if progress.is_running(line):
            self._set_healthy("running", line)
            return True
        kind = progress.capture_begin(line)
        if kind is not None:
            self._capture = kind
            self._phase = f"capturing the {'draft' if kind == 'draft' else 'target'} CUDA graphs"
            return True
        if progress.is_capture_end(line):
            self._capture, self._phase = None, "CUDA graphs captured"
            return True
        if progress.is_capturing(line):
            if self._capture is None:
                self._capture, self._phase = "target", "capturing CUDA graphs"
            return True
        if "Load weight begin" in line:
            self._phase = "loading weights"
            return True
        if "Load weight end" in line:
            self._phase = "weights loaded"
            return True
        if "KV Cache is allocated" in line:
            self._phase = "KV cache allocated"
            return True
        return False

    def _read_frame(self, line: str, path: str, func: str) -> None:
        self._after_frame = True
        self._tb_open = True
        self._tag_frame(line, path, func)
        self._note_medium(line)

    def _tag_frame(self, line: str, path: str, func: str) -> None:
        for tag in rules.frame_tags(path, func):
            self._tb_tags.add(tag)
            if tag not in self._tb_tag_lines:
                self._tb_tag_lines[tag] = self._finding(tag, line, 0, frozenset())

    # --- bookkeeping -------------------------------------------------------------------------
    def _finding(self, category: str, line: str, at: int, tags: frozenset[str]) -> _Finding:
        context = set(tags)
        if self._capture == "draft":
            context.add(rules.TAG_DRAFT)
        if self._phase == "loading weights":
            context.add(rules.TAG_LOADING)
        return _Finding(category, evidence_text(line, at), self._line_no, frozenset(context))

    def _note_medium(self, line: str) -> None:
        if self._healthy is None and self._medium is None:
            self._medium = self._finding("other_crash", line, 0, frozenset())

    def _note_hint(self, line: str, category: str, at: int) -> None:
        if self._hint is None:
            self._hint = self._finding(category, line, at, frozenset())

    def _set_healthy(self, category: str, line: str) -> None:
        # A server that goes on to start or serve was not killed by what came before:
        # forget the generic signs (specific causes and fatal lines stay).
        self._healthy = self._finding(category, line, 0, frozenset())
        self._medium = self._generic = self._hint = None
        self._tb_open = False
        self._tb_tags.clear()
        self._tb_tag_lines.clear()

    # --- the verdict -------------------------------------------------------------------------
    def _best_cause(self) -> _Finding | None:
        causes = self._causes
        if "oom_kv_pool" not in causes and "graph_capture_other" in causes:
            oom = causes.get("oom_runtime")
            if oom is not None and "oom_cuda_graph" not in causes:
                # "CUDA graph capture failed." after a plain out-of-memory exception
                return _Finding("oom_cuda_graph", oom.evidence, oom.line_number, oom.tags)
        for category in rules.CAUSE_PRIORITY:
            found = causes.get(category)
            if found is not None:
                return found
        return None

    def _open_traceback_hint(self) -> _Finding | None:
        if not self._tb_open:
            return None
        for tag, category in rules.TAG_HINTS:
            found = self._tb_tag_lines.get(tag)
            if found is not None:
                tags = found.tags | frozenset(self._tb_tags)
                return _Finding(category, found.evidence, found.line_number, tags)
        return None

    def _verdict(self) -> tuple[str, _Finding | None]:
        cause = self._best_cause()
        if cause is not None:
            return cause.category, cause
        crash = self._strong or self._medium
        if crash is not None:
            if self._generic is not None:
                return "other_crash", self._generic
            hint = self._open_traceback_hint() or self._hint
            if hint is not None:
                return hint.category, hint
            return "other_crash", crash
        if self._healthy is not None:
            return self._healthy.category, self._healthy
        return "starting", None

    def _classification(self) -> Classification:
        category, finding = self._verdict()
        context = AdviceContext(
            category=category,
            evidence=finding.evidence if finding else None,
            mem_fraction=self._mem_fraction,
            tags=finding.tags if finding else frozenset(),
            phase=self._phase,
        )
        return Classification(
            category=category,
            evidence=finding.evidence if finding else None,
            line_number=finding.line_number if finding else None,
            advice=advise(context),
        )


def classify_text(text: str) -> Classification:
    """The verdict on a whole log given as text (lines end with ``\\n`` or ``\\r\\n``)."""
    live = LiveClassifier()
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    for line in lines:
        live.feed(line)
    return live.finish()


def classify_file(path: str | os.PathLike[str]) -> Classification:
    """The verdict on a log file, read as UTF-8 (undecodable bytes are replaced).

    Raises:
        ConfigError: the file does not exist, is a directory, or cannot be read.
    """
    source = Path(path)
    hint = "give the path of an existing, readable server log file"
    try:
        handle = source.open("rb")
    except FileNotFoundError as e:
        raise ConfigError("log file not found", source=source, hint=hint) from e
    except IsADirectoryError as e:
        raise ConfigError("is a directory, not a log file", source=source, hint=hint) from e
    except PermissionError as e:
        raise ConfigError(
            "log file cannot be read (permission denied)",
            source=source,
            hint="check the file's permissions",
        ) from e
    except OSError as e:
        raise ConfigError(
            f"log file cannot be opened: {e.strerror or e}", source=source, hint=hint
        ) from e
    live = LiveClassifier()
    with handle:
        try:
            for line in _read_lines(handle):
                live.feed(line)
        except OSError as e:
            raise ConfigError(
                f"log file cannot be read: {e.strerror or e}", source=source, hint=hint
            ) from e
    return live.finish()


def _read_lines(handle: BinaryIO) -> Iterator[str]:
    """The file's lines as text; an endless line keeps its head and its tail only."""
    while True:
        chunk = handle.readline(_READ_LIMIT)
        if not chunk:
            return
        if not chunk.endswith(b"\n"):
            tail = b""
            while True:
                more = handle.readline(_READ_LIMIT)
                if not more:
                    break
                tail = (tail + more)[-_READ_LIMIT:]
                if more.endswith(b"\n"):
                    break
            chunk += tail
        yield chunk.decode("utf-8", "replace")
