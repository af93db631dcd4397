"""Where studies live: the storage URL, the folders beside it, and safe writes.

By default a study named ``NAME`` is the SQLite file ``studies/NAME.db`` with its artifacts
(server logs, raw benchmark results) in ``studies/NAME-artifacts/`` and the tuner's own debug logs
in ``studies/NAME-logs/``. Any SQLAlchemy URL works (PostgreSQL for several workers); the
artifact folder is then given explicitly or defaults to ``studies/NAME-artifacts``.

SQLite is opened in WAL mode with a busy timeout, so optuna-dashboard can read while the tuner
writes; a write that still meets "database is locked" is retried a bounded number of times.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from autotune._errors import StorageError

if TYPE_CHECKING:
    import optuna

log = logging.getLogger("autotune.study")

T = TypeVar("T")

#: Minimum free disk space before a trial is launched (server logs and results go there).
MIN_FREE_BYTES = 200 * 1024 * 1024


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
    """The storage URL and folders of study ``name`` (see the module docstring)."""
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
        probe = folder / ".autotune-write-test"
        probe.write_text("ok")
        probe.unlink()
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


def open_storage(paths: StudyPaths, *, writing: bool = True) -> optuna.storages.RDBStorage:
    """Open the study storage (creating a SQLite file if needed, when ``writing``).

    With ``writing=False`` (reports, listings) nothing is created or switched: a SQLite file
    that does not exist is an error, and a full disk does not stop a report.

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
    try:
        url = _with_installed_driver(paths.storage_url)
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
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


def retry_locked(action: Callable[[], T], *, attempts: int = 20, what: str = "write") -> T:
    """Run a storage action, retrying a bounded number of times while SQLite is locked."""
    import sqlalchemy.exc

    delay = 0.05
    for attempt in range(attempts):
        try:
            return action()
        except sqlalchemy.exc.OperationalError as e:
            if "locked" not in str(e) or attempt == attempts - 1:
                raise StorageError(
                    f"the study storage refused a {what}: {_first_line(str(e))}",
                    hint="another program holds the database; retry when it is done",
                ) from e
            log.debug("database locked during %s, retrying (%d)", what, attempt + 1)
            time.sleep(delay)
            delay = min(1.0, delay * 1.6)
    raise AssertionError("unreachable")


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
