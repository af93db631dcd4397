"""Issue 42: PostgreSQL going away in the middle of a trial is reported as a lost connection
(it read "invalid data in the commit", an internal error), and `study resume` recovers all.

The database is taken away as a server restart would: connections to it are refused and the
tuner's are ended. Runs on the server of .ci/postgres.sh (AUTOTUNE_TEST_POSTGRES_URL, as a
superuser), in a database of its own; skipped without one unless AUTOTUNE_REQUIRE_POSTGRES=1."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from ._lab import CONFIGS, StudyLab, no_traceback

pytestmark = pytest.mark.postgres


def _admin(url: str, *statements: str) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(
        "postgresql+psycopg2://" + url.split("://", 1)[1], isolation_level="AUTOCOMMIT"
    )
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


@pytest.fixture
def own_database(postgres_url: str) -> Iterator[str]:
    """A database of this test, on the test server; its URL."""
    name = f"lost_{uuid.uuid4().hex[:8]}"
    _admin(postgres_url, f"CREATE DATABASE {name}")
    try:
        yield postgres_url.rsplit("/", 1)[0] + "/" + name
    finally:
        _admin(
            postgres_url,
            f"ALTER DATABASE {name} ALLOW_CONNECTIONS true",
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'",
            f"DROP DATABASE IF EXISTS {name}",
        )


def test_postgres_going_away_mid_trial_is_a_lost_connection(
    own_database: str, postgres_url: str, lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    # (own_database first: set up before the lab, so dropped after the lab's last look)
    fault_tried("PostgreSQL going away in the middle of a trial")
    db = own_database.rsplit("/", 1)[1]
    name = "pg-lost"
    space = lab.space(name, faults=["slow_start:100"], configs=CONFIGS[:2])
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "3",
                      "--no-informed", "--storage", own_database)  # fmt: skip
    lab.wait_server()
    _admin(
        postgres_url,
        f"ALTER DATABASE {db} ALLOW_CONNECTIONS false",
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}'",
    )
    run = lab.finish(tuner, timeout=180)
    assert run.rc == 1, run.show()
    no_traceback(run)
    assert "lost the connection" in run.err, run.show()
    assert "invalid data" not in run.err and "internal error" not in run.err, run.show()
    assert "trials finished" not in run.out, run.show()
    lab.check_no_servers("after the tuner stopped")

    _admin(postgres_url, f"ALTER DATABASE {db} ALLOW_CONNECTIONS true")
    again = lab.cli("study", "resume", "--study-name", name, "--storage", own_database)
    assert again.rc == 0, again.show()
    assert "3 of 3 trials finished" in again.out, again.show()
    assert len(lab.finished(name, own_database)) == 3
