"""Log lines without their transport prefixes, colours and overlong middles."""

from __future__ import annotations

import pytest

from autotune.crashes._lines import (
    MAX_EVIDENCE_CHARS,
    evidence_text,
    normalise,
    split_segments,
)

MESSAGE = "RuntimeError: Not enough memory."


@pytest.mark.parametrize(
    "raw",
    [
        MESSAGE,
        f"sglang-1  | {MESSAGE}",
        f"sglang_server_1 | [2026-10-14 09:22:06 TP3] {MESSAGE}",
        f"0: {MESSAGE}",
        f"12: [2026-10-14 09:22:06 DP1 TP3 EP3] {MESSAGE}",
        f"2026-03-02T11:40:12.118204Z {MESSAGE}",
        f"2026-03-02T11:40:12.118204Z [2026-03-02 11:40:12 TP2] {MESSAGE}",
        f"2025-02-17 10:13:46,123 {MESSAGE}",
        f"[2026-10-14 09:22:06] {MESSAGE}",
        f"[TP0] {MESSAGE}",
        f"[rank3]:{MESSAGE}",
        f"(Worker pid=302) {MESSAGE}",
        f"[1,0]<stderr>:{MESSAGE}",
        f"[pod/sglang-0/sglang] {MESSAGE}",
        f"Aug 25 19:32:40 gpu01 sglang[7949]: {MESSAGE}",
        f"\x1b[2m[2026-10-14 09:22:06 TP3]\x1b[0m \x1b[31m{MESSAGE}\x1b[0m",
        f"\ufeff{MESSAGE}",
    ],
)
def test_prefixes_and_colours_are_removed(raw: str) -> None:
    assert normalise(raw) == MESSAGE


def test_frame_indentation_and_meaningful_brackets_are_kept() -> None:
    frame = '  File "/x/model_runner.py", line 589, in initialize'
    assert normalise(f"sglang-1  | {frame}") == frame
    assert normalise(f"0: {frame}") == frame
    c10 = "[W1014 11:00:24.551 ProcessGroupNCCL.cpp:4751] Warning: x"
    assert normalise(f"[rank0]:{c10}") == c10
    assert normalise("[E1014 09:42:18 ProcessGroupNCCL.cpp:629] y").startswith("[E1014")


def test_carriage_returns_split_progress_updates() -> None:
    assert split_segments("a 1%\rb 50%\rc 100%\r\n") == ["a 1%", "b 50%", "c 100%"]
    assert split_segments("plain line\r\n") == ["plain line"]
    assert split_segments("plain\n") == ["plain"]


def test_overlong_lines_keep_head_and_tail() -> None:
    line = "HEAD " + "x" * 100_000 + " TAIL"
    out = normalise(line)
    assert out.startswith("HEAD ") and out.endswith(" TAIL")
    assert len(out) < 10_000


def test_evidence_is_printable_and_keeps_the_match_visible() -> None:
    assert evidence_text("  a\x00b\x1b  ") == "a b"
    long = (
        "z" * 3000 + " Not enough memory. Please try to increase --mem-fraction-static." + "q" * 900
    )
    at = long.index("Not enough")
    ev = evidence_text(long, at)
    assert len(ev) <= MAX_EVIDENCE_CHARS
    assert "Not enough memory. Please try" in ev
    head = evidence_text("Error: " + "w" * 2000, 0)
    assert head.startswith("Error: ") and len(head) <= MAX_EVIDENCE_CHARS
