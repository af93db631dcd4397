"""The crash classifier: a verdict on a server log, live or after the fact, by an engine's rules.

:class:`LiveClassifier` is fed a starting server's log one line at a time and says "crash" at the
first line that decides one, so that the tuner can stop a doomed start-up within seconds.
:func:`classify_text` and :func:`classify_file` feed a whole log through the same machine.

A verdict is chosen by specificity, not by the first match: a crash log usually has the generic
line first ("Scheduler hit an exception") and the cause last, lines of several ranks mixed in, and
noise after it. Specific causes anywhere in the log beat generic signs of a crash; a crash beats
the ready line; an unfinished traceback is judged by the code its frames were in.

What each line means is the engine's :class:`~autotune.crashes.CrashRules` (SGLang's:
:meth:`Engine.crash_rules <autotune.engines.Engine.crash_rules>`); the weighing is here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from autotune._errors import ConfigError
from autotune.crashes._lines import evidence_text, normalise, split_segments
from autotune.crashes._ruleset import (
    ASSERT_ARCH,
    CRASH_CATEGORIES,
    DECIDED_BY,
    TAG_DRAFT,
    TAG_INNERMOST,
    TAG_LOADING,
    TAG_UNFINISHED,
    UNDECIDED,
    UNKNOWN_CRASH,
    AdviceContext,
    CrashRules,
    Move,
)

_READ_LIMIT = 1 << 16
# a line that says it reports an error ("slurmstepd: error: ...", "... failed with ...")
_ERROR_WORD = re.compile(r"\berrors?\b|\bfail", re.I)


@dataclass(frozen=True)
class Classification:
    """The verdict on a log.

    ``category`` is one of :data:`CRASH_CATEGORIES`, :data:`HEALTHY_CATEGORIES` or
    :data:`UNDECIDED`;
    ``evidence`` the deciding log line without its prefixes (at most 500 characters) and
    ``line_number`` its 1-based position in the log (both ``None`` when nothing decided);
    ``advice`` what to do about it; ``moves`` the knobs the advice moves and which way
    (``("mem_fraction_static", "raise")``), empty when it names none; ``exit_code`` the server
    process's exit status where the caller knew it.
    """

    category: str
    evidence: str | None
    line_number: int | None
    advice: str
    moves: tuple[Move, ...] = ()
    exit_code: int | None = None

    @property
    def is_crash(self) -> bool:
        return self.category in CRASH_CATEGORIES

    def to_dict(self) -> dict[str, str | int | bool | list[str] | None]:
        """The verdict as plain JSON-ready values (a move as ``"raise mem_fraction_static"``)."""
        return {
            "category": self.category,
            "evidence": self.evidence,
            "line_number": self.line_number,
            "advice": self.advice,
            "moves": [f"{way} {knob}" for knob, way in self.moves],
            "is_crash": self.is_crash,
            "exit_code": self.exit_code,
        }


@dataclass(frozen=True)
class _Finding:
    category: str
    evidence: str
    line_number: int
    tags: frozenset[str] = frozenset()


class LiveClassifier:
    """Fed a starting server's log one line at a time, read by the engine's ``rules``.

    :meth:`feed` returns a crash :class:`Classification` as soon as a line decides one (the
    KV-pool message, "Capture cuda graph failed: ...", an argparse error, a CUDA out-of-memory or
    NCCL exception line) and ``None`` for every other line, generic signs of a crash included:
    those are remembered until the cause shows up. :meth:`finish` gives the verdict on everything
    seen, with the process's exit status where the caller knows it; :attr:`state` the verdict so
    far (the process taken as alive).

    Evidence is weighed strongest first (:data:`~autotune.crashes.EVIDENCE_KINDS`; which kinds
    may decide each category: :data:`~autotune.crashes.DECIDED_BY`): a line that names its cause
    (the final exception's type and message, the engine's own memory or start-up message)
    decides; ``other_crash`` where that line names a cause no setting cures
    (:data:`~autotune.crashes.NOT_A_SETTING`); then the frames of an unfinished traceback (what
    the code was doing when the excerpt ends). An exception no rule names, generic signs of a
    crash, or a process known to have exited with nothing deciding give ``unknown_crash``, whose
    advice names the last error line and the exit status and no knob. With no sign of a crash
    and no exit status known, "starting" is the verdict while the process is alive (:attr:`state`,
    ``finish(alive=True)``) or when the log ends in a known start-up step; a log that shows none
    is :data:`UNDECIDED` (nothing says it is a starting server's).
    """

    def __init__(self, rules: CrashRules) -> None:
        self._rules = rules
        self._line_no = 0
        self._causes: dict[str, _Finding] = {}
        self._strong: _Finding | None = None
        self._medium: _Finding | None = None
        self._generic: _Finding | None = None
        self._hint: _Finding | None = None
        self._healthy: _Finding | None = None
        self._settings: dict[str, str] = {}
        self._phase: str | None = None
        self._step_seen = False
        self._loading = False
        self._capture: str | None = None
        self._tb_open = False
        self._tb_tags: set[str] = set()
        self._tb_tag_lines: dict[str, _Finding] = {}
        self._after_frame = False
        self._last_frame = 0
        self._last_line: _Finding | None = None
        self._last_error: _Finding | None = None

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

    def finish(self, exit_code: int | None = None, *, alive: bool = False) -> Classification:
        """The verdict on every line fed so far.

        ``exit_code``: the process's exit status where the caller knows it (negative: killed by
        that signal). A process that exited while nothing in its log decides a crash is
        ``unknown_crash``, never "starting" (a clean exit, 0, after the server was ready or
        serving keeps that verdict). ``alive``: the caller knows the process is still running,
        so a log with nothing decided is "starting"; otherwise such a log is "starting" only
        when it ends in a known start-up step, and :data:`UNDECIDED` when it shows none.
        """
        return self._classification(exit_code, alive=alive)

    @property
    def state(self) -> str:
        """The category the log shows so far, the process taken as alive: a crash category,
        ``ready``, ``running`` or ``starting``."""
        category, _ = self._verdict(alive=True)
        return category

    @property
    def lines_seen(self) -> int:
        return self._line_no

    # --- reading one line --------------------------------------------------------------------
    def _read(self, line: str) -> bool:
        rules = self._rules
        if not line.strip():
            self._after_frame = False
            return False
        if self._after_frame:
            self._after_frame = False
            tail = rules.parse_frame_tail(line)
            if tail is not None:
                # a frame wrapped after its path: its function is on this line
                self._after_frame = True
                self._tag_frame(line, "", tail)
                return False
            if rules.parse_frame(line) is None and (
                line.startswith("    ") or rules.is_source_code(line)
            ):
                # The source line under a frame is code, not a message; what it calls is
                # still on the failing call chain (all a cut traceback may show).
                self._tag_frame(line, "", rules.called_function(line))
                return False
        if rules.is_source_marks(line) or rules.is_noise(line):
            return False
        self._last_line = _Finding("", evidence_text(line), self._line_no)
        if not rules.may_matter(line):
            # a start-up step need not share a word with the lines that may tell of a crash
            self._read_progress(line)
            return False
        settings = rules.settings(line)
        if settings:
            self._settings.update(settings)
        if self._read_progress(line) and not rules.is_strong_crash(line):
            # (a progress bar that a crash was written onto still reports the crash)
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
        if exception is not None or rules.is_strong_crash(line) or rules.is_c10_error(line):
            self._last_error = _Finding("", evidence_text(line), self._line_no)
        if exception is not None:
            self._tb_open = False
            if rules.is_interruption(exception):
                self._medium = None  # the traceback was a stop, not a failure
                return False
        cause = rules.specific_cause(line, exception, tags, self._capture is not None)
        if cause is None and (
            exception is not None
            or rules.is_strong_crash(line)
            or rules.is_c10_error(line)
            or _ERROR_WORD.search(line) is not None
        ):
            cause = rules.shared_cause(line)
        if cause is None:
            m = ASSERT_ARCH.search(line)
            if m is not None:
                cause = ("unsupported_arch", m.start())
        if cause is not None:
            category, at = cause
            if category not in self._causes:
                self._causes[category] = self._finding(category, line, at, tags)
            return True
        strong = rules.is_strong_crash(line)
        if exception is not None and not strong:
            # the first exception that is not itself a generic wrapper ("Initialization failed")
            if self._generic is None:
                self._generic = self._finding(UNKNOWN_CRASH, line, 0, tags)
            self._note_medium(line)
        if strong:
            if self._strong is None:
                self._strong = self._finding(UNKNOWN_CRASH, line, 0, tags)
        elif rules.is_traceback_start(line) or rules.is_c10_error(line):
            self._note_medium(line)
        hint = rules.hint_of(line)
        if hint is not None:
            self._note_hint(line, *hint)
        return False

    def _read_progress(self, line: str) -> bool:
        """Healthy markers and start-up steps; True when the line was one."""
        step = self._rules.progress(line)
        if step is None:
            return False
        self._step_seen = True
        if step.kind == "ready":
            self._set_healthy("ready", line)
            self._set_phase(step.phase)
            self._capture = None
        elif step.kind == "running":
            self._set_healthy("running", line)
        elif step.kind == "capture_begin":
            self._capture = "draft" if step.draft else "target"
            self._set_phase(step.phase)
        elif step.kind == "capture_end":
            self._capture = None
            self._set_phase(step.phase)
        elif step.kind == "capturing":
            if self._capture is None:
                self._capture = "target"
                self._set_phase(step.phase)
        else:
            self._set_phase(step.phase, loading=step.loading)
        return True

    def _set_phase(self, phase: str | None, *, loading: bool = False) -> None:
        self._phase, self._loading = phase, loading

    def _read_frame(self, line: str, path: str, func: str) -> None:
        self._last_frame = self._line_no
        self._after_frame = True
        self._tb_open = True
        self._tag_frame(line, path, func)
        self._note_medium(line)

    def _tag_frame(self, line: str, path: str, func: str) -> None:
        for tag in self._rules.frame_tags(path, func):
            self._tb_tags.add(tag)
            if tag not in self._tb_tag_lines:
                self._tb_tag_lines[tag] = self._finding(tag, line, 0, frozenset())

    # --- bookkeeping -------------------------------------------------------------------------
    def _finding(self, category: str, line: str, at: int, tags: frozenset[str]) -> _Finding:
        context = set(tags)
        if self._capture == "draft":
            context.add(TAG_DRAFT)
        if self._loading:
            context.add(TAG_LOADING)
        return _Finding(category, evidence_text(line, at), self._line_no, frozenset(context))

    def _note_medium(self, line: str) -> None:
        if self._healthy is None and self._medium is None:
            self._medium = self._finding(UNKNOWN_CRASH, line, 0, frozenset())

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
        picked = self._rules.pick_cause(self._causes)
        if picked is None:
            return None
        category, shown = picked
        found = self._causes[shown]
        if category == shown:
            return found
        return _Finding(category, found.evidence, found.line_number, found.tags)

    def _open_traceback_hint(self) -> _Finding | None:
        if not self._tb_open:
            return None
        for tag, category in self._rules.tag_hints:
            found = self._tb_tag_lines.get(tag)
            if found is not None:
                tags = found.tags | frozenset(self._tb_tags) | {TAG_UNFINISHED}
                if found.line_number >= self._last_frame:
                    tags |= {TAG_INNERMOST}
                return _Finding(category, found.evidence, found.line_number, tags)
        return None

    def _verdict(
        self, exit_code: int | None = None, *, alive: bool = False
    ) -> tuple[str, _Finding | None]:
        # 1. a line that names its cause
        cause = self._best_cause()
        if cause is not None:
            return cause.category, cause
        crash = self._strong or self._medium
        if crash is not None:
            # 2. a final exception no category's rule names: the crash is certain, its cause is
            # not decided (its advice names that line and no knob)
            if self._generic is not None:
                return UNKNOWN_CRASH, self._generic
            # 3. the frames of a traceback cut before its exception, or a hint
            hint = self._open_traceback_hint() or self._hint
            if hint is not None and "raise_frame" in DECIDED_BY.get(hint.category, ()):
                return hint.category, hint
            # 4. only generic signs of a crash (a wrapper's "hit an exception", a fatal signal)
            return UNKNOWN_CRASH, self._last_error or crash
        exited = exit_code is not None
        if self._healthy is not None and (not exited or exit_code == 0):
            return self._healthy.category, self._healthy
        if exited:
            return UNKNOWN_CRASH, self._last_error or self._last_line
        # 5. no crash, no exit: starting only where something says a server is starting
        if alive or self._step_seen:
            return "starting", None
        return UNDECIDED, None

    def _classification(
        self, exit_code: int | None = None, *, alive: bool = False
    ) -> Classification:
        category, finding = self._verdict(exit_code, alive=alive)
        context = AdviceContext(
            category=category,
            evidence=finding.evidence if finding else None,
            settings=dict(self._settings),
            tags=finding.tags if finding else frozenset(),
            phase=self._phase,
            exit_code=exit_code,
        )
        return Classification(
            category=category,
            evidence=finding.evidence if finding else None,
            line_number=finding.line_number if finding else None,
            advice=self._rules.advise(context),
            moves=self._rules.moves(context),
            exit_code=exit_code,
        )


def classify_text(
    text: str, rules: CrashRules, *, exit_code: int | None = None, alive: bool = False
) -> Classification:
    """The verdict of ``rules`` on a whole log given as text (lines end with ``\\n`` or
    ``\\r\\n``); ``exit_code`` and ``alive`` as for :meth:`LiveClassifier.finish`."""
    live = LiveClassifier(rules)
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    for line in lines:
        live.feed(line)
    return live.finish(exit_code, alive=alive)


def classify_file(
    path: str | os.PathLike[str],
    rules: CrashRules,
    *,
    exit_code: int | None = None,
    alive: bool = False,
) -> Classification:
    """The verdict of ``rules`` on a log file, read as UTF-8 (undecodable bytes are replaced);
    ``exit_code``: the server process's exit status where the caller knows it, ``alive``: the
    caller knows the process still runs (see :meth:`LiveClassifier.finish`).

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
    live = LiveClassifier(rules)
    with handle:
        try:
            for line in _read_lines(handle):
                live.feed(line)
        except OSError as e:
            raise ConfigError(
                f"log file cannot be read: {e.strerror or e}", source=source, hint=hint
            ) from e
    return live.finish(exit_code, alive=alive)


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
