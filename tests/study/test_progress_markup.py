"""Trial lines on a terminal: rich must print the role tags (``[baseline]``, ``[search]``) and
anything else in brackets literally, not read them as markup and drop them."""

from __future__ import annotations

import io

from rich.console import Console

from autotune.study._progress import StudyProgress
from autotune.study._record import Outcome, TrialRecord


def _terminal() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=200, color_system=None)
    return console, buffer


def test_role_tags_are_printed_literally_on_a_terminal() -> None:
    console, buffer = _terminal()
    lines = [
        TrialRecord(outcome=Outcome.OK, role=role, value=100.0 + i).line(i, "output_tok_s")
        for i, role in enumerate(("baseline", "search", "enqueued", "informed"))
    ]
    with StudyProgress(4, enabled=True, title="[bold]odd[/bold] name", console=console) as p:
        p.phase(0, "starting [server]")
        for i, line in enumerate(lines):
            assert f"[{('baseline', 'search', 'enqueued', 'informed')[i]}]" in line
            p.finished(i + 1, line, best="[x] 101.0 (trial 1)")
    out = buffer.getvalue()
    for tag in ("[baseline]", "[search]", "[enqueued]", "[informed]"):
        assert tag in out, out
    for line in lines:
        assert line in out, out
    assert "[bold]odd[/bold] name" in out  # the study name too
    assert "best [x] 101.0" in out


def test_without_a_terminal_lines_go_to_stderr_unchanged(capsys: object) -> None:
    line = TrialRecord(outcome=Outcome.OK, role="baseline", value=1.0).line(0, "output_tok_s")
    with StudyProgress(1, enabled=False, title="t") as p:
        p.finished(1, line)
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert err == line + "\n"
