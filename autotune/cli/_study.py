"""`autotune study` commands."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="study commands")


def register_root_commands(root: typer.Typer) -> None:
    """Commands that sit at the top level (``autotune dashboard``)."""
