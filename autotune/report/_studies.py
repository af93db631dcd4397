"""Listing studies: every study of a storage, or of every SQLite file in the studies folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune._errors import StorageError
from autotune.study._storage import StudyPaths, open_storage, study_paths


@dataclass(frozen=True)
class StudyInfo:
    name: str
    storage_url: str
    finished: int
    running: int
    best_value: float | None
    direction: str


def list_studies(
    *, storage: str | None = None, studies_dir: str | Path = "studies"
) -> list[StudyInfo]:
    """Studies of ``storage``, or of every ``*.db`` file in ``studies_dir``.

    The best value of each is that of the report: measured trials within the study's constraints.

    Raises:
        StorageError: ``storage`` cannot be opened, or names a SQLite file that does not exist.
    """
    import optuna
    from optuna.trial import TrialState

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
    out: list[StudyInfo] = []
    for url in urls:
        paths = StudyPaths(Path(url).stem, url, Path("."), Path("."))
        try:
            rdb = open_storage(paths, writing=False)
            summaries = rdb.get_all_studies()
        except StorageError:
            if storage is not None:
                raise
            continue
        for s in summaries:
            study = optuna.load_study(study_name=s.study_name, storage=rdb)
            trials = study.get_trials(deepcopy=False)
            done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
            single = len(study.directions) == 1  # a multi-objective study has no one best
            values = [
                t.value
                for t in trials
                if single
                and t.state == TrialState.COMPLETE
                and t.value is not None
                and t.user_attrs.get("outcome", "ok") == "ok"
                and all(v <= 0 for v in t.constraints.values())
            ]
            maximize = study.directions[0].name == "MAXIMIZE"
            best = (max if maximize else min)(values) if values else None
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
