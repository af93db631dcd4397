"""`autotune space sample`: the launch commands a study would run, for review before GPU hours."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from autotune._errors import ConfigError, EngineError

if TYPE_CHECKING:
    from autotune.engines import Engine
    from autotune.space import SearchSpace


def register(app: typer.Typer) -> None:
    """Add the ``sample`` command to the ``space`` command group ``app``."""
    app.command("sample")(sample)


def sample(
    path: Annotated[Path, typer.Argument(help="The space file, e.g. search_spaces/eagle3.yaml.")],
    n: Annotated[int, typer.Option("-n", "--num", min=1, help="How many proposals.")] = 5,
    engine: Annotated[
        str | None,
        typer.Option(help="Launch with this engine (sim or sglang) instead of the space's."),
    ] = None,
    sglang_version: Annotated[
        str | None,
        typer.Option(
            "--sglang-version",
            help="Spell flags as this SGLang release does, instead of asking the installed one.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random proposals.")] = 0,
) -> None:
    """Print the exact launch command of N random proposals, one per line (secrets redacted).

    Proposals that the engine's rules or its release refuse are printed as
    ``# refused (<category>): <reason>`` lines, so that the count stays N.
    """
    from autotune.space import load_space

    space = load_space(path)
    adapter = _engine_for(space, engine, sglang_version)
    typer.echo(f"# {n} proposals of {space.source}, {adapter.describe()}", err=True)
    for params in space.sample(n, seed=seed):
        config = space.config_for(params)
        refusal = adapter.check_rules(config) or adapter.precheck(config)
        if refusal is not None:
            typer.echo(f"# refused ({refusal.category}): {refusal.reason}")
            continue
        launch = adapter.build_launch(config, port=space.engine.port, workload=space.workload)
        typer.echo(launch.display())


def _engine_for(space: SearchSpace, kind: str | None, version: str | None) -> Engine:
    from autotune.engines import create_engine, engine_class, engine_kinds

    spec = space.engine
    if kind is not None:
        if kind not in engine_kinds():
            raise ConfigError(
                f"unknown engine {kind!r}",
                source="--engine",
                hint="choose one of: " + ", ".join(engine_kinds()),
            )
        spec = dataclasses.replace(spec, kind=kind)
    if version is not None:
        pinned = engine_class(spec.kind).with_release(spec, version)
        if pinned is None:
            raise ConfigError(
                f"--sglang-version applies to the sglang engine; this space uses {spec.kind!r}",
                source="--sglang-version",
                hint="add --engine sglang",
            )
        spec = pinned
    adapter = create_engine(spec)
    try:
        adapter.check_installed()
    except EngineError as e:
        raise EngineError(
            e.message,
            hint="pass --sglang-version (e.g. --sglang-version 0.5.23) to spell the flags of that "
            "release without SGLang installed here",
        ) from e
    return adapter
