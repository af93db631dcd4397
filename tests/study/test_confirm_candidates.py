"""The confirmation's candidates: the best measured few, and the twin's best where it ranked them.

A study's search measures each configuration once; with run-to-run noise the best few measured
are those that ran lucky, and the best of all may have run unlucky. The twin sampler's ranking
of the measured configurations (:data:`STUDY_TWIN_RANKING`) weighs the measurements around each
one as well; its best joins the confirmation where the measurements left it out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from autotune.space import SearchSpace, load_space
from autotune.study._confirm import candidates
from autotune.study._record import STUDY_TWIN_RANKING

SPACE = """
name: cands
engine:
  kind: sim
  model_path: moonshotai/Kimi-K2.5
  draft_model_path: /data/eagle3/kimi-k2.5-eagle3
  tp_size: 8
  sim: {profile: rtxpro6000x8-kimi-k2.5}
workload: {name: short, concurrency: 4, num_prompts: 4, input_len: 256, output_len: 64}
objective: {metric: METRIC, direction: DIRECTION}
fixed:
  speculative_algorithm: EAGLE3
  speculative_eagle_topk: 1
  cuda_graph_max_bs: 16
  mem_fraction_static: 0.84
parameters:
  speculative_num_steps: {type: int, low: 1, high: 5}
  speculative_num_draft_tokens: {type: int, low: 2, high: 6}
enqueue:
  baseline: {}
"""


def _study(
    tmp_path: Path, direction: str, figures: list[float]
) -> tuple[optuna.Study, SearchSpace]:
    """A study whose baseline and search trials (steps 1.., draft tokens one more) measured
    ``figures``, in order."""
    metric = "output_tok_s" if direction == "maximize" else "tpot_median_ms"
    path = tmp_path / "cands.yaml"
    path.write_text(SPACE.replace("METRIC", metric).replace("DIRECTION", direction))
    space = load_space(path)
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction=direction)
    study.add_trial(
        optuna.trial.create_trial(
            params={}, distributions={}, value=50.0,
            user_attrs={"role": "baseline", "outcome": "ok"},
        )
    )  # fmt: skip
    for i, figure in enumerate(figures):
        params: dict[str, Any] = {
            "speculative_num_steps": i + 1,
            "speculative_num_draft_tokens": i + 2,
        }
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions={k: CategoricalDistribution([v]) for k, v in params.items()},
                value=figure,
                user_attrs={"role": "search", "outcome": "ok"},
            )
        )
    return study, space


def _arms(study: optuna.Study, space: SearchSpace, count: int) -> list[str]:
    return [a.key for a in candidates(study, space, count)]


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_twins_best_joins_the_best_measured(tmp_path: Path, direction: str) -> None:
    # trials 1-5 measured these; trial 1 the best, trial 5 the worst, either direction
    figures = [70.0, 69.0, 68.0, 67.0, 60.0]
    if direction == "minimize":
        figures = [100.0 - f for f in figures]
    study, space = _study(tmp_path, direction, figures)
    assert _arms(study, space, 2) == ["baseline", "trial 1", "trial 2"]
    # the twin values trial 4 best and trial 1 next: trial 4 joins, after the measured best
    study.set_user_attr(STUDY_TWIN_RANKING, {"trials": [0, 1, 2, 3, 4, 5], "ranking": [4, 1, 3]})
    assert _arms(study, space, 2) == ["baseline", "trial 1", "trial 2", "trial 4"]
    assert [a.twin for a in candidates(study, space, 2)] == [False, False, False, True]
    # its first two not among the candidates: only the first of them joins
    study.set_user_attr(STUDY_TWIN_RANKING, {"trials": [0, 1, 2, 3, 4, 5], "ranking": [5, 3, 1]})
    assert _arms(study, space, 2) == ["baseline", "trial 1", "trial 2", "trial 5"]
    # its best few are the measured best few: nothing joins
    study.set_user_attr(STUDY_TWIN_RANKING, {"trials": [0, 1, 2, 3, 4, 5], "ranking": [2, 1, 5]})
    assert _arms(study, space, 2) == ["baseline", "trial 1", "trial 2"]
    # only its best `count` count: the third of its ranking is not one of them
    study.set_user_attr(STUDY_TWIN_RANKING, {"trials": [0, 1, 2, 3, 4, 5], "ranking": [1, 2, 5]})
    assert _arms(study, space, 2) == ["baseline", "trial 1", "trial 2"]


def test_a_ranking_of_another_shape_or_of_other_trials_is_ignored(tmp_path: Path) -> None:
    study, space = _study(tmp_path, "maximize", [70.0, 69.0, 68.0])
    trials = [0, 1, 2, 3]
    study.set_user_attr(STUDY_TWIN_RANKING, {"trials": trials, "ranking": [3]})
    assert _arms(study, space, 1) == ["baseline", "trial 1", "trial 3"]
    for kept in (
        ["3"],
        {"trials": trials, "ranking": "3"},
        {"trials": trials, "ranking": ["3", None]},
        {"trials": trials, "ranking": [0]},  # the baseline is no candidate
        {"trials": [0, 1, 2], "ranking": [3]},  # ranked before trial 3 was measured
        {"ranking": [3]},
    ):
        study.set_user_attr(STUDY_TWIN_RANKING, kept)
        assert _arms(study, space, 1) == ["baseline", "trial 1"], kept
