"""The ``autotune`` command line: thin commands over the parts of the package."""

from __future__ import annotations

from autotune.cli._app import app, main

__all__ = ["app", "main"]
