"""Every ``autotune ...`` command line the README shows parses with the command line it names.

The lines are taken from the README's fenced code blocks (a line may chain commands with ``&&``
or ``;`` and end with a ``#`` comment) and from its inline code spans that are a whole command
(no ``[optional]`` parts, ``...`` or alternatives): the forms a user copies. Each is parsed by
the real click command tree, down to the subcommand, the way ``autotune`` parses it, without
running anything; a flag renamed or removed in the CLI fails here, naming the README line.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from autotune.cli import app

try:  # typer 0.2x carries its own click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - typer over the click package
    from click import exceptions as click_errors  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`(autotune [^`]+)`")
#: Marks of a usage form rather than a command line (optional parts, alternatives, elisions,
#: placeholders).
_USAGE = re.compile(r"\[|\||\.\.\.| / |\bNAME\b|\bFILE\b")


def readme_commands(text: str) -> list[str]:
    """The ``autotune`` command lines a reader can copy from ``text`` (Markdown)."""
    found: list[str] = []
    for block in _FENCE.findall(text):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            for part in re.split(r"&&|;", line):
                part = part.strip()
                if part.startswith("autotune ") and not _USAGE.search(part):
                    found.append(part)
    prose = _FENCE.sub("", text)
    found += [m for m in _INLINE.findall(prose) if not _USAGE.search(m)]
    return list(dict.fromkeys(found))


def parse(argv: list[str]) -> Any:
    """Parse ``argv`` (without the leading ``autotune``) as ``autotune`` does, down to the
    subcommand, running no command; the click context of the command it reaches (None for an
    option that answers and exits, ``--version``). A usage mistake raises click's
    ``UsageError``."""
    command: Any = typer.main.get_command(app)
    try:
        ctx = command.make_context("autotune", list(argv))
    except typer.Exit:
        return None
    while hasattr(command, "resolve_command"):
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        if not rest:
            break
        name, sub, args = command.resolve_command(ctx, rest)
        assert name is not None and sub is not None
        ctx = sub.make_context(name, args, parent=ctx)
        command = sub
    return ctx


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def test_the_readme_shows_the_quick_start_commands() -> None:
    names = [" ".join(shlex.split(c)[1:3]) for c in COMMANDS]
    assert "study start" in names
    assert "study report" in names
    assert "dashboard --study-name" in names


@pytest.mark.parametrize("line", COMMANDS)
def test_a_readme_command_parses(line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    ctx = parse(shlex.split(line)[1:])
    assert ctx is None or not hasattr(ctx.command, "resolve_command"), f"{line!r} is a group"


@pytest.mark.parametrize(
    "line",
    [
        "autotune study start --space search_spaces/eagle3.yaml --n-trial 15",
        "autotune study begin --space search_spaces/eagle3.yaml",
        "autotune study report --study-name",
    ],
)
def test_a_command_the_cli_does_not_take_fails(line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(click_errors.UsageError):
        parse(shlex.split(line)[1:])


def test_usage_forms_and_comments_are_left_out() -> None:
    text = (
        "```bash\n"
        "python -m venv .venv && autotune study start --space s.yaml  # the demo\n"
        "autotune smoke --space FILE [--dir D]\n"
        "```\n"
        "Then `autotune study status --study-name demo`, or `autotune bench run ...`.\n"
    )
    assert readme_commands(text) == [
        "autotune study start --space s.yaml",
        "autotune study status --study-name demo",
    ]
