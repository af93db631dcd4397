"""Issue 42: the options a study was started with (``--n-trials``, ``--no-confirm``) are stored
with the study, before anything else of it, and every ``study resume`` keeps them unless its own
options override them: after Ctrl-C, and after a kill between storing the space and the target."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import optuna

from ._lab import CONFIGS, StudyLab, no_traceback

#: A confirmation the space asks for: ``--no-confirm`` must keep it from running.
CONFIRM = {"candidates": 1, "min_rounds": 2, "max_rounds": 2}
PAUSE_ENV = "AUTOTUNE_TEST_PAUSE_AT"


def _confirmed(lab: StudyLab, name: str) -> bool:
    study = optuna.load_study(study_name=name, storage=lab.storage(lab.sqlite_url(name)))
    return "autotune:confirmation" in study.user_attrs


def test_a_kill_between_the_space_and_the_target_keeps_the_start_options(
    lab: StudyLab, fault_tried: Callable[[str], None]
) -> None:
    fault_tried("SIGKILL of `study start` between storing the space and the target")
    name = "opts-kill"
    space = lab.space(name, configs=CONFIGS[:2], confirm=CONFIRM)
    lab.env[PAUSE_ENV] = "space"
    try:
        tuner = lab.spawn(
            "study", "start", "--space", str(space), "--n-trials", "3", "--no-confirm",
            "--no-informed", log="killed",
        )  # fmt: skip
    finally:
        lab.env.pop(PAUSE_ENV)
    err = Path(lab.root / "killed.err")
    lab.wait_for("the pause", lambda: "paused at space" in err.read_text(), 90)
    tuner.kill()
    tuner.wait(timeout=30)

    run = lab.cli("study", "resume", "--study-name", name)
    assert run.rc == 0, run.show()
    no_traceback(run)
    assert "3 of 3 trials finished" in run.out, run.show()  # not the default 20
    assert len(lab.finished(name)) == 3
    assert not _confirmed(lab, name), run.show()  # --no-confirm kept


def test_resume_after_ctrl_c_keeps_no_confirm_unless_overridden(lab: StudyLab) -> None:
    name = "opts-int"
    space = lab.space(name, faults=["slow_start:20"], baseline=False, configs=CONFIGS[:2],
                      confirm=CONFIRM)  # fmt: skip
    tuner = lab.spawn("study", "start", "--space", str(space), "--n-trials", "2", "--no-confirm")
    lab.wait_server()
    tuner.send_signal(signal.SIGINT)
    assert lab.finish(tuner, timeout=60).rc == 130

    clean = lab.space(name, baseline=False, configs=CONFIGS[:2], confirm=CONFIRM, file="c.yaml")
    run = lab.cli("study", "resume", "--study-name", name, "--space", str(clean))
    assert run.rc == 0, run.show()
    assert "2 of 2 trials finished" in run.out, run.show()
    assert not _confirmed(lab, name), run.show()

    # an option given to resume wins over the stored one
    run = lab.cli("study", "resume", "--study-name", name, "--space", str(clean), "--confirm")
    assert run.rc == 0, run.show()
    assert _confirmed(lab, name), run.show()
