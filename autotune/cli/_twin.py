"""``autotune twin ...``: the fitted twin of a study's box, and its check on the simulator."""

from __future__ import annotations

from typing import Annotated

import typer

from autotune._errors import ConfigError

app = typer.Typer(
    no_args_is_help=True,
    help="The digital twin of a study's box: its fitted simulator profile.",
)


@app.command("export")
def export(
    study_name: Annotated[str, typer.Option("--study-name", help="The study to fit.")],
    storage: Annotated[
        str | None,
        typer.Option("--storage", help="SQLAlchemy URL (default: sqlite:///studies/NAME.db)."),
    ] = None,
    studies_dir: Annotated[
        str, typer.Option("--studies-dir", help="Folder of study databases.")
    ] = "studies",
    facts: Annotated[
        str | None,
        typer.Option(
            "--facts",
            metavar="FILE",
            help="The box's facts (YAML; default: the simulator profile of a study on the "
            "simulator).",
        ),
    ] = None,
) -> None:
    """Print the profile the twin fitted to the study's trials (YAML, for `autotune sim serve
    --sim-profile FILE` and `autotune bench search --profile FILE`)."""
    from autotune.cli._twin_study import twin_of_study
    from autotune.report import load_study
    from autotune.study._storage import storage_faults, study_paths

    paths = study_paths(study_name, storage=storage, studies_dir=studies_dir)
    with storage_faults(paths):
        study, paths = load_study(study_name, storage=storage, studies_dir=studies_dir)
        twin = twin_of_study(study, facts_file=facts)
    typer.echo(twin.to_yaml(), nl=False)


@app.command("check")
def check(
    space: Annotated[str, typer.Option("--space", help="Search space file (engine sim).")],
    profile: Annotated[
        str | None,
        typer.Option("--profile", help="Simulator profile, the truth (default: the space's)."),
    ] = None,
    trials: Annotated[int, typer.Option("--trials", help="Trials of the study.", min=2)] = 30,
    seed: Annotated[int, typer.Option("--seed", help="The study's seed.")] = 0,
    configs: Annotated[
        int, typer.Option("--configs", help="Random feasible configurations compared.", min=1)
    ] = 20,
    errors: Annotated[
        str | None,
        typer.Option(
            "--twin-errors",
            help="What the prior's centre is wrong by, GROUP=FACTOR,... (default "
            "bandwidth=0.85,acceptance=0.9,allreduce=1.5; none: no errors).",
        ),
    ] = None,
    sampler: Annotated[
        str,
        typer.Option(
            "--sampler",
            help="The study's sampler: gp (the whole --trials, spread over the space) or twin "
            "(the twin-guided search, which stops once it expects no better).",
        ),
    ] = "gp",
    survey: Annotated[
        int,
        typer.Option(
            "--survey",
            help="Then this many trials of --sampler survey (where the twin knows least), as "
            "`autotune study resume --sampler survey --n-trials N` adds them.",
            min=0,
        ),
    ] = 0,
) -> None:
    """Run a study on the simulator (the search benchmark's oracle), fit the twin to it as
    `twin export` does, and print how far the fitted profile's predictions at random
    feasible configurations are from the true profile's, and what it learned."""
    from autotune.cli._twin_study import check_twin, parse_errors

    if sampler not in ("gp", "twin"):
        raise ConfigError(
            f"unknown sampler {sampler!r}", source="--sampler", hint="choose gp or twin"
        )
    result = check_twin(
        space,
        profile=profile,
        trials=trials,
        seed=seed,
        configs=configs,
        errors=parse_errors(errors),
        sampler=sampler,
        survey=survey,
    )
    typer.echo("\n".join(result.lines()))
