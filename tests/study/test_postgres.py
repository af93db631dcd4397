"""Studies on a real PostgreSQL server (started by .ci/postgres.sh; its URL in
AUTOTUNE_TEST_POSTGRES_URL): several workers on one study, a killed tuner resumed, a study
name taken by another space. Skipped without a server unless AUTOTUNE_REQUIRE_POSTGRES=1."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from ._lab import CONFIGS, PARAMETERS, StudyLab, no_traceback
from ._scenarios import kill9_then_resume, two_workers

pytestmark = pytest.mark.postgres


def _name(prefix: str) -> str:
    """Study names are unique per run: the database outlives the test session."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_two_workers_share_one_postgres_study(
    lab: StudyLab, postgres_url: str, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("a second worker joining (PostgreSQL)")
    two_workers(lab, _name("pg-shared"), postgres_url)


def test_three_workers_finish_exactly_the_target(lab: StudyLab, postgres_url: str) -> None:
    """Three workers asking at the same moments: no overshoot, no trial lost."""
    name = _name("pg-three")
    space = lab.space(name, faults=["slow_start:4"], configs=CONFIGS)
    args = ("--storage", postgres_url, "--sampler", "random")
    first = lab.spawn("study", "start", "--space", str(space), "--n-trials", "7", *args)
    lab.wait_for("the study", lambda: _has_trials(lab, name, postgres_url), 60)
    others = [lab.spawn("study", "resume", "--study-name", name, "--join", *args) for _ in range(2)]
    for proc in [first, *others]:
        run = lab.finish(proc, timeout=240)
        assert run.rc == 0, run.show()
        no_traceback(run)
    trials = lab.trials(name, postgres_url)
    finished = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(finished) == 7, [(t.number, t.state.name) for t in trials]
    assert not [t for t in trials if t.state.name == "RUNNING"]
    for t in trials:
        if t.state.name == "FAIL":
            assert t.user_attrs["outcome"] == "surplus", t.user_attrs
    roles = [t.user_attrs["role"] for t in finished]
    assert roles.count("baseline") == 1 and roles.count("enqueued") == 3, roles


def _has_trials(lab: StudyLab, name: str, url: str) -> bool:
    import optuna

    summaries = optuna.get_all_study_summaries(lab.storage(url), include_best_trial=False)
    return name in {s.study_name for s in summaries} and bool(lab.trials(name, url))


def test_kill9_mid_trial_then_resume_on_postgres(
    lab: StudyLab, postgres_url: str, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("SIGKILL of the tuner (PostgreSQL)")
    kill9_then_resume(lab, _name("pg-killed"), postgres_url)


def test_study_name_taken_by_another_space_on_postgres(
    lab: StudyLab, postgres_url: str, bad_input_tried: Callable[[str], None]
) -> None:
    bad_input_tried("study name taken by another space (PostgreSQL)")
    name = _name("pg-taken")
    first = lab.space(name, baseline=False, configs=CONFIGS[:1])
    params = {**PARAMETERS, "mem_fraction_static": {"type": "float", "low": 0.6, "high": 0.9}}
    other = lab.space(name, baseline=False, parameters=params, file="other.yaml")
    run = lab.cli("study", "start", "--space", str(first), "--n-trials", "1",
                  "--storage", postgres_url)  # fmt: skip
    assert run.rc == 0, run.show()
    refused = lab.cli(
        "study", "start", "--space", str(other), "--n-trials", "1", "--storage", postgres_url
    )
    assert refused.rc == 1, refused.show()
    no_traceback(refused)
    assert f"study '{name}' already exists with another search space" in refused.err
    assert len(lab.finished(name, postgres_url)) == 1


def test_the_debug_log_of_a_postgres_study_has_no_password(
    lab: StudyLab, postgres_url: str
) -> None:
    from urllib.parse import urlsplit

    password = urlsplit(postgres_url).password
    if not password:
        pytest.skip("AUTOTUNE_TEST_POSTGRES_URL has no password to hide")
    name = _name("pg-secret")
    space = lab.space(name)
    run = lab.cli(
        "study", "start", "--space", str(space), "--n-trials", "1", "--storage", postgres_url
    )
    assert run.rc == 0, run.show()
    logs = list((lab.studies / f"{name}-logs").glob("*.log"))
    assert logs
    for log in logs:
        first, *_ = log.read_text().splitlines()
        assert "postgresql" in first and password not in log.read_text(), first
    assert password not in run.text
