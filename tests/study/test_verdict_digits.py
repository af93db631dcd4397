"""The verdict's figure carries the digits that decide it (``ratio_interval``), in the headline
``judge`` writes and in the report's first line."""

from __future__ import annotations

import pytest

from autotune.space import ConfirmSpec
from autotune.study._verdict import ArmFigure, judge, ratio_interval


@pytest.mark.parametrize(
    ("low", "shown"),
    [(1.004, "1.004"), (0.995, "0.995"), (1.0004, "1.0004"), (0.99996, "0.99996"), (1.02, "1.02")],
)
def test_a_bound_near_one_keeps_its_deciding_digits(low: float, shown: str) -> None:
    text = ratio_interval(1.05, low, 1.10)
    assert text == f"x1.05 [{shown}, 1.10]"


def test_bounds_on_either_side_of_one_never_print_the_same() -> None:
    below = [1.0 - d for d in (0.0099, 0.005, 0.0005, 0.00005, 0.000005)]
    above = [1.0 + d for d in (0.0099, 0.005, 0.0005, 0.00005, 0.000005)]
    printed_below = {ratio_interval(1.0, b, 1.1) for b in below}
    printed_above = {ratio_interval(1.0, a, 1.1) for a in above}
    assert not printed_below & printed_above
    # the ratio and an upper bound near 1 get the digits too
    assert ratio_interval(0.996, 0.98, 1.003) == "x0.996 [0.98, 1.003]"
    assert ratio_interval(1.0, 0.98, 1.02) == "x1.000 [0.98, 1.02]"


def test_more_digits_asked_for_are_kept() -> None:
    assert ratio_interval(1.0421, 1.0213, 1.0633, digits=3) == "x1.042 [1.021, 1.063]"


def _arm(low: float) -> ArmFigure:
    return ArmFigure(
        key="trial 5",
        trial=5,
        config={"speculative_algorithm": "EAGLE3", "speculative_num_steps": 2},
        searched=None,
        ratio=1.05,
        low=low,
        high=1.10,
        runs=4,
    )


def test_opposite_verdicts_print_different_figures() -> None:
    spec = ConfirmSpec()
    pays = judge([_arm(1.004)], rounds=4, starts=8, gpu_hours=1.5, spec=spec)
    noise = judge([_arm(0.995)], rounds=4, starts=8, gpu_hours=1.5, spec=spec)
    assert (pays.kind, noise.kind) == ("pays", "noise")
    assert "x1.05 [1.004, 1.10]" in pays.headline
    assert "x1.05 [0.995, 1.10]" in noise.headline
    assert "[1.004, 1.100]" in pays.lines()[2]  # the candidate's line: three decimals throughout
