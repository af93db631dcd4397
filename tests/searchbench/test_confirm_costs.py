"""Confirmation where speculation costs: once every candidate is slower than no speculation,
the rounds stop, whichever of them leads.

On the seed box with custom all-reduce (the simulator's Kimi-K2.5 profile) no speculation
serves about 69 tok/s and the best speculative configurations about 44: speculation costs a
third. The search measures, at noise 0, two configurations of the best setting (graph batch 16
and 32) and a chain one step deeper 2.6% behind them; the confirmation (2% noise) cannot tell
the three apart in three rounds, but every one's interval lies far below no speculation, so
the verdict (serve without it) is reached at ``min_rounds``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from autotune.searchbench._benchmark import prepare
from autotune.searchbench._oracle import Oracle, OracleEvaluator
from autotune.study._confirm import BASELINE, Confirmation
from autotune.study._paired import Paired

from ._measured import measured_study

pytestmark = pytest.mark.timeout(600)

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "eagle3-custom-allreduce.yaml"
#: (steps, top-k, draft tokens, graph batch): near-equal, all far slower than no speculation.
SETTINGS = [(1, 1, 2, 16), (1, 1, 2, 32), (2, 1, 3, 16)]


def _params(steps: int, topk: int, draft: int, graph: int) -> dict[str, Any]:
    return {"speculative_num_steps": steps, "speculative_eagle_topk": topk,
            "speculative_num_draft_tokens": draft, "cuda_graph_max_bs": graph,
            "mem_fraction_static": 0.85}  # fmt: skip


def test_the_rounds_stop_once_every_candidate_is_slower_than_no_speculation(
    tmp_path: Path,
) -> None:
    space, model = prepare(str(SPACE), None)
    configs = tuple(_params(*s) for s in SETTINGS)
    confirm = dataclasses.replace(space.confirm, candidates=3, min_rounds=3, max_rounds=12)
    space = dataclasses.replace(space, enqueued=configs, confirm=confirm)
    oracle = Oracle.for_space(model, space)
    study = measured_study(space, oracle, tmp_path, "costs", informed=False)
    base = oracle.answer(space.baseline_config()).value
    for config in configs:
        assert oracle.answer(space.config_for(config)).value < 0.7 * base

    lines: list[str] = []
    verdict = Confirmation(
        study, space, OracleEvaluator(oracle, seed=2, noise=0.02),
        folder=tmp_path / "confirm", gpus=8, on_line=lines.append,
    ).run()  # fmt: skip
    text = "\n".join(verdict.lines())
    assert verdict.kind == "costs" and verdict.choice is None, text
    # three rounds of the baseline and the three candidates, not one more (the deeper chain,
    # behind with the search's own figures, may be dropped a round sooner)
    runs = [line for line in lines if line.startswith("confirm round")]
    assert verdict.rounds == 3 and 4 * 3 - 1 <= verdict.starts == len(runs) <= 4 * 3, text
    assert all(a.high is not None and a.high < 1.0 for a in verdict.arms), text
    assert any("not ranked further" in n for n in verdict.notes), text
    # the leader was not told apart from the others: the old rule would have gone on
    paired = Paired(
        [(m["round"], m["arm"], m["value"], {})
         for m in study.user_attrs["autotune:confirmation"]["measurements"]],
        baseline=BASELINE, maximize=True,
    )  # fmt: skip
    standing = [a.key for a in verdict.arms if a.dropped is None]
    assert not paired.contest(standing, 0.95, confirm.margin).apart, text


def test_all_slower_is_judged_by_the_objective_and_at_each_load_point() -> None:
    # rounds of the baseline and two arms, with figures at two load points: at c64 both arms
    # are far slower than the baseline, at c1 arm b is faster; by the objective both slower
    runs = []
    for r, jitter in enumerate((1.0, 1.01, 0.99, 1.0)):
        runs.append((r, BASELINE, 100.0 * jitter, {"c1": 10.0 * jitter, "c64": 200.0 * jitter}))
        runs.append((r, "a", 60.0 * jitter, {"c1": 9.0 * jitter, "c64": 100.0 * jitter}))
        runs.append((r, "b", 62.0 * jitter, {"c1": 12.0 * jitter, "c64": 110.0 * jitter}))
    paired = Paired(runs, baseline=BASELINE, maximize=True)
    slower = Confirmation._all_slower
    assert slower(paired, ["a", "b"], 0.95)
    assert slower(paired, ["a", "b"], 0.95, "c64")
    assert not slower(paired, ["a", "b"], 0.95, "c1")
    assert slower(paired, ["a"], 0.95, "c1")
    assert not slower(paired, [], 0.95)
    # an arm without two paired rounds is not judged slower
    assert not slower(paired, ["a", "missing"], 0.95)
