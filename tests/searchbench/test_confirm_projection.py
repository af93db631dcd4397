"""Confirmation that runs out of rounds undecided says how many would decide it, and goes on.

On the seed box (the simulator's Kimi-K2.5 profile) the space's hand-tuned configuration runs
about 2.6% slower than no speculation; under 2% run-to-run noise four rounds cannot tell that
from no difference. The confirmation says after each round from ``min_rounds`` where the
leader stands and how many rounds would decide it at the spread so far; the verdict's note
gives the rounds in all and the command that goes on, and that command, with more rounds, goes
on from the rounds already measured rather than starting again.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from autotune.searchbench._benchmark import prepare
from autotune.searchbench._oracle import Oracle, OracleEvaluator
from autotune.study._confirm import Confirmation

from ._measured import measured_study

pytestmark = pytest.mark.timeout(600)

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "eagle3.yaml"


def test_an_undecided_confirmation_projects_the_rounds_and_goes_on_from_them(
    tmp_path: Path,
) -> None:
    space, model = prepare(str(SPACE), None)
    confirm = dataclasses.replace(space.confirm, candidates=1, min_rounds=3, max_rounds=4)
    space = dataclasses.replace(space, confirm=confirm)
    oracle = Oracle.for_space(model, space)
    study = measured_study(space, oracle, tmp_path, "undecided", informed=False)
    base = oracle.answer(space.baseline_config()).value
    (config,) = space.enqueued
    assert 0.95 < oracle.answer(space.config_for(config)).value / base < 0.99

    lines: list[str] = []
    verdict = Confirmation(
        study, space, OracleEvaluator(oracle, seed=0, noise=0.02),
        folder=tmp_path / "confirm", gpus=8, on_line=lines.append,
    ).run()  # fmt: skip
    text = "\n".join(lines + verdict.lines())
    assert verdict.kind == "noise" and verdict.rounds == 4 and verdict.starts == 8, text
    # after round 3 (min_rounds; round 4 is the last): the leader, undecided, and the projection
    (standing,) = [line for line in lines if line.startswith("after round")]
    assert standing.startswith("after round 3: trial 1 leads at x0."), text
    found = re.search(r"about (\d+) rounds in all decide it \((\d+) more, (\d+) starts", standing)
    assert found is not None, text
    need, more, starts = (int(g) for g in found.groups())
    assert need > 4 and more == need - 3 and starts == 2 * more, text
    assert "this confirmation stops at 4" in standing, text
    (note,) = [n for n in verdict.notes if "would decide it" in n]
    found = re.search(r"about (\d+) rounds in all would decide it", note)
    assert found is not None, text
    rounds = int(found.group(1))
    assert rounds > 4, text
    assert f"autotune study confirm --study-name undecided --max-rounds {rounds}" in note, text

    first = list(study.user_attrs["autotune:confirmation"]["measurements"])
    more_rounds = dataclasses.replace(confirm, max_rounds=rounds)
    again = Confirmation(
        study, space, OracleEvaluator(oracle, seed=1, noise=0.02), spec=more_rounds,
        folder=tmp_path / "confirm-more", gpus=8,
    ).run()  # fmt: skip
    after = study.user_attrs["autotune:confirmation"]["measurements"]
    assert after[: len(first)] == first, "the rounds measured before are kept"
    assert 4 < again.rounds <= rounds and again.starts == 2 * again.rounds
