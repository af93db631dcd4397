"""Listing studies: every study of a storage, or of every SQLite file in the studies folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune._errors import StorageError
from autotune.study._storage import StudyPaths, open_storage


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
    """Studies of ``storage``, or of every ``*.db`` file in ``studies_dir``."""
    import optuna
    from optuna.trial import TrialState

    urls: list[str]
    if storage is not None:
        urls = [storage]
    else:
        folder = Path(studies_dir).expanduser().resolve()
        urls = [f"sqlite:///{p}" for p in sorted(folder.glob("*.db"))]
    out: list[StudyInfo] = []
    for url in urls:
        paths = StudyPaths(Path(url).stem, url, Path("."), Path("."))
        try:
            rdb = open_storage(paths)
            summaries = rdb.get_all_studies()
        except StorageError:
            if storage is not None:
                raise
            continue
        for s in summaries:
            study = optuna.load_study(study_name=s.study_name, storage=rdb)
            trials = study.get_trials(deepcopy=False)
            done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
            values = [t.value for t in trials if t.state == TrialState.COMPLETE and t.value]
            maximize = study.direction.name == "MAXIMIZE"
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
