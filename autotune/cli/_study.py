"""``autotune study ...`` and ``autotune dashboard``."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Run, resume and report tuning studies.")

StudyName = Annotated[
    str | None, typer.Option("--study-name", help="Study name (default: the space's name).")
]
Storage = Annotated[
    str | None,
    typer.Option("--storage", help="SQLAlchemy URL (default: sqlite:///studies/NAME.db)."),
]
StudiesDir = Annotated[
    str,
    typer.Option("--studies-dir", help="Folder of study databases, artifacts and logs."),
]
ArtifactsDir = Annotated[
    str | None, typer.Option("--artifacts-dir", help="Folder of server logs and results.")
]
ShowProgress = Annotated[
    bool | None, typer.Option("--progress/--no-progress", help="Progress display.")
]
Confirm = Annotated[
    bool | None,
    typer.Option(
        "--confirm/--no-confirm",
        help="Confirm the best candidates after the search (default: the space's confirm).",
    ),
]

Facts = Annotated[
    str | None,
    typer.Option(
        "--facts",
        metavar="FILE",
        help="The box's facts (YAML) for --sampler twin or survey (default: the simulator's "
        "profile).",
    ),
]

Join = Annotated[
    bool,
    typer.Option(
        "--join",
        help="Run as a second worker of a study whose tuner is still running (refused without "
        "it: on one box two servers would run at once).",
    ),
]

SAMPLER_HELP = (
    "auto (the twin where it can serve the study, else GP; TPE for conditional spaces or "
    "without PyTorch), gp, tpe, random, twin (the box's twin proposes; needs --facts on a real "
    "box), survey (the twin proposes where it knows least, for a twin to export; with resume "
    "--n-trials N)."
)


def _options(**values: object) -> object:
    from autotune.study import StudyOptions

    return StudyOptions(**{k: v for k, v in values.items() if v is not None})  # type: ignore[arg-type]


@app.command("start")
def start(
    space: Annotated[str, typer.Option("--space", help="The search space file (YAML).")],
    study_name: StudyName = None,
    n_trials: Annotated[
        int, typer.Option("--n-trials", min=1, help="Finished trials to reach (baseline included).")
    ] = 20,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Stop starting trials after this many s.")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the sampler.")] = None,
    sampler: Annotated[
        str,
        typer.Option(
            "--sampler",
            help=SAMPLER_HELP,
        ),
    ] = "auto",
    facts: Facts = None,
    storage: Storage = None,
    studies_dir: StudiesDir = "studies",
    artifacts_dir: ArtifactsDir = None,
    no_informed: Annotated[
        bool, typer.Option("--no-informed", help="Do not enqueue SGLang's automatic choice first.")
    ] = False,
    progress: ShowProgress = None,
    confirm: Confirm = None,
) -> None:
    """Create a study from a search space and run it, then confirm its best candidates."""
    from autotune.study import start_study

    summary = start_study(
        _options(  # type: ignore[arg-type]
            space_path=space,
            study_name=study_name,
            n_trials=n_trials,
            timeout_s=timeout,
            seed=seed,
            sampler=sampler,
            facts=facts,
            storage=storage,
            studies_dir=studies_dir,
            artifacts_dir=artifacts_dir,
            informed=not no_informed,
            progress=progress,
            confirm=confirm,
        )
    )
    _finished(summary)


@app.command("resume")
def resume(
    study_name: Annotated[str, typer.Option("--study-name", help="The study to continue.")],
    space: Annotated[
        str | None, typer.Option("--space", help="Check the study against this space file.")
    ] = None,
    n_trials: Annotated[
        int | None,
        typer.Option(
            "--n-trials",
            min=1,
            help="Run this many more finished trials than the study has (as Optuna's n_trials).",
        ),
    ] = None,
    target_trials: Annotated[
        int | None,
        typer.Option(
            "--target-trials",
            min=1,
            help="Run until the study has this many finished trials in all (a new target).",
        ),
    ] = None,
    timeout: Annotated[float | None, typer.Option("--timeout")] = None,
    seed: Annotated[int | None, typer.Option("--seed")] = None,
    sampler: Annotated[
        str | None,
        typer.Option("--sampler", help=SAMPLER_HELP + " Default: the study's own (as started)."),
    ] = None,
    facts: Facts = None,
    storage: Storage = None,
    studies_dir: StudiesDir = "studies",
    artifacts_dir: ArtifactsDir = None,
    progress: ShowProgress = None,
    confirm: Confirm = None,
    join: Join = False,
) -> None:
    """Continue an interrupted study: interrupted trials run again, finished ones are kept.

    Without --n-trials or --target-trials it runs to the study's stored target; the sampler
    and --confirm/--no-confirm are those the study was started with unless given.
    """
    from autotune.study import resume_study

    if n_trials is not None and target_trials is not None:
        raise typer.BadParameter(
            "give --n-trials (this many more) or --target-trials (a total), not both",
            param_hint="'--n-trials' / '--target-trials'",
        )
    summary = resume_study(
        _options(  # type: ignore[arg-type]
            study_name=study_name,
            space_path=space,
            more_trials=n_trials,
            n_trials=target_trials,
            timeout_s=timeout,
            seed=seed,
            sampler=sampler,
            facts=facts,
            storage=storage,
            studies_dir=studies_dir,
            artifacts_dir=artifacts_dir,
            progress=progress,
            confirm=confirm,
            join=join,
        )
    )
    _finished(summary)


@app.command("confirm")
def confirm(
    study_name: Annotated[str, typer.Option("--study-name", help="The study to confirm.")],
    candidates: Annotated[
        int | None, typer.Option("--candidates", min=1, help="Best distinct configurations taken.")
    ] = None,
    min_rounds: Annotated[
        int | None, typer.Option("--min-rounds", min=2, help="Rounds before anything is decided.")
    ] = None,
    max_rounds: Annotated[
        int | None,
        typer.Option("--max-rounds", min=2, help="At most this many starts of each configuration."),
    ] = None,
    confidence: Annotated[
        float | None,
        typer.Option("--confidence", min=0.5, max=0.999, help="Family-wise confidence."),
    ] = None,
    storage: Storage = None,
    studies_dir: StudiesDir = "studies",
    artifacts_dir: ArtifactsDir = None,
    progress: ShowProgress = None,
    join: Join = False,
) -> None:
    """Re-measure the best candidates and the baseline interleaved, and give the verdict.

    Goes on where an interrupted confirmation stopped; the settings default to the space's
    confirm section.
    """
    from autotune.study import confirm_study

    summary = confirm_study(
        _options(  # type: ignore[arg-type]
            study_name=study_name,
            storage=storage,
            studies_dir=studies_dir,
            artifacts_dir=artifacts_dir,
            progress=progress,
            confirm=True,
            join=join,
        ),
        candidates=candidates,
        min_rounds=min_rounds,
        max_rounds=max_rounds,
        confidence=confidence,
    )
    _finished(summary)


def _finished(summary: object) -> None:
    from autotune.study import StudySummary

    assert isinstance(summary, StudySummary)
    why = " (time budget reached)" if summary.stopped_by == "timeout" else ""
    if summary.stopped_by == "others":
        why = f" ({summary.running_elsewhere} more running in other workers)"
    elif summary.stopped_by == "twin":
        why = f" (the search stopped: {summary.stop_reason})"
    if summary.verdict is not None:
        typer.echo(summary.verdict.headline)
    elif summary.stopped_by == "timeout":
        typer.echo(
            "not confirmed (the time budget ended the study first): "
            f"autotune study confirm --study-name {summary.name}"
        )
    typer.echo(
        f"study {summary.name}: {summary.finished} of {summary.target} trials finished{why}\n"
        f"  report:    autotune study report --study-name {summary.name}\n"
        f"  dashboard: autotune dashboard --study-name {summary.name}"
    )


@app.command("report")
def report(
    study_name: Annotated[str, typer.Option("--study-name", help="The study to report.")],
    storage: Storage = None,
    studies_dir: StudiesDir = "studies",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The best configuration, its speed-up over the baseline, crashes, and how to launch it."""
    from autotune.report import build_report, format_report, load_study
    from autotune.study._storage import storage_faults, study_paths

    # a failing storage (corrupted, full, unwritable) is a message naming the file
    paths = study_paths(study_name, storage=storage, studies_dir=studies_dir)

    with storage_faults(paths):
        study, paths = load_study(study_name, storage=storage, studies_dir=studies_dir)
        rep = build_report(study, paths)
    if as_json:
        typer.echo(json.dumps(rep.to_dict(), indent=2, default=str))
    else:
        typer.echo(format_report(rep))


@app.command("status")
def status(
    study_name: Annotated[str, typer.Option("--study-name")],
    storage: Storage = None,
    studies_dir: StudiesDir = "studies",
) -> None:
    """Where a study stands: running (pid and host), confirming (round N of M) or dead since
    when; finished, running and interrupted trials; best so far."""
    from optuna.trial import TrialState

    from autotune.report import build_report, load_study
    from autotune.study._claims import held_by_live_tuner
    from autotune.study._liveness import liveness
    from autotune.study._storage import storage_faults, study_paths

    # a failing storage (corrupted, full, unwritable) is a message naming the file
    paths = study_paths(study_name, storage=storage, studies_dir=studies_dir)

    with storage_faults(paths):
        study, paths = load_study(study_name, storage=storage, studies_dir=studies_dir)
        rep = build_report(study, paths, schedule=False)
        alive = liveness(study)
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        held = sum(1 for t in running if held_by_live_tuner(t))
    target = f"/{rep.target}" if rep.target else ""
    best = "-" if rep.best is None or rep.best.value is None else f"{rep.best.value:.2f}"
    orphaned = len(running) - held
    left = f", {orphaned} left by a dead tuner" if orphaned else ""
    typer.echo(
        f"{rep.study_name}: {rep.finished}{target} finished, {held} running{left}, "
        f"{rep.failed} interrupted; best {rep.metric} {best}"
    )
    for line in alive.lines:
        typer.echo(f"  {line}")
    for row in rep.rows[-5:]:
        value = "" if row.value is None else f" {row.value:.2f}"
        typer.echo(f"  trial {row.number} [{row.role}] {row.outcome}{value}")


@app.command("list")
def list_(
    storage: Storage = None,
    studies_dir: StudiesDir = "studies",
) -> None:
    """Studies in the storage (or in every database of the studies folder).

    A database file that cannot be read (corrupted, not a study database) is named on stderr
    with what to do, the others are still listed, and the exit status is 1.
    """
    from autotune._redact import redact_url
    from autotune.report._studies import scan_studies

    listing = scan_studies(storage=storage, studies_dir=studies_dir)
    for info in listing.studies:
        best = "-" if info.best_value is None else f"{info.best_value:.2f}"
        typer.echo(
            f"{info.name}: {info.finished} finished, {info.running} running, best {best}  "
            f"({redact_url(info.storage_url)})"
        )
    for where, message in listing.unreadable:
        typer.echo(f"autotune: error: cannot list {redact_url(str(where))}: {message}", err=True)
    if listing.unreadable:
        typer.echo(
            "  hint: restore a copy of each file named, or salvage it with "
            "`sqlite3 FILE .recover | sqlite3 NEW.db`",
            err=True,
        )
        raise typer.Exit(1)
    if not listing.studies:
        typer.echo("no studies found")


def register_root_commands(root: typer.Typer) -> None:
    """Commands at the top level (``autotune dashboard``)."""

    @root.command("dashboard")
    def dashboard(
        study_name: StudyName = None,
        storage: Storage = None,
        studies_dir: StudiesDir = "studies",
        artifacts_dir: ArtifactsDir = None,
        host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
        port: Annotated[int, typer.Option("--port", help="Port to serve on (1-65535).")] = 8080,
    ) -> None:
        """Serve optuna-dashboard on a study's storage, with its server logs as artifacts."""
        from autotune.report._dashboard import serve_dashboard

        serve_dashboard(
            study_name=study_name,
            storage=storage,
            studies_dir=studies_dir,
            artifacts_dir=artifacts_dir,
            host=host,
            port=port,
            out=sys.stderr,
        )
