"""The search's own measurements as the round before the confirmation's first, with a drift
check: a candidate clearly behind is dropped a round sooner, and never on figures from a box
that has changed since the search.

On the seed box (the simulator's Kimi-K2.5 profile) the search measures, at noise 0, the best
chain (71.6 tok/s), one a step deeper (71.1) and one three steps deeper (66.6, 7% behind); no
speculation serves 69.0. The confirmation measures at 2% noise a start.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from autotune._knobs import ServerConfig
from autotune.searchbench._benchmark import prepare
from autotune.searchbench._oracle import Oracle, OracleEvaluator
from autotune.space import SearchSpace
from autotune.study._confirm import BASELINE, Confirmation
from autotune.study._evaluate import TrialContext
from autotune.study._record import TrialRecord

from ._measured import measured_study

pytestmark = pytest.mark.timeout(600)

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "eagle3.yaml"
#: (steps, draft tokens): the best, one step deeper, three steps deeper (7% behind the best).
SETTINGS = [(2, 3), (3, 4), (5, 6)]
BEHIND = "trial 3"


def _params(steps: int, draft: int) -> dict[str, Any]:
    return {"speculative_num_steps": steps, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": draft, "cuda_graph_max_bs": 16,
            "mem_fraction_static": 0.81, "allreduce": "nccl"}  # fmt: skip


class _Faster(OracleEvaluator):
    """The box after a change: every run reads ``factor`` times the oracle's figure."""

    factor = 1.25

    def evaluate(self, config: ServerConfig, context: TrialContext) -> TrialRecord:
        record = super().evaluate(config, context)
        if record.value is not None:
            record = dataclasses.replace(record, value=record.value * self.factor)
        return record


def _setup(tmp_path: Path) -> tuple[SearchSpace, Oracle, Any]:
    space, model = prepare(str(SPACE), None)
    configs = tuple(_params(*s) for s in SETTINGS)
    confirm = dataclasses.replace(space.confirm, candidates=3, min_rounds=3, max_rounds=12)
    space = dataclasses.replace(space, enqueued=configs, confirm=confirm)
    oracle = Oracle.for_space(model, space)
    study = measured_study(space, oracle, tmp_path, "search-round", informed=False)
    return space, oracle, study


def test_a_candidate_the_search_and_two_rounds_put_behind_is_dropped_before_min_rounds(
    tmp_path: Path,
) -> None:
    space, oracle, study = _setup(tmp_path)
    verdict = Confirmation(
        study, space, OracleEvaluator(oracle, seed=1, noise=0.02),
        folder=tmp_path / "confirm", gpus=8,
    ).run()  # fmt: skip
    text = "\n".join(verdict.lines())
    behind = next(a for a in verdict.arms if a.key == BEHIND)
    assert behind.dropped is not None and behind.dropped.startswith("behind"), text
    assert behind.runs == 2 < space.confirm.min_rounds, text
    # the search's figures cost nothing and count as no start of the confirmation
    stored = study.user_attrs["autotune:confirmation"]["measurements"]
    assert verdict.starts == len(stored) and all(m["round"] >= 0 for m in stored)
    # and no interval the verdict states includes them: two runs give the dropped one's
    assert behind.ratio is not None and behind.low is not None


def test_after_a_drift_the_search_figures_are_left_out(tmp_path: Path) -> None:
    space, oracle, study = _setup(tmp_path)
    verdict = Confirmation(
        study, space, _Faster(oracle, seed=1, noise=0.02),
        folder=tmp_path / "confirm", gpus=8,
    ).run()  # fmt: skip
    text = "\n".join(verdict.lines())
    behind = next(a for a in verdict.arms if a.key == BEHIND)
    # the box reads 25% faster than in the search: nothing is dropped before min_rounds
    assert behind.runs >= space.confirm.min_rounds, text
    base = [m for m in study.user_attrs["autotune:confirmation"]["measurements"]
            if m["arm"] == BASELINE]  # fmt: skip
    assert base and all(m["value"] > 80.0 for m in base), text
