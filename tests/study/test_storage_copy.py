"""Issue 42: storage that can be copied, and a storage file taken away under a running tuner.

SQLite in WAL mode keeps a study in ``NAME.db-wal`` until a checkpoint: the ``.db`` file stayed
4 KiB through a whole study, and copying ``NAME.db`` (as anyone sharing a study does) copied
nothing. The tuner checkpoints after each trial and when it stops. A ``NAME.db`` deleted while
the tuner ran went unnoticed ("3 of 3 trials finished", the trials in an orphaned ``-wal``);
now the tuner stops with a message and exit status 1."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import TrialState

from ._lab import CONFIGS, StudyLab, no_traceback

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def _finished_in_copy(db: Path, name: str, folder: Path) -> int:
    """The finished trials of a copy of the ``.db`` file alone (no ``-wal``, no ``-shm``)."""
    folder.mkdir()
    copy = folder / db.name
    # copied as a user would, by another process: a file of the database opened and closed in
    # this process would drop the POSIX locks of this process's own connection to it
    subprocess.run(["cp", str(db), str(copy)], check=True)
    storage = optuna.storages.RDBStorage(f"sqlite:///{copy}")
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        return len(study.get_trials(deepcopy=False, states=FINISHED))
    finally:
        storage.engine.dispose()


def _finished_so_far(lab: StudyLab, name: str) -> int:
    """Finished trials of the running study; 0 until the tuner has created it in the file."""
    try:
        return len(lab.finished(name))
    except KeyError:  # optuna.load_study: the study record is not written yet
        return 0


def test_the_db_file_alone_is_the_study_after_each_trial_and_at_exit(lab: StudyLab) -> None:
    name = "copyable"
    space = lab.space(name, faults=["slow_start:100"], configs=CONFIGS[:2])
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "3", "--no-informed")
    db = lab.studies / f"{name}.db"

    # during the study: once a trial finished, the copy of NAME.db holds it
    lab.wait_for("a finished trial", lambda: db.exists() and _finished_so_far(lab, name) >= 1, 120)
    lab.wait_for("the next trial's server", lab.wait_server, 60)
    assert _finished_in_copy(db, name, lab.root / "during") >= 1

    tuner.send_signal(signal.SIGINT)  # stopped mid-trial: the checkpoint at exit
    assert lab.finish(tuner, timeout=60).rc == 130
    done = len(lab.finished(name))
    assert _finished_in_copy(db, name, lab.root / "interrupted") == done

    run = lab.cli("study", "resume", "--study-name", name)
    assert run.rc == 0, run.show()
    assert _finished_in_copy(db, name, lab.root / "after") == 3
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def test_a_storage_file_deleted_mid_run_stops_the_study(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("the study's SQLite file deleted while the tuner runs")
    name = "vanished"
    space = lab.space(name, faults=["slow_start:100"], configs=CONFIGS[:2])
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "3", "--no-informed")
    lab.wait_server()
    db = lab.studies / f"{name}.db"
    db.unlink()

    run = lab.finish(tuner, timeout=180)
    assert run.rc == 1, run.show()
    no_traceback(run)
    assert "trials finished" not in run.out, run.show()
    assert str(db) in run.err, run.show()
    lab.check_no_servers("after the tuner stopped")
    assert not db.exists()  # nothing created an empty file in its place
