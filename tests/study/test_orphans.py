"""Issue 42: a tuner killed with SIGKILL in the middle of a trial leaves its server running (on a
real box, holding every GPU). Every ``study resume`` (and ``study confirm``), also one that is
then refused (the space file changed or deleted, a narrower ``--space``), first stops the servers
of the study's dead run that no live worker owns, from what the trial recorded alone, and says
so; the trial is queued again as a resume that goes on would do."""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil
import pytest
import yaml

from ._lab import CONFIGS, PARAMETERS, StudyLab, attrs_of, no_traceback
from ._scenarios import _exists

PROCESS = "autotune:process"
#: An environment value autotune does not store (default-deny): a resume without the file that
#: had it is refused.
SETTING = {"MY_SETTING": "PLANTEDsetting123456"}


def _orphan(lab: StudyLab, name: str) -> tuple[psutil.Process, int]:
    """A study whose tuner was killed with SIGKILL while its first trial's server ran: the
    server (still running) and the trial's number."""
    space = lab.space(name, faults=["slow_start:20"], baseline=False, configs=CONFIGS)
    data = yaml.safe_load(space.read_text())
    data["engine"]["env"] = dict(SETTING)
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "3")
    server = lab.wait_server()

    def recorded() -> bool:
        trials = lab.trials(name) if _exists(lab, name, None) else []
        return any(t.state.name == "RUNNING" and PROCESS in t.system_attrs for t in trials)

    lab.wait_for("the server's process record", recorded, 60)
    tuner.kill()
    tuner.wait(timeout=30)
    time.sleep(0.3)
    assert server.is_running() and server.status() != psutil.STATUS_ZOMBIE
    (stale,) = [t for t in lab.trials(name) if t.state.name == "RUNNING"]
    return server, stale.number


def _changed(lab: StudyLab, name: str) -> list[str]:
    space = lab.root / f"{name}.yaml"
    data = yaml.safe_load(space.read_text())
    data["workload"]["num_prompts"] = 8
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    return []


def _deleted(lab: StudyLab, name: str) -> list[str]:
    (lab.root / f"{name}.yaml").unlink()
    return []


def _narrower(lab: StudyLab, name: str) -> list[str]:
    narrow = dict(PARAMETERS)
    narrow["speculative_num_steps"] = {"type": "int", "low": 1, "high": 2}
    other = lab.space(name, parameters=narrow, baseline=False, file="narrow.yaml")
    return ["--space", str(other)]


@pytest.mark.parametrize(
    ("case", "change", "refusal"),
    [
        ("the space file changed", _changed, "engine.env.MY_SETTING"),
        ("the space file deleted", _deleted, "engine.env.MY_SETTING"),
        ("a narrower --space", _narrower, "created with another search space"),
    ],
)
def test_a_refused_resume_still_stops_the_dead_runs_server(
    lab: StudyLab,
    fault_tried: Callable[[str], None],
    case: str,
    change: Callable[[StudyLab, str], list[str]],
    refusal: str,
) -> None:
    fault_tried(f"SIGKILL of the tuner, then a refused resume: {case}")
    name = "orphan"
    server, number = _orphan(lab, name)
    args = change(lab, name)

    # (lab.cli fails the test if any server of this test still runs once the command exited)
    run = lab.cli("study", "resume", "--study-name", name, *args)
    assert run.rc != 0, run.show()
    no_traceback(run)
    assert refusal in run.err, run.show()
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert (
        f"trial {number} [enqueued] interrupted: its tuner stopped while it ran; it runs again; "
        "its server was still running and has been stopped" in run.err
    ), run.show()
    assert SETTING["MY_SETTING"] not in run.text

    # taken over from its record alone: failed, and queued again for the resume that goes on
    trials = lab.trials(name)
    (failed,) = [t for t in trials if t.number == number]
    assert failed.state.name == "FAIL" and attrs_of(failed)["outcome"] == "interrupted"
    reruns = [t for t in trials if t.user_attrs.get("autotune:rerun_of") == number]
    assert [t.state.name for t in reruns] == ["WAITING"]
    assert not [t for t in trials if t.state.name == "RUNNING"]

    # a second refused resume finds nothing more to stop, and says nothing about it
    again = lab.cli("study", "resume", "--study-name", name, *args)
    assert again.rc == run.rc and "has been stopped" not in again.err, again.show()


def test_a_refused_resume_stops_the_server_of_a_killed_confirmation(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    import optuna

    fault_tried("SIGKILL of the tuner during its confirmation, then a refused resume")
    name = "orphan-conf"
    confirm = {"candidates": 1, "min_rounds": 2, "max_rounds": 2}
    space = lab.space(name, faults=["slow_start:20"], configs=CONFIGS[:2], confirm=confirm)
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "3", "--seed", "2")

    def confirming() -> bool:
        if not _exists(lab, name, None):  # (read without Optuna while the tables are made)
            return False
        study = optuna.load_study(study_name=name, storage=lab.storage(lab.sqlite_url(name)))
        record = study.user_attrs.get("autotune:confirm_process")
        return isinstance(record, dict) and record.get("pid", -1) > 0

    lab.wait_for("a confirmation run's server", confirming, timeout=300)
    server = lab.wait_server()
    tuner.kill()
    tuner.wait(timeout=30)
    assert server.is_running()

    run = lab.cli("study", "resume", "--study-name", name, *_narrower(lab, name))
    assert run.rc != 0 and "created with another search space" in run.err, run.show()
    no_traceback(run)
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert "the server of an interrupted confirmation" in run.err, run.show()
    assert "has been stopped" in run.err
