"""Listing studies: every study of a storage, or of every SQLite file in the studies folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autotune._errors import StorageError
from autotune.study._record import best_feasible_trial, first_value
from autotune.study._storage import StudyPaths, open_for_reading, storage_faults, study_paths


@dataclass(frozen=True)
class StudyInfo:
    name: str
    storage_url: str
    finished: int
    running: int
    best_value: float | None
    direction: str


@dataclass
class StudyListing:
    """The studies found, and the database files that could not be read (with why)."""

    studies: list[StudyInfo] = field(default_factory=list)
    #: ``(file or URL, message)`` of each database that could not be read (corrupted, ...).
    unreadable: list[tuple[str, str]] = field(default_factory=list)


def list_studies(
    *, storage: str | None = None, studies_dir: str | Path = "studies"
) -> list[StudyInfo]:
    """Studies of ``storage``, or of every readable ``*.db`` file in ``studies_dir``.

    See :func:`scan_studies`, which also names the files that could not be read.
    """
    return scan_studies(storage=storage, studies_dir=studies_dir).studies


def scan_studies(
    *, storage: str | None = None, studies_dir: str | Path = "studies"
) -> StudyListing:
    """Studies of ``storage``, or of every ``*.db`` file in ``studies_dir``.

    The best value of each is that of the report: measured trials within the study's constraints.
    A file of the folder that cannot be read (corrupted, not a database) is named in
    ``unreadable`` with its message, and the others are still listed; a read-only file is read.

    Raises:
        StorageError: ``storage`` cannot be opened or read, or names a SQLite file that does not
            exist.
    """
    urls: list[str]
    if storage is not None:
        given = study_paths("study", storage=storage)
        if given.sqlite_file is not None and not given.sqlite_file.exists():
            raise StorageError(
                f"no study database {str(given.sqlite_file)!r}",
                hint="check the --storage URL, or list a folder with --studies-dir",
            )
        urls = [storage]
    else:
        folder = Path(studies_dir).expanduser().resolve()
        urls = [f"sqlite:///{p}" for p in sorted(folder.glob("*.db"))]
    listing = StudyListing()
    for url in urls:
        paths = StudyPaths(Path(url).stem, url, Path("."), Path("."))
        try:
            rdb = open_for_reading(paths)
            with storage_faults(paths):
                listing.studies.extend(_infos(rdb, url))
        except StorageError as e:
            if storage is not None:
                raise
            where = str(paths.sqlite_file) if paths.sqlite_file is not None else url
            listing.unreadable.append((where, e.message))
    return listing


def _infos(rdb: object, url: str) -> list[StudyInfo]:
    import optuna
    from optuna.trial import TrialState

    assert isinstance(rdb, optuna.storages.BaseStorage)
    out: list[StudyInfo] = []
    for s in rdb.get_all_studies():
        study = optuna.load_study(study_name=s.study_name, storage=rdb)
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        single = len(study.directions) == 1  # a multi-objective study has no one best
        maximize = study.directions[0].name == "MAXIMIZE"
        chosen = best_feasible_trial(trials, maximize=maximize) if single else None
        best = None if chosen is None else first_value(chosen)
        out.append(
            StudyInfo(
                s.study_name,
                url,
                len(done),
                sum(t.state == TrialState.RUNNING for t in trials),
                best,
                "maximize" if maximize else "minimize",
            )
        )
    return out
