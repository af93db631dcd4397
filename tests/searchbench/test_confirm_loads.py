"""Confirmation of a load mix: each load point's winner judged on its own figure.

The search measures, at noise 0, on the H100 mix space (concurrency 1, 16, 64): the best chain
by the weighted objective, deep trees that win at concurrency 1 by 1-2% of each other but lose
a third of the weighted figure, and a short chain close to the best at 64. The confirmation
(2% noise) takes the best by the objective and the best three at each load point: a tree behind
by the objective is kept for concurrency 1, measured in every round, and chosen there on its
own figure; the rounds go on while a point's leader is not told apart; run again, it measures
nothing and says the same."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.searchbench._benchmark import prepare
from autotune.searchbench._oracle import Oracle, OracleEvaluator
from autotune.space import SearchSpace
from autotune.study._confirm import Confirmation
from autotune.study._record import STUDY_CONFIRMATION
from autotune.study._verdict import Verdict

from ._measured import measured_study

pytestmark = pytest.mark.timeout(600)

MIX = Path(__file__).resolve().parents[2] / "search_spaces" / "eagle3-h100-mix.yaml"
#: (steps, top-k, draft tokens): the best chain by the objective, three deep trees, a short chain.
SETTINGS = [(4, 1, 5), (5, 4, 16), (5, 8, 24), (6, 8, 32), (3, 1, 4)]
ROUNDS = 6


def _params(steps: int, topk: int, draft: int) -> dict[str, Any]:
    return {"speculative_num_steps": steps, "speculative_eagle_topk": topk,
            "speculative_num_draft_tokens": draft, "cuda_graph_max_bs": 128,
            "mem_fraction_static": 0.85}  # fmt: skip


def _searched(tmp_path: Path) -> tuple[optuna.Study, SearchSpace, Oracle]:
    space, model = prepare(str(MIX), None)
    configs = tuple(_params(*s) for s in SETTINGS)
    confirm = dataclasses.replace(space.confirm, candidates=1, max_rounds=ROUNDS)
    space = dataclasses.replace(space, enqueued=configs, confirm=confirm)
    oracle = Oracle.for_space(model, space)
    return measured_study(space, oracle, tmp_path, "mix", informed=False), space, oracle


def _true(oracle: Oracle, space: SearchSpace, study: optuna.Study, trial: int, label: str) -> float:
    value = oracle.answer(space.config_for(study.trials[trial].params)).loads[label]["value"]
    assert value is not None
    return float(value)


def test_a_candidate_behind_by_the_objective_is_kept_and_chosen_at_its_load(
    tmp_path: Path,
) -> None:
    study, space, oracle = _searched(tmp_path)
    by_setting = {
        (t.params["speculative_num_steps"], t.params["speculative_eagle_topk"],
         t.params["speculative_num_draft_tokens"]): t.number
        for t in study.trials if t.user_attrs.get("role") != "baseline"
    }  # fmt: skip
    assert set(by_setting) == set(SETTINGS)

    def confirmation(evaluator: OracleEvaluator) -> Confirmation:
        return Confirmation(study, space, evaluator, folder=tmp_path / "confirm", gpus=1)

    verdict = confirmation(OracleEvaluator(oracle, seed=3, noise=0.02)).run()
    lines = "\n".join(verdict.lines())
    chain = f"trial {by_setting[(4, 1, 5)]}"
    assert verdict.kind == "pays" and verdict.leader is not None, lines
    assert verdict.leader.key == chain, lines
    arms = {a.key: a for a in verdict.arms}
    tree = arms[f"trial {by_setting[(5, 4, 16)]}"]
    # a third behind by the objective, yet the best at concurrency 1: kept, not dropped
    assert tree.dropped is None and tree.behind is not None, lines
    assert "c1" in tree.contends and "c64" not in tree.contends, lines
    assert tree.runs == verdict.rounds, lines
    assert f"kept for c1: behind {chain}" in lines
    assert {c.label for c in verdict.loads} == {"c1", "c16", "c64"}
    for choice in verdict.loads:
        # chosen among those that may still win there, each measured in every round
        assert choice.key in arms and arms[choice.key].dropped is None, lines
        assert choice.label in arms[choice.key].contends, lines
        assert choice.runs == verdict.rounds, lines
        best = max(_true(oracle, space, study, t, choice.label) for t in by_setting.values())
        assert choice.trial is not None
        assert _true(oracle, space, study, choice.trial, choice.label) >= 0.98 * best, lines
        assert all(r in arms and arms[r].dropped is None for r in choice.rivals), lines
    c1 = verdict.load_choice("c1")
    assert c1 is not None and c1.trial in {by_setting[s] for s in SETTINGS[1:4]}, lines
    # a point whose leader is not told apart keeps the rounds going to the budget
    if any(c.rivals for c in verdict.loads):
        assert verdict.rounds == ROUNDS, lines

    # run again (as `study confirm` does): nothing is measured again and the verdict stands
    before = list(study.user_attrs[STUDY_CONFIRMATION]["measurements"])
    again = confirmation(_Refusing(oracle, seed=3, noise=0.02)).run()
    assert study.user_attrs[STUDY_CONFIRMATION]["measurements"] == before
    assert again.loads == verdict.loads and again.arms == verdict.arms
    stored = Verdict.from_dict(study.user_attrs[STUDY_CONFIRMATION]["verdict"])
    assert stored is not None and stored.arms == verdict.arms and stored.loads == verdict.loads


class _Refusing(OracleEvaluator):
    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a configuration was measured again")
