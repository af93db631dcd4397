"""Incremental reading of a server log, line by line, as the server writes it."""

from __future__ import annotations

import os
import re
from collections import deque
from pathlib import Path
from typing import BinaryIO

from autotune._errors import ServerError
from autotune.server._closing import Closing

#: A line ends at CRLF, LF, or a lone CR (progress bars redraw themselves with CR).
_LINE_END = re.compile(rb"\r\n|\r|\n")
_TRUNCATED = " [line truncated]"


class LogFollower(Closing):
    """Follows a log file from a byte offset and hands out complete lines as they appear.

    Reading never blocks: :meth:`read_new_lines` returns what has been written since the last
    call (possibly nothing). Lines end at LF, CRLF or a lone CR, so each redraw of a progress bar
    is a line of its own. A line still being written is held back until its end arrives, or
    until ``final=True`` says the writer has exited. Bytes that are not valid UTF-8 are replaced
    (U+FFFD); a line longer than ``max_line_bytes`` is cut there, marked ``[line truncated]``,
    and the rest of it is skipped. A log that shrinks (truncated by someone) is read again from
    its start.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        start_offset: int = 0,
        max_line_bytes: int = 64 * 1024,
        max_read_bytes: int = 8 * 1024 * 1024,
        keep_tail: int = 200,
    ) -> None:
        if max_line_bytes < 1 or max_read_bytes < 1 or keep_tail < 1:
            raise ValueError("max_line_bytes, max_read_bytes and keep_tail must be positive")
        self.path = Path(path)
        self._pos = start_offset
        self._max_line = max_line_bytes
        self._max_read = max_read_bytes
        self._file: BinaryIO | None = None
        self._pending = b""
        self._skipping = False  # inside the rest of a truncated line
        self._lines = 0
        self._tail: deque[str] = deque(maxlen=keep_tail)

    @property
    def line_count(self) -> int:
        """How many lines have been handed out so far (the number of the last one)."""
        return self._lines

    @property
    def offset(self) -> int:
        """The byte offset in the file up to which data has been read."""
        return self._pos

    def read_new_lines(self, *, final: bool = False) -> list[str]:
        """The complete lines written since the last call, oldest first, without line ends.

        With ``final=True`` a last line without its line end is returned too: use it once the
        writer has exited, and everything up to the end of the file is read. Otherwise at most
        ``max_read_bytes`` are read per call; the rest comes with the next call.

        Raises:
            ServerError: the log exists but cannot be read.
        """
        chunk = self._read_chunk(to_end=final)
        data = self._pending + chunk
        lines: list[str] = []
        start = 0
        for match in _LINE_END.finditer(data):
            if match.group() == b"\r" and match.end() == len(data) and not final:
                break  # a CR at the end may be the first half of CRLF: wait for the next byte
            self._end_line(data[start : match.start()], lines)
            start = match.end()
        self._pending = data[start:]
        if len(self._pending) > self._max_line:
            if not self._skipping:
                self._emit(self._pending, lines)
                self._skipping = True
            self._pending = b""
        if final and self._pending:
            self._end_line(self._pending, lines)
            self._pending = b""
        return lines

    def tail(self, n: int = 20) -> list[str]:
        """The last ``n`` non-blank lines handed out (up to ``keep_tail``), oldest first."""
        if n <= 0:
            return []
        return list(self._tail)[-n:]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _end_line(self, raw: bytes, out: list[str]) -> None:
        if self._skipping:
            # The end of a line that was already cut: drop it, the next line is whole again.
            self._skipping = False
            return
        self._emit(raw, out)

    def _emit(self, raw: bytes, out: list[str]) -> None:
        line = raw[: self._max_line].decode("utf-8", errors="replace")
        if len(raw) > self._max_line:
            line += _TRUNCATED
        self._lines += 1
        out.append(line)
        if line.strip():
            self._tail.append(line)

    def _read_chunk(self, *, to_end: bool) -> bytes:
        f = self._open()
        if f is None:
            return b""
        try:
            size = os.fstat(f.fileno()).st_size
            if size < self._pos:
                # The file was truncated under us: start again from its beginning.
                self._pos = 0
                self._pending = b""
                self._skipping = False
            if size == self._pos:
                return b""
            f.seek(self._pos)
            want = size - self._pos if to_end else min(size - self._pos, self._max_read)
            chunk = f.read(want)
        except OSError as e:
            raise ServerError(
                f"cannot read the server log: {e.strerror or e}",
                log_path=self.path,
                hint="check that the log directory is readable and the disk is not full",
            ) from e
        self._pos += len(chunk)
        return chunk

    def _open(self) -> BinaryIO | None:
        if self._file is None:
            try:
                self._file = self.path.open("rb")
            except FileNotFoundError:
                return None  # not written yet
            except OSError as e:
                raise ServerError(
                    f"cannot open the server log: {e.strerror or e}",
                    log_path=self.path,
                    hint="check the permissions of the log directory",
                ) from e
        return self._file
