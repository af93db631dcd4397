"""`autotune space` commands."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from autotune.engines import Engine

app = typer.Typer(no_args_is_help=True, help="Check and explore search-space files.")

#: Above this share of refused random proposals, ``check`` advises reshaping the space.
_REFUSED_WARN = 0.5


@app.command("check")
def check(
    path: Annotated[Path, typer.Argument(help="The space file, e.g. search_spaces/eagle3.yaml.")],
    proposals: Annotated[
        int,
        typer.Option(
            min=1, max=100_000, help="Random proposals to test against the engine's rules."
        ),
    ] = 1000,
    seed: Annotated[
        int, typer.Option(min=0, max=2**32 - 1, help="Seed of the random proposals.")
    ] = 0,
) -> None:
    """Validate a space file, summarise it, and count proposals the engine's rules refuse."""
    from autotune.engines import create_engine
    from autotune.space import load_space

    space = load_space(path)
    engine = create_engine(space.engine)
    typer.echo(space.summary())
    typer.echo("")
    launchable = _launchable(engine)
    samples = space.sample(proposals, seed=seed)
    reasons: Counter[tuple[str, str]] = Counter()
    for params in samples:
        refusal = engine.check_rules(space.config_for(params))
        if refusal is not None:
            rule = refusal.reason.split(":", 1)[0]
            reasons[(rule, refusal.knob or refusal.category)] += 1
    refused = sum(reasons.values())
    share = refused / len(samples)
    typer.echo(
        f"{engine.family}'s rules refuse {refused} of {len(samples)} random proposals "
        f"({share:.0%}); refused proposals are recorded as infeasible without starting a server."
    )
    for (rule, knob), count in reasons.most_common():
        typer.echo(f"  {count:>6}  {rule} ({knob})")
    if share > _REFUSED_WARN:
        typer.echo(
            "  most proposals are refused: narrow the ranges, or use `when:` so that a parameter "
            "is only tuned where the rules allow it (search_spaces/README.md)"
        )
    if samples:
        note = engine.workload_note(space.config_for(samples[0]), space.workload)
        if note is not None:
            typer.echo(f"note: {note}")
    if launchable is None:
        typer.echo(f"{space.source}: valid (fingerprint {space.fingerprint()})")
    else:
        typer.echo(
            f"{space.source}: valid as a file (fingerprint {space.fingerprint()}), but not "
            "runnable on this machine: `autotune study start` would refuse it (see the warning "
            "above)"
        )


def _launchable(engine: Engine) -> str | None:
    """Whether ``engine`` can be launched here, as ``study start`` checks first; the warning
    printed when not (None: it can)."""
    from autotune._errors import EngineError

    try:
        engine.check_installed()
    except EngineError as e:
        warning = f"warning: {e.message}; `autotune study start` would refuse this space here"
        if e.hint:
            warning += f" (to fix: {e.hint})"
        typer.echo(warning)
        typer.echo("")
        return warning
    return None


def _register_extra() -> None:
    from autotune.cli import _space_sample

    _space_sample.register(app)


_register_extra()
