"""One bar for the whole study: the search's trials, then the confirmation's runs, with the
phase named and an estimate of the time left from the starts still planned and the mean wall
time of those measured so far (a clock the test moves, not the wall)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from autotune.study._progress import StudyProgress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _terminal() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=True, width=250, color_system=None), buffer


def test_search_then_confirmation_on_one_bar() -> None:
    clock, (console, buffer) = Clock(), _terminal()
    # 15 trials planned, then 3 candidates and the baseline for 3 rounds: 12 runs
    with StudyProgress(15, enabled=True, title="demo", console=console, clock=clock,
                       confirm_runs=12) as p:  # fmt: skip
        assert p.planned == 27 and p.done == 0 and p.remaining_s() is None
        assert "estimated after the first start" in p.estimate()
        for n in range(9):
            p.started()
            clock.now += 10.0
            p.finished(n + 1, f"trial {n} ok")
        assert (p.done, p.planned) == (9, 27)
        assert p.remaining_s() == pytest.approx(18 * 10.0)  # 6 more trials and 12 runs
        assert p.estimate() == "~3 min left (estimate)"

        p.search_stopped("the twin sees nothing left worth a start")
        assert (p.done, p.planned) == (9, 21)
        assert p.remaining_s() == pytest.approx(12 * 10.0)

        # round 1 of 3 to 10, four arms: its first run, then nine more planned
        p.confirming(0, (3, 10), 4, 4)
        assert p.phase_name == "confirm round 1 (3 to 10)"
        clock.now += 4.0  # the running one counts: its part is taken off
        assert p.remaining_s() == pytest.approx(12 * 10.0 - 4.0)
        clock.now += 6.0
        p.confirm_ended()
        assert (p.done, p.planned) == (10, 21)
        # one candidate dropped: the last round (3) has three arms
        p.confirming(2, (3, 10), 3, 3)
        assert p.planned == 10 + 3  # done, then this one and the two left in its round
        assert p.phase_name == "confirm round 3 (3 to 10)"
        for left in (3, 2, 1):
            if left != 3:
                p.confirming(2, (3, 10), left, 3)
            clock.now += 10.0
            p.confirm_ended()
        assert p.planned == p.done == 13
        assert p.remaining_s() == 0.0
        # past the least rounds: one round at a time (the bar never stands still at 9/15)
        p.confirming(3, (3, 10), 3, 3)
        assert (p.done, p.planned) == (13, 16)
    out = buffer.getvalue()
    assert "search stopped at 9 of 15 trials: the twin sees nothing left worth a start" in out
    assert "confirm round 4 (3 to 10)" in out
    assert "left (estimate)" in out


def test_a_study_that_does_not_confirm_plans_its_trials_only() -> None:
    clock = Clock()
    p = StudyProgress(4, enabled=False, title="t", clock=clock, quiet=True)
    p.started()
    clock.now += 30.0
    p.finished(1, "trial 0 ok")
    assert p.remaining_s() == pytest.approx(90.0)
    assert p.estimate() == "~2 min left (estimate)"


def test_a_resumed_study_counts_the_trials_it_has() -> None:
    clock = Clock()
    p = StudyProgress(15, enabled=False, title="t", clock=clock, quiet=True, searched=9)
    assert (p.done, p.planned) == (9, 15)
    # `study confirm` of a study of 9 trials: its bar goes on from them
    p = StudyProgress(9, enabled=False, title="t", clock=clock, quiet=True, searched=9,
                      confirm_runs=12)  # fmt: skip
    assert (p.done, p.planned) == (9, 21)
    p.confirming(0, (3, 10), 4, 4)
    assert (p.done, p.planned) == (9, 21)
