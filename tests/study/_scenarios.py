"""Whole-study scenarios run on SQLite and on PostgreSQL: a tuner killed with SIGKILL in the middle
of a trial and resumed, and two workers sharing one study."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections import Counter

import psutil

from ._lab import CONFIGS, StudyLab, attrs_of, no_traceback

TUNER = "autotune:tuner"
PROCESS = "autotune:process"


def _storage_args(storage: str | None) -> list[str]:
    return ["--storage", storage] if storage else []


def _running(lab: StudyLab, name: str, storage: str | None, attr: str) -> bool:
    trials = lab.trials(name, storage) if _exists(lab, name, storage) else []
    return any(t.state.name == "RUNNING" and attr in t.system_attrs for t in trials)


def _exists(lab: StudyLab, name: str, storage: str | None) -> bool:
    if storage is None:
        # read the file directly: opening it through Optuna while the tuner creates its tables
        # would race with that creation
        db = lab.studies / f"{name}.db"
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
                rows = conn.execute("SELECT study_name FROM studies").fetchall()
        except sqlite3.Error:
            return False
        return (name,) in rows
    import optuna

    summaries = optuna.get_all_study_summaries(lab.storage(storage), include_best_trial=False)
    return name in {s.study_name for s in summaries}


def kill9_then_resume(lab: StudyLab, name: str, storage: str | None = None) -> None:
    """SIGKILL the tuner while a trial's server runs; ``resume`` stops the orphan, re-runs the
    trial's configuration and reaches the target with no finished trial twice."""
    space = lab.space(name, faults=["slow_start:20"], baseline=False, configs=CONFIGS)
    tuner = lab.spawn(
        "study", "start", "--space", str(space), "--n-trials", "3", *_storage_args(storage)
    )
    server = lab.wait_server()
    lab.wait_for("the server's process record", lambda: _running(lab, name, storage, PROCESS), 60)
    tuner.kill()
    tuner.wait(timeout=30)
    time.sleep(0.5)
    # the tuner is gone, its server is not: an orphan, as after a crash of the tuner
    assert server.is_running() and server.status() != psutil.STATUS_ZOMBIE
    (stale,) = [t for t in lab.trials(name, storage) if t.state.name == "RUNNING"]
    assert stale.params == CONFIGS[0]

    run = lab.cli("study", "resume", "--study-name", name, *_storage_args(storage))
    assert run.rc == 0, run.show()
    no_traceback(run)
    assert "3 of 3 trials finished" in run.out
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert (
        f"trial {stale.number} [enqueued] interrupted: its tuner stopped while it ran; it runs "
        "again; its server was still running and has been stopped" in run.err
    ), run.show()

    trials = lab.trials(name, storage)
    (failed,) = [t for t in trials if t.number == stale.number]
    assert failed.state.name == "FAIL"
    assert attrs_of(failed)["outcome"] == "interrupted"
    assert attrs_of(failed)["failure_line"] == "the tuner stopped while this trial was running"
    finished = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(finished) == 3
    rerun = [t for t in finished if t.user_attrs.get("role") == "rerun"]
    assert len(rerun) == 1
    assert rerun[0].params == stale.params
    assert rerun[0].user_attrs["autotune:rerun_of"] == stale.number
    # each configuration finished exactly once
    assert sorted(str(t.params) for t in finished) == sorted(str(c) for c in CONFIGS)
    assert not [t for t in trials if t.state.name == "RUNNING"]


def two_workers(lab: StudyLab, name: str, storage: str | None = None, n_trials: int = 6) -> None:
    """``start`` on one worker, ``resume`` on a second joining it: together they finish exactly
    ``n_trials`` trials, each run once, and neither touches the other's running trial."""
    space = lab.space(name, faults=["slow_start:10"], configs=CONFIGS[:2])
    extra = _storage_args(storage)
    first = lab.spawn(
        "study",
        "start",
        "--space",
        str(space),
        "--n-trials",
        str(n_trials),
        "--seed",
        "1",
        "--sampler",
        "random",
        "--no-informed",
        *extra,
        log="first",
    )
    lab.wait_for("the first worker's trial", lambda: _running(lab, name, storage, TUNER), 60)
    second = lab.spawn(
        "study",
        "resume",
        "--study-name",
        name,
        "--join",
        "--seed",
        "2",
        "--sampler",
        "random",
        *extra,
        log="second",
    )
    runs = [lab.finish(first, timeout=240), lab.finish(second, timeout=240)]
    for run in runs:
        assert run.rc == 0, run.show()
        no_traceback(run)
        assert "locked" not in run.err, run.show()
        assert f"of {n_trials} trials finished" in run.out, run.show()
    lab.check_no_servers("after both workers exited")

    trials = lab.trials(name, storage)
    finished = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(finished) == n_trials, [(t.number, t.state.name) for t in trials]
    assert not [t for t in trials if t.state.name == "RUNNING"]
    # nothing of a live worker was recovered as interrupted; only unrun surplus trials failed
    for t in trials:
        if t.state.name == "FAIL":
            assert attrs_of(t)["outcome"] == "surplus", attrs_of(t)
    workers = {t.system_attrs[TUNER]["pid"] for t in finished}
    assert workers == {first.pid, second.pid}, "both workers should have run trials"
    roles = Counter(t.user_attrs["role"] for t in finished)
    assert roles["baseline"] == 1 and roles["enqueued"] == 2, roles
    numbers = [t.number for t in finished]
    assert len(set(numbers)) == len(numbers)
