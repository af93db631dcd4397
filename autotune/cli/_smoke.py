"""`autotune smoke`: check a space's whole path on the box with a tiny model made there."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from autotune.smoke import SmokeStep

_MARK = {True: "passed", False: "FAILED", None: "skipped"}


def register(root: typer.Typer) -> None:
    """Add ``autotune smoke`` to the root command."""

    @root.command("smoke")
    def smoke(
        space: Annotated[
            Path, typer.Option("--space", help="The space file whose engine and launch to check.")
        ],
        folder: Annotated[
            Path | None,
            typer.Option(
                "--dir",
                help="Where the tiny model and server logs go (default: a new temp folder).",
            ),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    ) -> None:
        """Start, measure and stop a tiny model made on this box through the space's own engine,
        interpreter, launch prefix and TP, and a start whose KV pool cannot fit; report each step.

        Takes a minute or two on a GPU box. Exit code 1 when a step fails.
        """
        from autotune.smoke import run_smoke
        from autotune.space import load_space

        loaded = load_space(space)
        where = folder if folder is not None else Path(tempfile.mkdtemp(prefix="autotune-smoke-"))

        def show(step: SmokeStep) -> None:
            if as_json:
                return
            typer.echo(f"{_MARK[step.passed]:>8}  {step.name}: {step.detail}")
            if step.evidence and step.passed is not None:
                typer.echo(f"          line: {step.evidence}")

        if not as_json:
            typer.echo(f"smoke: {loaded.name} ({loaded.engine.kind}), files in {where}")
        report = run_smoke(loaded, where, on_step=show)
        if as_json:
            typer.echo(json.dumps(report.to_dict(), indent=2, default=str))
        else:
            failed = [s.name for s in report.steps if s.passed is False]
            typer.echo(
                "smoke: every step passed"
                if report.passed
                else f"smoke: failed at {', '.join(failed)}; server logs in {where}"
            )
        if not report.passed:
            raise typer.Exit(1)

    @root.command("make-tiny-model")
    def make_tiny_model(
        folder: Annotated[Path, typer.Argument(help="Where to write the model (created).")],
        tp: Annotated[
            int, typer.Option("--tp", min=1, max=1024, help="Heads divisible by it.")
        ] = 1,
        layers: Annotated[int, typer.Option(min=1, max=256, help="Decoder layers.")] = 4,
        hidden: Annotated[int, typer.Option(min=16, max=16384, help="Hidden size.")] = 512,
        heads: Annotated[int, typer.Option(min=1, max=1024, help="Attention heads.")] = 8,
        intermediate: Annotated[
            int, typer.Option(min=16, max=65536, help="MLP intermediate size.")
        ] = 1376,
        seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Seed of the weights.")] = 0,
    ) -> None:
        """Make a tiny random-weight Llama with a tokenizer trained on local text (no download):
        a model any SGLang or vLLM loads, for smoke tests and real-server checks."""
        from autotune.smoke import TinyModelSpec
        from autotune.smoke import make_tiny_model as make

        spec = TinyModelSpec.for_tp(
            tp,
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=heads,
            intermediate=intermediate,
            seed=seed,
        )
        model = make(folder, spec)
        typer.echo(
            f"{folder}: Llama, {spec.layers} layers, hidden {spec.hidden}, {spec.heads} heads, "
            f"vocab {spec.vocab}, {spec.parameter_count() / 1e6:.0f}M parameters, "
            f"{model.weight_bytes / 2**20:.1f} MiB of bfloat16 weights"
        )
