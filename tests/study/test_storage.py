"""SQLite under load: optuna-dashboard reading the study file while the tuner writes it, and two
workers sharing one study file."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from autotune.engines import Timeouts
from autotune.study import study_paths
from autotune.study._claims import count_claims, recover_stale

from ._lab import CONFIGS, StudyLab, free_port, no_traceback
from ._scenarios import two_workers


def test_dashboard_reads_while_the_tuner_writes(lab: StudyLab) -> None:
    space = lab.space("watched", configs=CONFIGS)
    tuner = lab.spawn(
        "study", "start", "--space", str(space), "--n-trials", "8", "--sampler", "random",
        "--seed", "1", log="tuner",
    )  # fmt: skip
    lab.wait_for("the study file", (lab.studies / "watched.db").exists)
    port = free_port()
    dashboard = lab.spawn("dashboard", "--study-name", "watched", "--port", str(port), log="dash")
    answered_while_running = 0
    errors: list[str] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        while tuner.poll() is None:
            try:
                listing = client.get("/api/studies")
            except httpx.TransportError:
                time.sleep(0.1)  # the dashboard is still starting
                continue
            if listing.status_code != 200:
                errors.append(f"/api/studies {listing.status_code}: {listing.text[:200]}")
                continue
            for study in listing.json()["study_summaries"]:
                detail = client.get(f"/api/studies/{study['study_id']}", params={"after": 0})
                if detail.status_code == 200:
                    answered_while_running += tuner.poll() is None
                else:
                    errors.append(f"detail {detail.status_code}: {detail.text[:200]}")
        run = lab.finish(tuner)
        final = client.get("/api/studies").json()["study_summaries"][0]

        def finished_in_dashboard() -> list[str] | None:
            # (the dashboard refreshes running trials from its cache after a few seconds)
            url = f"/api/studies/{final['study_id']}"
            states = [t["state"] for t in client.get(url, params={"after": 0}).json()["trials"]]
            return states if states.count("Complete") + states.count("Pruned") == 8 else None

        states = lab.wait_for("the dashboard to show 8 finished trials", finished_in_dashboard, 60)
    # (SIGTERM: a Ctrl-C that lands while wsgiref answers a request is swallowed by it)
    dashboard.send_signal(signal.SIGTERM)
    served = lab.finish(dashboard, timeout=30)

    assert run.rc == 0, run.show()
    no_traceback(run)
    assert "locked" not in run.err
    assert "8 of 8 trials finished" in run.out
    assert not errors, errors
    assert answered_while_running >= 3, "the dashboard was not read during the study"
    assert len(states) == 8, states
    assert "locked" not in served.err
    assert len(lab.finished("watched")) == 8


def test_two_workers_share_one_sqlite_study(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("a second worker joining (SQLite)")
    two_workers(lab, "shared")


def test_claims_and_recovery_spare_live_tuners(lab: StudyLab) -> None:
    """A trial left RUNNING by a dead tuner is recovered and not counted as claimed; trials of
    live tuners (also one that has not written its record yet) are counted and left alone."""
    import optuna

    from autotune.study._claims import tuner_identity
    from autotune.study._storage import open_storage

    paths = study_paths("claims", studies_dir=lab.studies)
    storage = open_storage(paths)
    study = optuna.create_study(study_name="claims", storage=storage)
    mine = study.ask()
    storage.set_trial_system_attr(mine._trial_id, "autotune:tuner", tuner_identity())
    dead = study.ask()
    gone = dict(tuner_identity(), create_time=1.0)  # this pid, but another start: a dead tuner
    storage.set_trial_system_attr(dead._trial_id, "autotune:tuner", gone)
    fresh = study.ask()  # no record yet: a tuner between asking and recording
    assert fresh.number == 2
    study.tell(study.ask(), 1.0)
    claims = count_claims(study)
    assert (claims.finished, claims.running) == (1, 2)
    assert count_claims(study, exclude=mine.number).running == 1

    recovered = recover_stale(study)
    assert [r.number for r in recovered] == [dead.number]
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states[mine.number] == states[fresh.number] == "RUNNING"
    assert states[dead.number] == "FAIL"
    (queued,) = [t for t in study.get_trials() if t.state.name == "WAITING"]
    assert queued.user_attrs == {"role": "rerun", "autotune:rerun_of": dead.number}


def test_a_worker_on_another_machine_is_never_recovered_and_claims_for_one_trial(
    lab: StudyLab,
) -> None:
    """A tuner on another host cannot be checked: its trial is never failed by a resume here,
    and counts as claimed for as long as one trial can last (the engine's timeouts)."""
    import optuna

    from autotune.study._claims import longest_trial_s, tuner_identity
    from autotune.study._storage import open_storage

    storage = open_storage(study_paths("remote", studies_dir=lab.studies))
    study = optuna.create_study(study_name="remote", storage=storage)
    remote = study.ask()
    elsewhere = dict(tuner_identity(), host="another-machine.example")
    storage.set_trial_system_attr(remote._trial_id, "autotune:tuner", elsewhere)
    long = Timeouts()
    short = Timeouts(startup_s=0.1, benchmark_s=0.1, stop_s=0.1, gpu_release_s=0.1)
    assert longest_trial_s(long) == 1800 + 1800 + 2 * 30 + 120
    time.sleep(0.6)  # older than a trial of `short` can last
    assert count_claims(study, long).running == 1
    assert count_claims(study, short).running == 0
    assert recover_stale(study) == []
    assert storage.get_trial(remote._trial_id).state.name == "RUNNING"


def test_a_trial_asked_when_others_hold_the_target_is_given_back(lab: StudyLab) -> None:
    """Two workers asking at the same moment for the last trial: the one that finds the target
    covered once its trial exists gives it back unrun, and a queued configuration it took goes
    back to the queue."""
    import optuna

    from autotune.study._claims import claim, tuner_identity
    from autotune.study._storage import open_storage

    storage = open_storage(study_paths("last", studies_dir=lab.studies))
    study = optuna.create_study(study_name="last", storage=storage)
    study.tell(study.ask(), 1.0)
    other = study.ask()  # the other worker's trial: a live tuner (this process)
    storage.set_trial_system_attr(other._trial_id, "autotune:tuner", tuner_identity())
    config = dict(CONFIGS[0])
    study.enqueue_trial(config, user_attrs={"role": "enqueued"})
    mine = study.ask()  # takes the queued configuration
    assert not claim(study, mine._trial_id, 2, Timeouts())

    given_back = storage.get_trial(mine._trial_id)
    assert given_back.state.name == "FAIL"
    assert given_back.user_attrs["outcome"] == "surplus"
    assert given_back.params == {}  # never run
    (queued,) = [t for t in study.get_trials() if t.state.name == "WAITING"]
    assert queued.system_attrs["fixed_params"] == config
    assert queued.user_attrs == {"role": "enqueued"}
    # with room left under the target, a trial is kept
    assert claim(study, study.ask()._trial_id, 4, Timeouts())


# --- RetryLockedStorage: the one retry of a locked database ---------------------------------


def _locked(message: str = "database is locked") -> Exception:
    """SQLAlchemy's error for a locked SQLite database, as RDBStorage meets it."""
    import sqlite3

    import sqlalchemy.exc

    return sqlalchemy.exc.OperationalError(
        "UPDATE trials ...", {}, sqlite3.OperationalError(message)
    )


def _wrapped(cause: Exception) -> Exception:
    """``cause`` as Optuna's RDBStorage raises it: the cause of a StorageInternalError."""
    import optuna.exceptions

    try:
        raise optuna.exceptions.StorageInternalError(
            "An exception is raised during the commit."
        ) from cause
    except optuna.exceptions.StorageInternalError as e:
        return e


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The retry's pauses, recorded instead of slept, on a virtual clock they advance."""
    from autotune.study import _storage

    clock = _VirtualClock()
    monkeypatch.setattr(_storage, "time", clock)
    return clock.slept


class _VirtualClock:
    """Stands in for :mod:`time` in the storage module: ``sleep`` advances ``monotonic``."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


def test_every_storage_method_goes_through_the_retry() -> None:
    """Every method of Optuna's BaseStorage is the wrapper's own (none falls back to the base
    class, none is left abstract): a method a new Optuna adds fails here until it is wrapped."""
    import inspect

    import optuna

    from autotune.study._storage import RetryLockedStorage

    public = {
        name
        for name, member in inspect.getmembers(optuna.storages.BaseStorage, inspect.isfunction)
        if not name.startswith("_")
    }
    assert public - set(vars(RetryLockedStorage)) == set()
    assert not RetryLockedStorage.__abstractmethods__


@pytest.mark.parametrize("optuna_wrapped", [False, True], ids=["sqlalchemy", "optuna"])
def test_a_locked_database_is_retried_until_it_answers(
    pauses: list[float], optuna_wrapped: bool
) -> None:
    from autotune.study._storage import RetryLockedStorage

    calls: list[int] = []

    class Flaky(_Backend):
        def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
            calls.append(trial_id)
            if len(calls) <= 3:
                error = _locked()
                raise _wrapped(error) if optuna_wrapped else error

    RetryLockedStorage(Flaky()).set_trial_user_attr(7, "outcome", "ok")
    assert calls == [7, 7, 7, 7]
    assert pauses == pytest.approx([0.05, 0.08, 0.128])


def test_a_lock_that_sqlite_already_waited_out_is_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lock reported after SQLite's busy timeout (60 s of waiting inside the call) fails at
    once: the retry's 30 s are spent, so the caller hears of it in a minute, not in twenty."""
    from autotune import StorageError
    from autotune.study import _storage
    from autotune.study._storage import RetryLockedStorage

    clock = _VirtualClock()
    monkeypatch.setattr(_storage, "time", clock)
    calls: list[int] = []

    class Busy(_Backend):
        def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
            calls.append(trial_id)
            clock.now += 60.0  # SQLite's busy timeout, waited inside the call
            raise _locked()

    with pytest.raises(StorageError, match="refused a write"):
        RetryLockedStorage(Busy()).set_trial_user_attr(7, "outcome", "ok")
    assert calls == [7] and clock.slept == []


@pytest.mark.parametrize("optuna_wrapped", [False, True], ids=["sqlalchemy", "optuna"])
def test_a_database_that_stays_locked_is_a_storage_error(
    pauses: list[float], optuna_wrapped: bool
) -> None:
    from autotune import StorageError
    from autotune.study._storage import RetryLockedStorage

    class Locked(_Backend):
        def get_all_studies(self) -> list[Any]:
            error = _locked()
            raise _wrapped(error) if optuna_wrapped else error

    with pytest.raises(StorageError) as caught:
        RetryLockedStorage(Locked()).get_all_studies()
    assert len(pauses) == 19  # 20 attempts
    assert max(pauses) == 1.0
    assert caught.value.message == (
        "the study storage refused a read: (sqlite3.OperationalError) database is locked"
    )
    assert caught.value.hint == "another program holds the database; retry when it is done"
    assert caught.value.__cause__ is not None


def test_other_storage_failures_pass_through_unchanged(pauses: list[float]) -> None:
    """A damaged file, a full disk, a missing trial: not retried, and left for storage_faults
    (a bare SQLAlchemy OperationalError is a StorageError, as the call-site retry made it)."""
    from autotune import StorageError
    from autotune.study._storage import RetryLockedStorage, storage_fault

    damaged = _wrapped(_locked("database disk image is malformed"))
    bare = _locked("database or disk is full")

    class Failing(_Backend):
        def get_trial(self, trial_id: int) -> Any:
            raise {1: damaged, 2: bare}.get(trial_id) or KeyError(trial_id)

    storage = RetryLockedStorage(Failing())
    with pytest.raises(type(damaged)) as caught:
        storage.get_trial(1)
    assert caught.value is damaged
    fault = storage_fault(caught.value)
    assert fault is not None and "is corrupted" in fault.message
    with pytest.raises(StorageError, match=r"refused a read: .*database or disk is full"):
        storage.get_trial(2)
    with pytest.raises(KeyError):
        storage.get_trial(3)
    assert pauses == []


def test_a_study_on_a_locked_sqlite_file_waits_for_it(tmp_path: Path) -> None:
    """A real lock (another connection's exclusive transaction) on the file of a study opened by
    open_storage: Study-level calls (ask, tell, set_user_attr, enqueue_trial) get through once
    it is released, with no retry of their own."""
    import sqlite3
    import threading

    import optuna

    from autotune.study._optuna import cached_storage, storage_of
    from autotune.study._storage import RetryLockedStorage, open_storage

    paths = study_paths("locked", studies_dir=tmp_path)
    storage = open_storage(paths)
    assert isinstance(storage, RetryLockedStorage)
    # the busy timeout short (open_storage waits 60 s), so that the lock is met, not waited out
    rdb = optuna.storages.RDBStorage(
        paths.storage_url, engine_kwargs={"connect_args": {"timeout": 0.05}}
    )
    assert type(storage.backend) is type(cached_storage(rdb))  # Optuna's trial cache
    fast = RetryLockedStorage(cached_storage(rdb))
    study = optuna.create_study(study_name="locked", storage=fast)
    assert storage_of(study) is fast
    assert paths.sqlite_file is not None
    holder = sqlite3.connect(paths.sqlite_file, check_same_thread=False)
    releases: list[threading.Timer] = []

    def lock_for(seconds: float) -> None:
        holder.execute("BEGIN EXCLUSIVE")
        releases.append(threading.Timer(seconds, holder.rollback))
        releases[-1].start()

    try:
        lock_for(0.5)
        started = time.monotonic()
        study.set_user_attr("target", 2)
        assert time.monotonic() - started >= 0.4, "the lock was not met"
        releases[-1].join()
        lock_for(0.5)
        study.enqueue_trial({"x": 0.5})
        trial = study.ask()
        assert trial.suggest_float("x", 0.0, 1.0) == 0.5
        study.tell(trial, 1.0)
    finally:
        for release in releases:
            release.cancel()
            release.join()
        holder.close()
    (finished,) = optuna.load_study(study_name="locked", storage=storage).trials
    assert (finished.value, finished.params) == (1.0, {"x": 0.5})
    assert optuna.load_study(study_name="locked", storage=storage).user_attrs == {"target": 2}


def test_reading_storages_are_wrapped_too(tmp_path: Path) -> None:
    """open_for_reading's storage (also a read-only file's) retries as open_storage's does."""
    import optuna

    from autotune.study._storage import (
        RetryLockedStorage,
        _open_sqlite_read_only,
        open_for_reading,
        open_storage,
    )

    paths = study_paths("read", studies_dir=tmp_path)
    optuna.create_study(study_name="read", storage=open_storage(paths))
    assert isinstance(open_for_reading(paths), RetryLockedStorage)
    assert paths.sqlite_file is not None
    read_only = _open_sqlite_read_only(paths, paths.sqlite_file)  # (as root: chmod is no bar)
    assert isinstance(read_only, RetryLockedStorage)
    assert [s.study_name for s in read_only.get_all_studies()] == ["read"]


class _Backend:
    """A stand-in backend: RetryLockedStorage calls only what a test defines."""


@pytest.mark.postgres
def test_a_postgres_storage_is_wrapped_as_sqlite_s() -> None:
    """On PostgreSQL (AUTOTUNE_TEST_POSTGRES_URL, see test_postgres.py) open_storage gives the
    same wrapper, over Optuna's cache, and a study on it works through it."""
    import os
    import uuid

    import optuna

    from autotune.study._optuna import set_trial_system_attr, storage_of, trial_id_of
    from autotune.study._storage import RetryLockedStorage, open_storage

    url = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("no PostgreSQL server: set AUTOTUNE_TEST_POSTGRES_URL (.ci/postgres.sh)")
    name = f"pg-wrapped-{uuid.uuid4().hex[:8]}"
    storage = open_storage(study_paths(name, storage=url))
    assert isinstance(storage, RetryLockedStorage)
    assert isinstance(storage.backend, optuna.storages._CachedStorage)
    study = optuna.create_study(study_name=name, storage=storage)
    assert storage_of(study) is storage
    trial = study.ask()
    set_trial_system_attr(study, trial_id_of(trial), "autotune:tuner", {"pid": 1})
    study.tell(trial, 1.0)
    again = open_storage(study_paths(name, storage=url), writing=False)  # (a new cache)
    (stored,) = optuna.load_study(study_name=name, storage=again).trials
    assert (stored.value, stored.system_attrs["autotune:tuner"]) == (1.0, {"pid": 1})
