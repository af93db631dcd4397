"""Where studies live: the storage URL, the folders beside it, and safe writes.

By default a study named ``NAME`` is the SQLite file ``studies/NAME.db`` with its artifacts
(server logs, raw benchmark results) in ``studies/NAME-artifacts/`` and the tuner's own debug logs
in ``studies/NAME-logs/``. Any SQLAlchemy URL works (PostgreSQL for several workers); the
artifact folder is then given explicitly or defaults to ``studies/NAME-artifacts``.

SQLite is opened in WAL mode with a busy timeout, so optuna-dashboard can read while the tuner
writes; a storage call that still meets "database is locked" is retried a bounded number of
times, by the one storage wrapper :class:`RetryLockedStorage` that :func:`open_storage` and
:func:`open_for_reading` return.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sqlite3
import time
import uuid
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from optuna.storages import BaseStorage

from autotune._errors import ConfigError, StorageError
from autotune.study._optuna import cached_storage

if TYPE_CHECKING:
    import optuna
    import sqlalchemy.exc
    from optuna.distributions import BaseDistribution
    from optuna.study import StudyDirection
    from optuna.trial import FrozenTrial, TrialState

    from autotune.study._optuna import FrozenStudy

log = logging.getLogger("autotune.study")

T = TypeVar("T")

#: Minimum free disk space before a trial is launched (server logs and results go there).
MIN_FREE_BYTES = 200 * 1024 * 1024
#: A study name: it names files (NAME.db, NAME-artifacts/, NAME-logs/) inside the studies folder.
STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_STUDY_NAME_CHARS = 100


def check_study_name(name: str, *, source: str = "--study-name") -> str:
    """``name`` if it is safe as a file name, else a ConfigError saying what is allowed."""
    if not STUDY_NAME.match(name) or len(name) > MAX_STUDY_NAME_CHARS:
        shown = repr(name if len(name) <= 60 else name[:60] + "...")
        raise ConfigError(
            f"{shown} is not a usable study name",
            source=source,
            hint="use letters, digits, '.', '_' and '-', starting with a letter or digit, at "
            f"most {MAX_STUDY_NAME_CHARS} characters (it names files in the studies folder)",
        )
    return name


def check_storage_url(url: str, *, source: str = "--storage") -> str:
    """``url`` unless it names an in-memory database, whose studies vanish when the command ends.

    Raises:
        ConfigError: ``sqlite://``, ``sqlite:///:memory:``, ``:memory:`` and the like.
    """
    text = url.strip()
    lowered = text.lower()
    memory = (
        lowered in (":memory:", "sqlite:", "sqlite:/", "sqlite://", "sqlite:///")
        or (lowered.startswith("sqlite") and ":memory:" in lowered)
        or (lowered.startswith("sqlite") and "mode=memory" in lowered)
    )
    if memory:
        raise ConfigError(
            f"{url!r} is an in-memory database: the study and its results would vanish when "
            "the command ends",
            source=source,
            hint="leave --storage out (sqlite:///studies/NAME.db) or give a file, e.g. "
            "sqlite:///studies/x.db",
        )
    if "\x00" in text:
        raise ConfigError("the storage URL contains a NUL character", source=source)
    return url


@dataclass(frozen=True)
class StudyPaths:
    """The storage URL and the folders of one study."""

    name: str
    storage_url: str
    artifacts_dir: Path
    logs_dir: Path

    @property
    def is_sqlite(self) -> bool:
        return self.storage_url.startswith("sqlite:")

    @property
    def sqlite_file(self) -> Path | None:
        if not self.is_sqlite:
            return None
        raw = self.storage_url.split("sqlite:///", 1)[-1]
        return Path(raw) if raw and raw != ":memory:" else None


def study_paths(
    name: str,
    *,
    storage: str | None = None,
    studies_dir: str | Path = "studies",
    artifacts_dir: str | Path | None = None,
) -> StudyPaths:
    """The storage URL and folders of study ``name`` (see the module docstring).

    Raises:
        ConfigError: ``name`` is not safe as a file name, or ``storage`` is in memory.
    """
    check_study_name(name)
    if storage is not None:
        check_storage_url(storage)
    base = Path(studies_dir).expanduser().resolve()
    url = storage or f"sqlite:///{base / (name + '.db')}"
    artifacts = Path(artifacts_dir).expanduser() if artifacts_dir else base / f"{name}-artifacts"
    return StudyPaths(name, url, artifacts.resolve(), (base / f"{name}-logs").resolve())


def check_writable(folder: Path, *, what: str) -> None:
    """Create ``folder`` if needed and make sure files can be written and space is left.

    Raises:
        StorageError: naming the folder and what to do, before anything is launched.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # a probe of this process's own: two tuners starting at once must not remove each other's
        probe = folder / f".autotune-write-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        probe.write_text("ok")
        probe.unlink(missing_ok=True)
    except OSError as e:
        raise StorageError(
            f"cannot write the {what} folder {str(folder)!r}: {e.strerror or e}",
            hint="choose a writable folder (--studies-dir) or fix its permissions",
        ) from e
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE_BYTES:
        raise StorageError(
            f"only {free // (1024 * 1024)} MiB free on the disk of {str(folder)!r}; "
            f"a study needs at least {MIN_FREE_BYTES // (1024 * 1024)} MiB for logs and results",
            hint="free some space or choose another --studies-dir",
        )


def open_storage(paths: StudyPaths, *, writing: bool = True) -> RetryLockedStorage:
    """Open the study storage (creating a SQLite file if needed, when ``writing``).

    With ``writing=False`` (reports, listings) nothing is created or switched: a SQLite file
    that does not exist is an error, and a full disk does not stop a report. The storage is
    Optuna's ``RDBStorage`` behind its trial cache (as ``optuna.load_study`` would wrap it),
    behind :class:`RetryLockedStorage`.

    Raises:
        StorageError: the URL cannot be opened (bad scheme, server down, unwritable file).
    """
    import optuna
    import sqlalchemy.exc

    engine_kwargs: dict[str, object] = {}
    if paths.is_sqlite:
        db = paths.sqlite_file
        if db is not None and writing:
            check_writable(db.parent, what="study")
            _enable_wal(db)
        elif db is not None and not db.exists():
            raise StorageError(
                f"no study database {str(db)!r}",
                url=paths.storage_url,
                hint="list studies with `autotune study list`, or pass --storage/--studies-dir",
            )
        engine_kwargs = {"connect_args": {"timeout": 60}}
    else:
        engine_kwargs = {"pool_pre_ping": True}
    # The first opening creates the tables; two tuners doing it at the same moment collide
    # ("table alembic_version already exists"). On SQLite, writers take a lock file beside the
    # database while they open it (the kernel releases it if one is killed); on any storage, an
    # opening that lost that race is retried: the tables are there by then.
    import contextlib

    lock_file = (
        paths.sqlite_file.with_name(paths.sqlite_file.name + ".lock")
        if (writing and paths.sqlite_file is not None)
        else None
    )
    try:
        url = _with_installed_driver(paths.storage_url)
        for attempt in range(5):
            with contextlib.ExitStack() as held:
                if lock_file is not None:
                    with contextlib.suppress(ImportError, OSError):
                        import fcntl

                        lock = held.enter_context(lock_file.open("a"))
                        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
                try:
                    rdb = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
                    return RetryLockedStorage(cached_storage(rdb), url=paths.storage_url)
                except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError,
                        sqlalchemy.exc.ProgrammingError) as e:  # fmt: skip
                    text = str(e).lower()
                    racing = "already exists" in text or "unique" in text or "duplicate" in text
                    if not racing or attempt == 4:
                        raise
                    log.debug("storage tables created by another tuner meanwhile; retrying")
            time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")
    except (sqlalchemy.exc.SQLAlchemyError, ValueError, ImportError, OSError) as e:
        hint = (
            "check the URL (e.g. sqlite:///studies/x.db or postgresql://user@host/db) and "
            "that the database server is reachable"
        )
        if isinstance(e, ImportError):
            hint = "install the database's driver (PostgreSQL: pip install 'autotune[postgres]')"
        raise StorageError(
            f"cannot open the study storage {_redact_url(paths.storage_url)!r}: "
            f"{_first_line(str(e))}",
            url=paths.storage_url,
            hint=hint,
        ) from e


def retry_locked(
    action: Callable[[], T],
    *,
    attempts: int = 20,
    what: str = "write",
    within_s: float = 30.0,
    url: str | None = None,
) -> T:
    """Run a storage action, retrying while SQLite is locked, for at most ``within_s`` seconds.

    SQLite itself waits out a lock for its busy timeout (60 s, :func:`open_storage`) before it
    reports one; a lock reported after that long is not retried, so a database held by another
    program fails in about a minute, as a :class:`StorageError`, not after ``attempts`` minutes.
    A lock reported at once (a busy timeout of 0, another driver) is retried with growing pauses.

    Used by :class:`RetryLockedStorage` on each storage call; code that goes through a storage
    opened by :func:`open_storage` (or a study on it) needs no retry of its own.

    Raises:
        StorageError: the connection to the database server was lost (said so, naming ``url``;
            not retried: a write may or may not have been committed), the database stayed
            locked for ``attempts`` tries, or SQLAlchemy raised another ``OperationalError``
            (as is: Optuna's ``StorageInternalError`` that does not stand for a lock passes
            through unchanged, for :func:`storage_fault` to read).
    """
    import optuna.exceptions
    import sqlalchemy.exc

    delay = 0.05
    started = time.monotonic()
    for attempt in range(attempts):
        try:
            return action()
        except (sqlalchemy.exc.DBAPIError, optuna.exceptions.StorageInternalError) as e:
            lost = _lost_connection(e)
            if lost is not None:
                where = f" {_redact_url(url)!r}" if url else ""
                raise StorageError(
                    f"lost the connection to the study storage{where} during a {what}: "
                    f"{_first_line(str(getattr(lost, 'orig', None) or lost))}",
                    url=url,
                    hint="the database server went away or dropped the connection; when it is "
                    "back, `autotune study resume` goes on (finished trials are kept, the "
                    "trial that was running runs again)",
                ) from e
            if not isinstance(
                e, (sqlalchemy.exc.OperationalError, optuna.exceptions.StorageInternalError)
            ):
                raise
            locked = _lock_error(e)
            if locked is None and not isinstance(e, sqlalchemy.exc.OperationalError):
                raise
            late = time.monotonic() - started + delay > within_s
            if locked is None or attempt == attempts - 1 or late:
                raise StorageError(
                    f"the study storage refused a {what}: {_first_line(str(locked or e))}",
                    hint="another program holds the database; retry when it is done",
                ) from e
            log.debug("database locked during %s, retrying (%d)", what, attempt + 1)
            time.sleep(delay)
            delay = min(1.0, delay * 1.6)
    raise AssertionError("unreachable")


#: What drivers say when the connection to a database server is gone (PostgreSQL, MySQL).
_LOST = (
    "server closed the connection unexpectedly",
    "terminating connection",
    "connection already closed",
    "could not connect to server",
    "connection refused",
    "connection timed out",
    "ssl syscall error",
    "no connection to the server",
    "does not allow connections",
    "not currently accepting connections",
    "the database system is shutting down",
    "the database system is starting up",
    "lost connection to mysql server",
    "mysql server has gone away",
)


def _lost_connection(error: BaseException) -> BaseException | None:
    """The error behind ``error`` that says the connection to the database server was lost
    (SQLAlchemy's ``connection_invalidated``, or the driver's words), else None. SQLite has no
    connection to lose: its errors are never read as one."""
    import sqlalchemy.exc

    seen: BaseException | None = error
    chain: list[BaseException] = []
    while seen is not None and seen not in chain and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for e in chain:
        if isinstance(e, sqlalchemy.exc.DBAPIError):
            if "sqlite" in type(e.orig).__module__:
                return None
            text = str(e.orig).lower()
            if e.connection_invalidated or any(s in text for s in _LOST):
                return e
        elif isinstance(e, sqlalchemy.exc.DisconnectionError):
            return e
    return None


def _lock_error(error: BaseException) -> sqlalchemy.exc.OperationalError | None:
    """The "database is locked" error behind ``error``: SQLAlchemy's, raised as is or as the
    cause of the ``StorageInternalError`` that Optuna's RDBStorage turns it into."""
    import sqlalchemy.exc

    for e in (error, error.__cause__):
        if isinstance(e, sqlalchemy.exc.OperationalError) and "locked" in str(e):
            return e
    return None


class RetryLockedStorage(BaseStorage):
    """An Optuna storage whose every call is retried while the database is locked.

    Wraps ``backend`` (the ``RDBStorage``, SQLite or PostgreSQL, behind Optuna's trial cache;
    any ``BaseStorage`` works) and is applied once, where the storage is opened
    (:func:`open_storage`, :func:`open_for_reading`); a study created or loaded on it, and so
    every ``ask``, ``tell``, ``enqueue_trial``, ``set_user_attr`` and sampler note, goes through
    it.

    Guarantees: a call that fails because the database is locked (SQLAlchemy's
    ``OperationalError`` saying "locked", raised as is or wrapped in Optuna's
    ``StorageInternalError``) is tried again, up to 20 times with pauses from 50 ms to 1 s
    (SQLite's own busy timeout waits before each failure); one that still fails raises
    :class:`~autotune.StorageError` saying another program holds the database (as does any other
    bare ``OperationalError``). Other failures pass through unchanged (:func:`storage_faults`
    turns them into messages).

    Assumes: a call that failed changed nothing, so trying it again is safe (RDBStorage rolls its
    session back on every error, and its cache is updated only after the backend succeeded).
    Heartbeats are not forwarded: autotune opens storages without them.
    """

    def __init__(self, backend: BaseStorage, *, url: str | None = None) -> None:
        self._backend = backend
        self._url = url

    @property
    def backend(self) -> BaseStorage:
        """The wrapped storage (calls on it are not retried)."""
        return self._backend

    def _read(self, action: Callable[[], T]) -> T:
        return retry_locked(action, what="read", url=self._url)

    def _write(self, action: Callable[[], T]) -> T:
        return retry_locked(action, what="write", url=self._url)

    # --- studies ----------------------------------------------------------------------------
    def create_new_study(
        self, directions: Sequence[StudyDirection], study_name: str | None = None
    ) -> int:
        return self._write(lambda: self._backend.create_new_study(directions, study_name))

    def delete_study(self, study_id: int) -> None:
        self._write(lambda: self._backend.delete_study(study_id))

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self._write(lambda: self._backend.set_study_user_attr(study_id, key, value))

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        self._write(lambda: self._backend.set_study_system_attr(study_id, key, value))

    def get_study_id_from_name(self, study_name: str) -> int:
        return self._read(lambda: self._backend.get_study_id_from_name(study_name))

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._read(lambda: self._backend.get_study_name_from_id(study_id))

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return self._read(lambda: self._backend.get_study_directions(study_id))

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._read(lambda: self._backend.get_study_user_attrs(study_id))

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._read(lambda: self._backend.get_study_system_attrs(study_id))

    def get_all_studies(self) -> list[FrozenStudy]:
        return self._read(self._backend.get_all_studies)

    # --- trials -----------------------------------------------------------------------------
    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        return self._write(lambda: self._backend.create_new_trial(study_id, template_trial))

    def set_trial_param(
        self,
        trial_id: int,
        param_name: str,
        param_value_internal: float,
        distribution: BaseDistribution,
    ) -> None:
        self._write(
            lambda: self._backend.set_trial_param(
                trial_id, param_name, param_value_internal, distribution
            )
        )

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self._read(
            lambda: self._backend.get_trial_id_from_study_id_trial_number(study_id, trial_number)
        )

    def get_trial_number_from_id(self, trial_id: int) -> int:
        return self._read(lambda: self._backend.get_trial_number_from_id(trial_id))

    def get_trial_param(self, trial_id: int, param_name: str) -> float:
        return self._read(lambda: self._backend.get_trial_param(trial_id, param_name))

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        return self._write(lambda: self._backend.set_trial_state_values(trial_id, state, values))

    def set_trial_intermediate_value(
        self, trial_id: int, step: int, intermediate_value: float
    ) -> None:
        self._write(
            lambda: self._backend.set_trial_intermediate_value(trial_id, step, intermediate_value)
        )

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._write(lambda: self._backend.set_trial_user_attr(trial_id, key, value))

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._write(lambda: self._backend.set_trial_system_attr(trial_id, key, value))

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self._read(lambda: self._backend.get_trial(trial_id))

    def get_all_trials(
        self,
        study_id: int,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
    ) -> list[FrozenTrial]:
        return self._read(lambda: self._backend.get_all_trials(study_id, deepcopy, states))

    def get_n_trials(
        self, study_id: int, state: tuple[TrialState, ...] | TrialState | None = None
    ) -> int:
        return self._read(lambda: self._backend.get_n_trials(study_id, state))

    def get_best_trial(self, study_id: int) -> FrozenTrial:
        return self._read(lambda: self._backend.get_best_trial(study_id))

    def get_trial_params(self, trial_id: int) -> dict[str, Any]:
        return self._read(lambda: self._backend.get_trial_params(trial_id))

    def get_trial_user_attrs(self, trial_id: int) -> dict[str, Any]:
        return self._read(lambda: self._backend.get_trial_user_attrs(trial_id))

    def get_trial_system_attrs(self, trial_id: int) -> dict[str, Any]:
        return self._read(lambda: self._backend.get_trial_system_attrs(trial_id))

    def remove_session(self) -> None:
        self._backend.remove_session()

    def check_trial_is_updatable(self, trial_id: int, trial_state: TrialState) -> None:
        self._backend.check_trial_is_updatable(trial_id, trial_state)


def artifact_store(paths: StudyPaths) -> optuna.artifacts.FileSystemArtifactStore:
    import optuna.artifacts

    check_writable(paths.artifacts_dir, what="artifacts")
    return optuna.artifacts.FileSystemArtifactStore(str(paths.artifacts_dir))


def upload_artifacts(
    store: optuna.artifacts.FileSystemArtifactStore, trial: optuna.Trial, files: list[Path]
) -> None:
    """Store a trial's files (server log, raw results) as its artifacts; a failure is logged."""
    from optuna.artifacts import upload_artifact

    for path in files:
        try:
            upload_artifact(
                artifact_store=store,
                file_path=str(path),
                study_or_trial=trial,
                mimetype="application/json" if path.suffix == ".json" else "text/plain",
            )
        except OSError as e:
            if disk_full(e):  # the others will not fit either; the study stops on its next write
                log.warning("disk full: the trial's artifacts were not stored (%s)", path)
                return
            log.warning("could not store artifact %s: %s", path, e)


def _enable_wal(db: Path) -> None:
    try:
        with sqlite3.connect(str(db), timeout=60) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as e:
        raise StorageError(
            f"cannot open the SQLite study file {str(db)!r}: {e}",
            hint="check that the file is a SQLite database and its folder is writable",
        ) from e


def checkpoint(paths: StudyPaths, *, mode: str = "TRUNCATE") -> bool:
    """Copy what SQLite's write-ahead log holds into the study file itself.

    In WAL mode SQLite writes a study into ``NAME.db-wal`` and copies it into ``NAME.db`` only
    now and then (every 1000 pages): a ``NAME.db`` copied during or after a study held next to
    nothing. Called after each trial and when a tuner stops, so that the ``.db`` file alone is
    the study. ``TRUNCATE`` also empties the log; a reader in the middle of a read (the
    dashboard) only makes the copy partial, never blocks the tuner beyond a second. Never
    creates a file. False where nothing was done (not SQLite, no file, the database busy).
    """
    db = paths.sqlite_file
    if db is None or not db.is_file():
        return False
    try:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=rw", uri=True, timeout=1.0)
    except sqlite3.Error as e:
        log.debug("no checkpoint of %s: %s", db, e)
        return False
    try:
        row = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        return bool(row is not None and row[0] == 0)
    except sqlite3.Error as e:
        log.debug("no checkpoint of %s: %s", db, e)
        return False
    finally:
        conn.close()


def _with_installed_driver(url: str) -> str:
    """``url`` naming a PostgreSQL driver that is installed where it names none.

    SQLAlchemy's driver for a bare ``postgresql://`` is psycopg 3 (from SQLAlchemy 2.1) or
    psycopg2 (before); autotune's ``postgres`` extra installs psycopg2, so a bare URL uses
    whichever of the two is importable.
    """
    import importlib.util

    scheme, sep, rest = url.partition("://")
    if not sep or scheme != "postgresql":
        return url
    for module, driver in (("psycopg", "psycopg"), ("psycopg2", "psycopg2")):
        if importlib.util.find_spec(module) is not None:
            return f"postgresql+{driver}://{rest}"
    return url


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _redact_url(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else url
    return url


# --- storage faults as messages, and reading a study that cannot be written -----------------

#: What SQLite says about a damaged file (the first two), a full disk, a file it may not write.
_CORRUPTED = ("malformed", "file is not a database", "disk i/o error")
_FULL = ("database or disk is full", "no space left on device")
_READ_ONLY = ("readonly database", "read-only file system", "unable to open database file")


def storage_fault(error: BaseException, paths: StudyPaths | None = None) -> StorageError | None:
    """The message for a storage failure (SQLAlchemy, Optuna, sqlite3 or OSError), or None.

    Walks the exception's causes: a damaged SQLite file says which file, that it is corrupted,
    and what to do; a full disk and a file that may not be written say so. Other database
    errors get a generic message naming the storage. None: ``error`` is not a storage failure.
    """
    import errno

    chain: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and seen not in chain and len(chain) < 20:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    if not any(_is_storage_error(e) for e in chain):
        return None
    text = " ".join(str(e) for e in chain).lower()
    where = _where(paths)
    full = any(isinstance(e, OSError) and e.errno == errno.ENOSPC for e in chain)
    if full or any(s in text for s in _FULL):
        return StorageError(
            f"the disk of the study storage {where} is full",
            url=paths.storage_url if paths else None,
            hint="free some space (or move the study with --studies-dir), then continue with "
            "`autotune study resume`",
        )
    if any(s in text for s in _CORRUPTED):
        db = paths.sqlite_file if paths else None
        recover = (
            f"`sqlite3 {db} .recover | sqlite3 {db.with_name(db.stem + '-recovered.db')}`"
            if db is not None
            else "the database's own repair tools"
        )
        return StorageError(
            f"the study database {where} is corrupted ({_first_line(str(chain[-1]))})",
            url=paths.storage_url if paths else None,
            hint=f"restore a copy of the file, or salvage what is readable with {recover} and "
            "use the recovered file (--storage sqlite:///...)",
        )
    if any(s in text for s in _READ_ONLY):
        return StorageError(
            f"the study storage {where} cannot be written ({_first_line(str(chain[-1]))})",
            url=paths.storage_url if paths else None,
            hint="reports work on a read-only study; to run trials, make the file and its "
            "folder writable",
        )
    return StorageError(
        f"the study storage {where} failed: {_first_line(str(chain[-1]))}",
        url=paths.storage_url if paths else None,
        hint="check that the database is reachable and intact",
    )


class storage_faults:  # a context manager: `with storage_faults(paths):`
    """``with storage_faults(paths):`` turns a storage failure inside into its StorageError."""

    def __init__(self, paths: StudyPaths | None) -> None:
        self.paths = paths

    def __enter__(self) -> storage_faults:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None or isinstance(exc, StorageError) or not isinstance(exc, Exception):
            return
        fault = storage_fault(exc, self.paths)
        if fault is not None:
            raise fault from exc


def open_for_reading(paths: StudyPaths) -> RetryLockedStorage:
    """Open a study storage for reports and listings, also where it cannot be written.

    A SQLite file that may not be written (mode 0444, a read-only folder or filesystem) is
    opened read-only (``mode=ro``; ``immutable`` where not even SQLite's shared-memory file can
    be created), so ``study report`` and ``status`` work on it. Other storages: as
    :func:`open_storage` with ``writing=False``. The file is probed once, so a damaged one is
    reported here, as a message. The storage is wrapped as :func:`open_storage`'s is.

    Raises:
        StorageError: no such file, a corrupted file, or a storage that cannot be opened.
    """
    import os

    db = paths.sqlite_file
    if db is None:
        rdb = open_storage(paths, writing=False)
    elif not db.exists():
        raise StorageError(
            f"no study database {str(db)!r}",
            url=paths.storage_url,
            hint="list studies with `autotune study list`, or pass --storage/--studies-dir",
        )
    elif os.access(db, os.W_OK) and os.access(db.parent, os.W_OK):
        try:
            rdb = open_storage(paths, writing=False)
        except StorageError as e:
            raise (storage_fault(e, paths) or e) from e
    else:
        rdb = _open_sqlite_read_only(paths, db)
    with storage_faults(paths):
        rdb.get_all_studies()
    return rdb


def _open_sqlite_read_only(paths: StudyPaths, db: Path) -> RetryLockedStorage:
    import os
    import urllib.parse

    import optuna

    quoted = urllib.parse.quote(str(db.resolve()))
    # mode=ro reads a WAL file where SQLite can still create its -shm beside it; immutable
    # (nothing can change the file while it is read) where it cannot
    modes = ["mode=ro"] if os.access(db.parent, os.W_OK) else []
    modes.append("mode=ro&immutable=1")
    last: Exception | None = None
    for mode in modes:
        url = f"sqlite:///file:{quoted}?{mode}&uri=true"
        try:
            rdb = optuna.storages.RDBStorage(
                url, engine_kwargs={"connect_args": {"timeout": 60}}, skip_table_creation=True
            )
            rdb.get_all_studies()
            log.debug("opened %s read-only (%s)", db, mode)
            return RetryLockedStorage(cached_storage(rdb))
        except Exception as e:  # each SQLAlchemy / Optuna failure: try the next mode
            last = e
    assert last is not None
    raise storage_fault(last, paths) or StorageError(
        f"cannot open the study database {str(db)!r} read-only: {_first_line(str(last))}",
        url=paths.storage_url,
    ) from last


def _is_storage_error(e: BaseException) -> bool:
    import optuna.exceptions
    import sqlalchemy.exc

    return isinstance(
        e,
        (
            sqlalchemy.exc.SQLAlchemyError,
            optuna.exceptions.StorageInternalError,
            sqlite3.Error,
            StorageError,
        ),
    )


def _where(paths: StudyPaths | None) -> str:
    if paths is None:
        return "(unknown)"
    db = paths.sqlite_file
    return repr(str(db)) if db is not None else repr(_redact_url(paths.storage_url))


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a full disk: ENOSPC, or SQLite saying so."""
    return _full_disk_error(error) is not None


def full_disk_file(error: BaseException) -> str | None:
    """The file whose write met a full disk, where the error says (an OSError's filename)."""
    found = _full_disk_error(error)
    if isinstance(found, OSError) and found.filename:
        return str(found.filename)
    return None


def _full_disk_error(error: BaseException) -> BaseException | None:
    import errno

    seen: BaseException | None = error
    for _ in range(20):
        if seen is None:
            return None
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return seen
        if any(s in str(seen).lower() for s in _FULL):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def full_folder(folders: list[Path | None]) -> Path | None:
    """The first of ``folders`` whose disk has (almost) no space left, where one has."""
    for folder in folders:
        if folder is None:
            continue
        try:
            if shutil.disk_usage(folder).free < 1024 * 1024:
                return folder
        except OSError:
            continue
    return None
