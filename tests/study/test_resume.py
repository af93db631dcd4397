"""A tuner killed in the middle of a trial (SIGKILL: no clean-up at all), then
``autotune study resume``: the orphaned server is found through the recorded process identity and
stopped, the interrupted configuration runs again, and the study reaches its target."""

from __future__ import annotations

from collections.abc import Callable

from ._lab import CONFIGS, StudyLab, no_traceback
from ._scenarios import kill9_then_resume


def test_kill9_mid_trial_then_resume(lab: StudyLab, fault_tried: Callable[[str], None]) -> None:
    fault_tried("SIGKILL of the tuner")
    kill9_then_resume(lab, "killed")


def test_resume_of_a_finished_study_runs_nothing_and_keeps_everything(lab: StudyLab) -> None:
    space = lab.space("done", baseline=False, configs=CONFIGS[:2])
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "2")
    assert run.rc == 0, run.show()
    before = [(t.number, t.state.name, t.value) for t in lab.finished("done")]
    assert len(before) == 2
    again = lab.cli("study", "resume", "--study-name", "done")
    assert again.rc == 0, again.show()
    no_traceback(again)
    assert "2 of 2 trials finished" in again.out
    assert [(t.number, t.state.name, t.value) for t in lab.finished("done")] == before
    # one more trial continues from there (--n-trials counts from the finished trials)
    more = lab.cli("study", "resume", "--study-name", "done", "--n-trials", "1", "--seed", "4")
    assert more.rc == 0, more.show()
    after = lab.finished("done")
    assert len(after) == 3
    assert [(t.number, t.state.name, t.value) for t in after][:2] == before
