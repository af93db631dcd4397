"""``study resume --n-trials N`` runs N more trials (as Optuna users read ``n_trials``) and stores
the new target; ``--target-trials T`` sets a total. Before, ``--n-trials 1`` on a study with two
finished trials ran nothing, printed "2 of 1" and overwrote the stored target with 1."""

from __future__ import annotations

from collections.abc import Callable

from ._lab import CONFIGS, StudyLab, no_traceback

TARGET = "autotune:n_trials"


def _target(lab: StudyLab, name: str) -> object:
    import optuna

    study = optuna.load_study(study_name=name, storage=lab.storage(lab.sqlite_url(name)))
    return study.user_attrs.get(TARGET)


def test_n_trials_on_resume_means_that_many_more(
    lab: StudyLab, bad_input_tried: Callable[[str], None]
) -> None:
    space = lab.space("more", baseline=False, configs=CONFIGS[:2])
    run = lab.cli("study", "start", "--space", str(space), "--n-trials", "2")
    assert run.rc == 0, run.show()
    before = [(t.number, t.state.name, t.value) for t in lab.finished("more")]
    assert len(before) == 2

    more = lab.cli("study", "resume", "--study-name", "more", "--n-trials", "1", "--seed", "4")
    assert more.rc == 0, more.show()
    no_traceback(more)
    assert "3 of 3 trials finished" in more.out, more.show()
    assert len(lab.finished("more")) == 3
    assert _target(lab, "more") == 3  # stored: a plain resume keeps it
    assert [(t.number, t.state.name, t.value) for t in lab.finished("more")][:2] == before

    idle = lab.cli("study", "resume", "--study-name", "more")
    assert idle.rc == 0, idle.show()
    assert "3 of 3 trials finished" in idle.out
    assert len(lab.finished("more")) == 3

    total = lab.cli("study", "resume", "--study-name", "more", "--target-trials", "4")
    assert total.rc == 0, total.show()
    assert "4 of 4 trials finished" in total.out, total.show()
    assert _target(lab, "more") == 4

    bad_input_tried("resume --target-trials below the finished trials")
    lower = lab.cli("study", "resume", "--study-name", "more", "--target-trials", "2")
    assert lower.rc == 2, lower.show()
    no_traceback(lower)
    assert "--target-trials" in lower.err and "already finished" in lower.err
    assert "--n-trials N runs N more trials" in lower.err
    assert _target(lab, "more") == 4  # not lowered

    bad_input_tried("resume with --n-trials and --target-trials")
    both = lab.cli(
        "study", "resume", "--study-name", "more", "--n-trials", "1", "--target-trials", "9"
    )
    assert both.rc == 2, both.show()
    no_traceback(both)
    assert "not both" in both.err
    assert len(lab.finished("more")) == 4
    assert _target(lab, "more") == 4
