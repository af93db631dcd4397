"""`autotune logs` commands: read SGLang server logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

#: The exit status of ``classify`` on a log that shows a crash (0: no crash; 2: unreadable).
CRASH_EXIT = 1

app = typer.Typer(
    no_args_is_help=True,
    help="Read SGLang server logs: why a server crashed, or whether it is ready.",
)


@app.command("classify")
def classify(
    logfile: Annotated[
        Path,
        typer.Argument(
            metavar="LOGFILE", help="An SGLang server log (plain text; prefixes are fine)."
        ),
    ],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object: category, evidence, line_number, advice, moves,"
            " is_crash, exit_code.",
        ),
    ] = False,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            metavar="KIND",
            help="The engine kind whose log it is (its crash rules read it).",
        ),
    ] = "sglang",
    exit_code: Annotated[
        str | None,
        typer.Option(
            "--exit-code",
            metavar="N",
            help="The server process's exit status, where known (negative: killed by signal -N,"
            " as Python reports it). A log of a process that exited with nothing deciding reads"
            " as unknown_crash, not starting; without it, a log that shows no start-up step"
            " reads as undecided.",
        ),
    ] = None,
) -> None:
    """Name the crash category of a server log (or ready / running / starting, or undecided
    where the text shows no start-up step and no crash), the line that shows it, and what to
    change.

    Exit status: 0 when the log shows no crash, 1 when it shows one (also with --json), 2 when
    the file cannot be read.
    """
    from autotune._errors import ConfigError
    from autotune.crashes import classify_file
    from autotune.engines import EngineSpec, create_engine, engine_kinds

    if engine not in engine_kinds():  # (the space's engine.kind would be blamed otherwise)
        raise ConfigError(
            f"unknown engine kind {engine!r}",
            source="--engine",
            hint="choose one of: " + ", ".join(engine_kinds()),
        )
    code = None if exit_code is None else parse_exit_code(exit_code)
    rules = create_engine(EngineSpec(kind=engine)).crash_rules()
    binary = _not_text(logfile)
    if binary is not None:  # (read as text it would be "still starting")
        raise ConfigError(
            f"{logfile} is {binary}, not a server log",
            source="LOGFILE",
            hint="give the server's text log (its stdout and stderr as written to a file)",
        )
    result = classify_file(logfile, rules, exit_code=code)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), ensure_ascii=False))
        raise typer.Exit(CRASH_EXIT if result.is_crash else 0)
    kind = "crash" if result.is_crash else "no crash"
    typer.echo(f"category: {result.category} ({kind})")
    if result.evidence is None:
        typer.echo("evidence: none (no line decides it)")
    else:
        typer.echo(f"evidence: line {result.line_number}: {result.evidence}")
    if code is not None:
        typer.echo(f"exit:     {_exit_words(code)}")
    typer.echo(f"advice:   {result.advice}")
    raise typer.Exit(CRASH_EXIT if result.is_crash else 0)


def parse_exit_code(text: str) -> int:
    """The exit status ``--exit-code`` gives: an integer from -64 (killed by signal 64) to 255.

    Raises:
        ConfigError: not an integer, or out of that range.
    """
    from autotune._errors import ConfigError

    hint = (
        "give the exit status as an integer from 0 to 255, or -N for a process killed by signal N"
    )
    try:
        code = int(text.strip())
    except ValueError:
        raise ConfigError(
            f"not an exit status: {text!r}", source="--exit-code", hint=hint
        ) from None
    if not -64 <= code <= 255:
        raise ConfigError(f"exit status out of range: {code}", source="--exit-code", hint=hint)
    return code


def _exit_words(code: int) -> str:
    if code < 0:
        return f"killed by signal {-code}"
    return f"exited with code {code}"


#: Leading bytes of the compressed files a log is often kept as.
_COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"PK\x03\x04": "zip",
}


def _not_text(path: Path) -> str | None:
    """What ``path`` is when it is no text (a compressed or binary file), else None (also when
    it cannot be read: the classifier says so)."""
    try:
        with path.open("rb") as f:
            head = f.read(64 * 1024)
    except OSError:
        return None
    for magic, kind in _COMPRESSED.items():
        if head.startswith(magic):
            return f"a {kind}-compressed file (decompress it first)"
    if b"\x00" in head:
        return "a binary file (it holds NUL bytes)"
    control = sum(1 for b in head if b < 0x20 and b not in b"\t\n\r\x0b\x0c\x1b")
    if head and control > len(head) // 10:
        return "a binary file (mostly control bytes)"
    return None
