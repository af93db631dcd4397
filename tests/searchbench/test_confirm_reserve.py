"""Confirmation under a latency limit the search's candidates all break: the reserve joins.

The search runs on the tiny space without a limit (so every configuration it measured is a
candidate), and the confirmation judges the same study under a limit that the best one breaks at
noise 0: each is dropped as not within it, the next best measured configuration joins in its
place, and the confirmation chooses one that keeps the limit; run again, it takes back the arms
that had joined and their runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.searchbench._benchmark import prepare
from autotune.searchbench._oracle import Oracle, OracleEvaluator
from autotune.space import ConstraintSpec, SearchSpace
from autotune.study._confirm import LIMIT_RESERVE, Confirmation
from autotune.study._record import STUDY_CONFIRMATION

from ._measured import measured_study
from .conftest import TINY

pytestmark = pytest.mark.timeout(600)

#: Distinct speculative settings, measured in this order by the search.
SETTINGS = [(steps, topk, draft) for steps in (1, 2, 3) for topk in (1, 2) for draft in (2, 4)]


def _searched(tmp_path: Path) -> tuple[optuna.Study, SearchSpace, Oracle]:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    space, model = prepare(str(path), None)
    configs = [
        {"speculative_num_steps": s, "speculative_eagle_topk": k,
         "speculative_num_draft_tokens": d, "cuda_graph_max_bs": 16,
         "mem_fraction_static": 0.84, "allreduce": "nccl"}
        for s, k, d in SETTINGS
        if d >= s or k > 1
    ]  # fmt: skip
    space = dataclasses.replace(space, enqueued=tuple(configs))
    oracle = Oracle.for_space(model, space)
    return measured_study(space, oracle, tmp_path, "reserve"), space, oracle


def _figure(oracle: Oracle, space: SearchSpace, params: dict[str, Any], metric: str) -> float:
    value = oracle.answer(space.config_for(params)).metrics[metric]
    assert value is not None
    return value


def test_candidates_over_the_limit_are_replaced_by_the_reserve(tmp_path: Path) -> None:
    study, space, oracle = _searched(tmp_path)
    measured = [
        t for t in study.get_trials(deepcopy=False)
        if t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get("role") != "baseline"
    ]  # fmt: skip
    ranked = sorted(measured, key=lambda t: (-(t.value or 0.0), t.number))
    count = 1  # the best alone: the limit below is one it breaks
    assert len(ranked) > count + 1
    # a ceiling on a latency figure that the best breaks and a later one keeps
    limit, metric = None, ""
    for metric in ("itl_p99_ms", "itl_p90_ms", "tpot_p99_ms"):
        over = min(_figure(oracle, space, t.params, metric) for t in ranked[:count])
        keeps = [
            v for t in ranked[count:] if (v := _figure(oracle, space, t.params, metric)) < over
        ]
        if keeps:
            limit = (over + max(keeps)) / 2
            break
    assert limit is not None, "no latency figure of the tiny space below the best one's"
    objective = dataclasses.replace(
        space.objective, constraints=(ConstraintSpec(metric, max=limit),)
    )
    limited = dataclasses.replace(
        space, objective=objective, confirm=dataclasses.replace(space.confirm, candidates=count)
    )

    def confirmation(evaluator: OracleEvaluator) -> Confirmation:
        return Confirmation(study, limited, evaluator, folder=tmp_path / "confirm", gpus=8)

    verdict = confirmation(OracleEvaluator(oracle, seed=1, noise=0.0)).run()
    chosen = verdict.choice
    assert chosen is not None, verdict.lines()
    params = study.trials[chosen].params
    assert _figure(oracle, space, params, metric) <= limit
    assert chosen not in [t.number for t in ranked[:count]]
    state = study.user_attrs[STUDY_CONFIRMATION]
    joined = len(state["arms"]) - 1 - count
    assert 1 <= joined <= LIMIT_RESERVE
    assert any(metric in (f.dropped or "") for f in verdict.arms), verdict.lines()

    # run again (as `study confirm` does): the joined arms and their runs are taken back, so
    # nothing is measured again and the verdict stands
    before = list(state["measurements"])
    again = confirmation(_Refusing(oracle, seed=1, noise=0.0)).run()
    assert study.user_attrs[STUDY_CONFIRMATION]["measurements"] == before
    assert again.choice == chosen


class _Refusing(OracleEvaluator):
    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a configuration was measured again")
