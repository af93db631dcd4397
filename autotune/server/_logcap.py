"""A server log kept within a size: its head and its tail, and a line saying what was left out.

A server that floods its log (a warning per request, a debug flag, a stack trace in a loop)
wrote 3 to 11 MB per trial, kept twice (the trial's folder and the study's artifacts). What a
reader needs is at the two ends: the start-up (arguments, memory, the ready line) and the end
(the crash, the last requests). :func:`cap_log` keeps those, cut at line ends, and puts one
marker line between them with how many bytes and lines were dropped and the size written.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Most bytes of a server log that are kept.
LOG_CAP_BYTES = 1024 * 1024
#: Of those, the bytes kept from the start of the log (the rest come from its end).
LOG_HEAD_BYTES = 256 * 1024
#: Starts the line that marks where a capped log was cut.
CUT_MARK = "[autotune: log cut:"


def cap_log(
    path: Path, *, max_bytes: int = LOG_CAP_BYTES, head_bytes: int = LOG_HEAD_BYTES
) -> bool:
    """Cut the log at ``path`` to its first ``head_bytes`` and its last bytes, at most
    ``max_bytes`` in all (whole lines), with a marker line between; whether it was cut.

    For a log whose writer is gone (the server stopped). A missing or unreadable file, or one
    within the size, is left as it is.
    """
    try:
        size = path.stat().st_size
    except OSError:
        return False
    if size <= max_bytes:
        return False
    tail_bytes = max(max_bytes - head_bytes, 0)
    tmp = path.with_name(path.name + ".capping")
    try:
        with path.open("rb") as f:
            head = f.read(head_bytes)
            head = head[: head.rfind(b"\n") + 1] if b"\n" in head else head
            f.seek(size - tail_bytes)
            tail = f.read(tail_bytes)
            if b"\n" in tail:
                tail = tail[tail.find(b"\n") + 1 :]
            start, end = len(head), size - len(tail)
            f.seek(start)
            lines = left = 0
            while left < end - start:
                chunk = f.read(min(1 << 20, end - start - left))
                if not chunk:
                    break
                lines += chunk.count(b"\n")
                left += len(chunk)
        mark = (
            f"{CUT_MARK} {end - start:,} bytes ({lines:,} lines) left out here; the server "
            f"wrote {size:,} bytes in all: the first {start:,} and the last {len(tail):,} are "
            "kept]\n"
        )
        with tmp.open("wb") as out:
            out.write(head)
            if head and not head.endswith(b"\n"):
                out.write(b"\n")
            out.write(mark.encode())
            out.write(tail)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True
