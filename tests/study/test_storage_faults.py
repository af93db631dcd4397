"""A study database that is damaged or cannot be written, through the real CLI: ``status``,
``report`` and ``list`` say which file, that it is corrupted and what to do (before: an Optuna
StorageInternalError traceback, and ``list`` skipped the file silently); a read-only study is
reported (before: "unable to open database file")."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

from ._lab import CONFIGS, StudyLab, no_traceback
from .test_faults import _private_tmpfs


def _finished_study(lab: StudyLab, name: str) -> Path:
    space = lab.space(name, baseline=False, configs=CONFIGS[:2])
    # a process of its own: the database is then closed as a finished tuner leaves it
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "2", own_process=True)
    assert run.rc == 0, run.show()
    db = lab.studies / f"{name}.db"
    with sqlite3.connect(db) as conn:  # everything into the main file, no -wal left beside it
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
    return db


def _corrupt_one_page(db: Path, table: str = "trials") -> None:
    """Overwrite the root page of ``table`` (so every read of it meets the damage)."""
    with sqlite3.connect(db) as conn:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)
        ).fetchone()
    with db.open("r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\xde\xad\xbe\xef" * (size // 4))


def test_a_corrupted_database_is_a_message(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("a corrupted page in the study database")
    db = _finished_study(lab, "damaged")
    _finished_study(lab, "healthy")
    _corrupt_one_page(db)
    for command in ("status", "report"):
        run = lab.cli("study", command, "--study-name", "damaged")
        assert run.rc == 1, run.show()
        no_traceback(run)
        assert "StorageInternalError" not in run.err
        assert f"the study database '{db}' is corrupted" in run.err, run.show()
        assert "restore a copy" in run.err and ".recover" in run.err
    listed = lab.cli("study", "list")
    no_traceback(listed)
    assert listed.rc == 1, listed.show()
    assert "healthy: 2 finished" in listed.out  # the readable ones are still listed
    assert f"cannot list {db}" in listed.err and "corrupted" in listed.err, listed.show()
    assert ".recover" in listed.err


def test_a_file_that_is_not_a_database_is_named_by_list(
    lab: StudyLab, bad_input_tried: Callable[[str], None]
) -> None:
    bad_input_tried("a .db file that is not a database")
    _finished_study(lab, "fine")
    junk = lab.studies / "junk.db"
    junk.write_bytes(b"this is not a SQLite file\n" * 200)
    listed = lab.cli("study", "list")
    no_traceback(listed)
    assert listed.rc == 1, listed.show()
    assert "fine: 2 finished" in listed.out
    assert f"cannot list {junk}" in listed.err, listed.show()
    status = lab.cli("study", "status", "--study-name", "junk")
    assert status.rc == 1, status.show()
    no_traceback(status)
    assert str(junk) in status.err and "corrupted" in status.err


def test_a_read_only_study_is_reported(lab: StudyLab, fault_tried: Callable[[str], None]) -> None:
    """A study file that cannot be written (mode 0444 in a read-only folder; as root, which
    writes anywhere, a read-only filesystem) is opened read-only for status, report and list."""
    fault_tried("read-only study database")
    _finished_study(lab, "frozen")
    # the database as the tuner leaves it (WAL mode): needs SQLite's -shm, which cannot be made
    with sqlite3.connect(lab.studies / "frozen.db") as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    staged = lab.root / "staged"
    shutil.copytree(lab.studies, staged)
    wrap: list[str] = []
    if os.geteuid() != 0:
        (lab.studies / "frozen.db").chmod(0o444)
        lab.studies.chmod(0o555)
    else:
        wrap = _private_tmpfs(
            lab.studies,
            "size=50m",
            before=f'cp -a "{staged}/." "{lab.studies}/" && '
            f'mount -o remount,ro "{lab.studies}" && ',
        )
    try:
        runs = {
            command: lab.cli("study", command, "--study-name", "frozen", wrap=wrap)
            for command in ("status", "report")
        }
        runs["list"] = lab.cli("study", "list", wrap=wrap)
        runs["start"] = lab.cli(
            "study", "resume", "--study-name", "frozen", "--n-trials", "1", wrap=wrap
        )
    finally:
        lab.studies.chmod(0o755)
        if (lab.studies / "frozen.db").exists():
            (lab.studies / "frozen.db").chmod(0o644)
    for command in ("status", "report", "list"):
        run = runs[command]
        assert run.rc == 0, run.show()
        no_traceback(run)
    assert runs["status"].out.startswith("frozen: 2/2 finished"), runs["status"].show()
    assert "best" in runs["report"].out
    assert "frozen: 2 finished" in runs["list"].out
    resumed = runs["start"]  # running trials needs a writable study: a message, no launch
    assert resumed.rc != 0, resumed.show()
    no_traceback(resumed)
    assert "autotune: error:" in resumed.err and str(lab.studies) in resumed.err, resumed.show()
