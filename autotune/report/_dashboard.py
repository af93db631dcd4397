"""``autotune dashboard``: optuna-dashboard on a study's storage, with its artifacts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from autotune._errors import ConfigError
from autotune._redact import redact_url
from autotune.study._storage import (
    StudyPaths,
    artifact_store,
    open_for_reading,
    open_storage,
    study_paths,
)


def _writable(paths: StudyPaths) -> bool:
    """Whether the study's SQLite file and folder may be written (other storages: as given)."""
    import os

    db = paths.sqlite_file
    if db is None:
        return True
    return os.access(db, os.W_OK) and os.access(db.parent, os.W_OK)


def dashboard_paths(
    study_name: str | None,
    storage: str | None,
    studies_dir: str | Path,
    artifacts_dir: str | Path | None,
) -> StudyPaths:
    """The storage and artifact folder the dashboard serves."""
    if study_name is None and storage is None:
        dbs = sorted(Path(studies_dir).expanduser().glob("*.db"))
        if len(dbs) != 1:
            found = ", ".join(p.stem for p in dbs) or "none"
            raise ConfigError(
                f"which study? {len(dbs)} study databases in {str(studies_dir)!r} ({found})",
                hint="give --study-name NAME or --storage URL",
            )
        study_name = dbs[0].stem
    name = study_name or "study"
    return study_paths(name, storage=storage, studies_dir=studies_dir, artifacts_dir=artifacts_dir)


def exposure_warning(host: str) -> str | None:
    """What to say when the dashboard listens beyond this machine (None: a loopback host)."""
    from autotune.space._schema import is_loopback

    if is_loopback(host):
        return None
    return (
        f"--host {host}: optuna-dashboard will be reachable from other machines, without "
        "authentication; anyone who can reach it can read and change the study "
        "(use 127.0.0.1 and an SSH tunnel instead)"
    )


def serve_dashboard(
    *,
    study_name: str | None,
    storage: str | None,
    studies_dir: str | Path,
    artifacts_dir: str | Path | None,
    host: str,
    port: int,
    out: TextIO,
) -> None:
    """Serve optuna-dashboard until interrupted (bound to 127.0.0.1 unless told otherwise)."""
    from optuna_dashboard import run_server

    from autotune.server import port_in_use

    if not 0 < port < 65536:  # (else an OverflowError from the socket layer)
        raise ConfigError(
            f"port {port} is out of range", source="--port", hint="choose a port from 1 to 65535"
        )
    paths = dashboard_paths(study_name, storage, studies_dir, artifacts_dir)
    if paths.sqlite_file is not None and not paths.sqlite_file.exists():
        raise ConfigError(
            f"no study database {str(paths.sqlite_file)!r}",
            hint="start a study first, or pass --storage/--studies-dir",
        )
    # a host that is not an address here, or cannot be resolved, is named as the option
    if port_in_use(host, port, source="--host"):
        raise ConfigError(
            f"port {port} on {host} is already in use", source="--port", hint="choose --port"
        )
    read_only = not _writable(paths)
    if read_only:  # (as `study report` reads it: notes and changes cannot be saved)
        import optuna.artifacts

        rdb = open_for_reading(paths)
        store = optuna.artifacts.FileSystemArtifactStore(str(paths.artifacts_dir))
    else:
        rdb = open_storage(paths)
        store = artifact_store(paths)
    warning = exposure_warning(host)
    if warning is not None:
        sys.stderr.write(f"autotune: warning: {warning}\n")
        sys.stderr.flush()
    shown = redact_url(paths.storage_url)
    mode = "; read-only: this folder cannot be written, notes are not saved" if read_only else ""
    out.write(f"optuna-dashboard on http://{host}:{port}/ ({shown}{mode}); Ctrl-C stops\n")
    out.flush()
    run_server(rdb, host=host, port=port, artifact_store=store)
