"""Log lines as the classifier reads them: prefixes, colours and junk removed.

A server log reaches the tuner through many hands: Docker Compose (``sglang-1  | ``), Slurm's
``srun --label`` (``0: ``), ``docker logs -t`` and journald timestamps, Ray and MPI rank tags,
SGLang's own ``[2025-02-17 10:13:46 TP4] `` prefix, torch's ``[rank3]:``, ANSI colours and CRLF
line ends. :func:`normalise` peels those off so that one set of patterns reads them all;
:func:`evidence_text` turns a line into the short, printable form stored with a verdict.
"""

from __future__ import annotations

import re

#: Longest line examined; longer ones keep their head and tail (a match near either end survives).
MAX_LINE_CHARS = 8192
_HEAD_CHARS = 6144
_TAIL_CHARS = 2000

#: Longest evidence string, in characters.
MAX_EVIDENCE_CHARS = 500

_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")

# One prefix at a time, anchored at the start; tried in this order at each position.
_PREFIX = re.compile(
    r"(?:"
    # SGLang: "[2025-02-17 10:13:46 TP4] ", "[2025-02-17 10:13:46] ", "[DP1 TP3 EP3] "; a CI
    # runner's "[2026-02-24T20:21:58Z] "
    r"\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"(?:\s+[A-Z][A-Z_]{0,11}\d+)*\] ?"
    r"|\[[A-Z][A-Z_]{0,11}\d+(?:\s+[A-Z][A-Z_]{0,11}\d+)*\] ?"
    # ISO and `docker logs -t` timestamps, Python logging's "2025-02-17 10:13:46,123 "
    r"|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})? ?"
    # Docker Compose: "sglang-1  | ", "sglang_server_1 | "
    r"|[A-Za-z0-9][\w.-]*\s+\| ?"
    # torch ranks "[rank3]:", Ray "(Worker pid=302) ", MPI "[1,0]<stderr>:", kubectl "[pod/x/y] "
    r"|\[rank\d+\]: ?"
    r"|\((?:\w+ )?pid=\d+(?:, ip=[\d.]+)?\) ?"
    r"|\[\d+,\d+\]<std(?:out|err)>: ?"
    r"|\[pod/[^\]\s]+\] ?"
    # journald / syslog: "Aug 25 19:32:40 host sglang[7949]: "
    r"|[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \S+ [\w./@-]+(?:\[\d+\])?: ?"
    # Slurm `srun --label`: "0: ", "12: "
    r"|\d{1,5}: "
    r")"
)
_MAX_PREFIXES = 8
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]+")


def split_segments(raw: str) -> list[str]:
    """The pieces of one physical line that a terminal would show as separate updates.

    Progress bars rewrite a line with ``\\r``; each rewrite is read on its own. A trailing
    ``\\r`` (CRLF files) is dropped.
    """
    line = raw.rstrip("\r\n")
    if "\r" not in line:
        return [line]
    return [part for part in line.split("\r") if part.strip()]


def normalise(segment: str) -> str:
    """The text of one log line without transport prefixes, colours or an overlong middle.

    Leading indentation that belongs to the message (traceback frames) is kept.
    """
    line = segment
    if len(line) > MAX_LINE_CHARS:
        line = line[:_HEAD_CHARS] + " ... " + line[-_TAIL_CHARS:]
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if line.startswith("\ufeff"):
        line = line[1:]
    for _ in range(_MAX_PREFIXES):
        m = _PREFIX.match(line)
        if m is None or m.end() == 0:
            break
        line = line[m.end() :]
    return line


def evidence_text(line: str, at: int = 0) -> str:
    """``line`` as evidence: printable, trimmed, at most :data:`MAX_EVIDENCE_CHARS` characters.

    ``at`` is where the deciding text starts; a long line is cut so that it stays visible.
    """
    text = _CONTROL.sub(" ", line)
    stripped = text.lstrip()
    at = max(0, at - (len(text) - len(stripped)))
    text = stripped.rstrip()
    if len(text) <= MAX_EVIDENCE_CHARS:
        return text
    if at < MAX_EVIDENCE_CHARS - 100:
        return text[: MAX_EVIDENCE_CHARS - 3] + "..."
    start = max(0, at - 100)
    window = text[start : start + MAX_EVIDENCE_CHARS - 6]
    tail = "..." if start + len(window) < len(text) else ""
    return "..." + window + tail
