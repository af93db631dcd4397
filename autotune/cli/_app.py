"""The root command and the one place where errors become messages and exit codes."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from autotune._errors import AutotuneError
from autotune.cli import _bench, _bundle, _logs, _sim, _smoke, _space, _study, _twin

app = typer.Typer(
    name="autotune",
    help="Tune SGLang's speculative-decoding settings with Bayesian optimisation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(_study.app, name="study")
app.add_typer(_space.app, name="space")
app.add_typer(_sim.app, name="sim")
app.add_typer(_bench.app, name="bench")
app.add_typer(_logs.app, name="logs")
app.add_typer(_twin.app, name="twin")
app.add_typer(_bundle.app, name="bundle")
_study.register_root_commands(app)
_smoke.register(app)


def version() -> str:
    """The installed distribution's version, else the package's own (a source tree)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("autotune")
    except PackageNotFoundError:
        import autotune

        return autotune.__version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"autotune {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Tune SGLang's speculative-decoding settings with Bayesian optimisation."""


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code.

    Usage mistakes get the command's usage and exit code 2; an :class:`AutotuneError` is
    printed as a message (never a traceback) with its exit code.
    """
    args = sys.argv[1:] if argv is None else argv
    command = typer.main.get_command(app)
    try:
        command.main(args=args, prog_name="autotune", standalone_mode=True)
    except SystemExit as e:
        return _exit_code(e.code)
    except AutotuneError as e:
        _print_error(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        _print_error("interrupted")
        return 130
    return 0


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    _print_error(str(code))
    return 1


def _print_error(message: str) -> None:
    sys.stderr.write(f"autotune: error: {message}\n")
    sys.stderr.flush()
