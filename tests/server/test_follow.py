"""LogFollower against a real file written in pieces, as a server writes its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune._errors import ServerError
from autotune.server import LogFollower


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_lines_appear_as_they_are_completed(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    follower = LogFollower(log)
    assert follower.read_new_lines() == []  # not created yet
    append(log, b"Load weight begin\nKV Cache is al")
    assert follower.read_new_lines() == ["Load weight begin"]
    assert follower.read_new_lines() == []
    append(log, b"located. #tokens: 100\n")
    assert follower.read_new_lines() == ["KV Cache is allocated. #tokens: 100"]
    assert follower.line_count == 2
    assert follower.offset == log.stat().st_size


def test_partial_last_line_is_returned_when_final(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    append(log, b"one\nno newline at exit")
    follower = LogFollower(log)
    assert follower.read_new_lines() == ["one"]
    assert follower.read_new_lines(final=True) == ["no newline at exit"]
    assert follower.read_new_lines(final=True) == []


def test_crlf_and_carriage_return_progress_bars(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    append(log, b"windows line\r\nLoading: 10%\rLoading: 60%\rLoading: 100%\ndone\r")
    follower = LogFollower(log)
    assert follower.read_new_lines() == [
        "windows line",
        "Loading: 10%",
        "Loading: 60%",
        "Loading: 100%",
    ]
    # The CR at the end may be half of a CRLF: only the next byte tells.
    append(log, b"\nnext\n")
    assert follower.read_new_lines() == ["done", "next"]


def test_invalid_utf8_is_replaced_not_fatal(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    append(log, b"bad \xff\xfe bytes\nok \xe2\x9c\x93\n")
    lines = LogFollower(log).read_new_lines()
    assert lines == ["bad \ufffd\ufffd bytes", "ok \u2713"]


def test_multibyte_character_split_across_writes(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    follower = LogFollower(log)
    append(log, "temp 2023年".encode()[:-1])
    assert follower.read_new_lines() == []
    append(log, "temp 2023年".encode()[-1:] + b"\n")
    assert follower.read_new_lines() == ["temp 2023年"]


def test_very_long_line_is_cut_and_the_next_line_is_whole(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    follower = LogFollower(log, max_line_bytes=100)
    append(log, b"x" * 80)
    assert follower.read_new_lines() == []
    append(log, b"x" * 500)  # still no line end: the line is cut now
    lines = follower.read_new_lines()
    assert len(lines) == 1 and lines[0].startswith("x" * 100)
    assert "truncated" in lines[0] and "x" * 101 not in lines[0]
    append(log, b"y" * 300 + b"\nnext line\n")
    assert follower.read_new_lines() == ["next line"]
    append(log, b"z" * 150 + b"\n")  # a long line arriving whole is cut too
    (cut,) = follower.read_new_lines()
    assert cut.startswith("z" * 100) and "z" * 101 not in cut


def test_reads_are_bounded_but_nothing_is_lost(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    expected = [f"line {i}" for i in range(200)]
    append(log, "".join(f"{line}\n" for line in expected).encode())
    follower = LogFollower(log, max_read_bytes=64)
    got: list[str] = []
    for _ in range(1000):
        batch = follower.read_new_lines()
        if not batch and follower.offset == log.stat().st_size:
            break
        got.extend(batch)
    assert got == expected


def test_start_offset_skips_earlier_launches(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    append(log, b"previous launch\n")
    offset = log.stat().st_size
    append(log, b"this launch\n")
    assert LogFollower(log, start_offset=offset).read_new_lines() == ["this launch"]


def test_tail_keeps_the_last_non_blank_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    append(log, b"a\n\nb\n   \nc\n")
    follower = LogFollower(log, keep_tail=2)
    assert follower.read_new_lines() == ["a", "", "b", "   ", "c"]
    assert follower.tail(5) == ["b", "c"]
    assert follower.tail(1) == ["c"]
    assert follower.tail(0) == []


def test_truncated_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    append(log, b"old line one\nold line two\n")
    follower = LogFollower(log)
    assert len(follower.read_new_lines()) == 2
    log.write_bytes(b"new\n")
    assert follower.read_new_lines() == ["new"]


def test_unreadable_log_is_a_server_error(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    with pytest.raises(ServerError) as info:
        LogFollower(directory).read_new_lines()
    assert str(directory) in str(info.value)
    assert isinstance(info.value.__cause__, OSError)
