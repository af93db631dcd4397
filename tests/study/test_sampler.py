"""The study's sampler: crashes teach it, known failures are never proposed, no repeats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune.engines import SimEngine, create_engine
from autotune.engines.sglang._rules import check_rules
from autotune.space import load_space
from autotune.study._feasibility import Feasibility
from autotune.study._reparam import FILL, DraftFill
from autotune.study._sampler import AutotuneSampler
from autotune.study._view import StudyView

# Optuna's GP optimiser warns on a converged study; not what these tests are about
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "eagle3.yaml"


@pytest.fixture
def space() -> Any:
    return load_space(SPACE)


def sampler_for(space: Any, *, startup: int = 3, seed: int = 0) -> AutotuneSampler:
    feasibility = Feasibility(space, create_engine(space.engine))
    base = optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    return AutotuneSampler(
        base,
        space,
        feasibility,
        seed=seed,
        n_startup_trials=startup,
        constraints=lambda t: [-1.0 if t.user_attrs.get("outcome") == "ok" else 1.0],
    )


def run(study: optuna.Study, space: Any, n: int, judge: Any) -> list[dict[str, Any]]:
    """Ask ``n`` trials; ``judge(params)`` gives (outcome, value) as a server would."""
    asked = []
    for _ in range(n):
        trial = study.ask()
        p = space.suggest(trial)
        asked.append(p)
        outcome, value = judge(p)
        trial.set_user_attr("outcome", outcome)
        if value is None:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, value)
    return asked


def test_proposals_are_runnable_and_never_repeat(space: Any) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = sampler_for(space)
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def judge(p: dict[str, Any]) -> tuple[str, float | None]:
        return "ok", float(p["speculative_num_steps"]) + p["mem_fraction_static"]

    asked = run(study, space, 14, judge)
    keys = [tuple(sorted(p.items())) for p in asked]
    assert len(set(keys)) == len(keys)
    for p in asked:
        config = space.config_for(p)
        assert check_rules(config) is None
        assert sampler.feasibility is not None and sampler.feasibility.check(config, p) is None


def test_a_crashed_region_is_not_proposed_again(space: Any) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = sampler_for(space, seed=3)
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def judge(p: dict[str, Any]) -> tuple[str, float | None]:
        if p["mem_fraction_static"] < 0.80:
            return "oom_kv_pool", None
        return "ok", 100.0 - abs(p["mem_fraction_static"] - 0.85) * 100

    asked = []
    for _ in range(16):
        assert sampler.feasibility is not None
        sampler.feasibility.learn(
            [
                (t.number, t.params, t.user_attrs["outcome"])
                for t in study.get_trials(states=(TrialState.PRUNED,))
            ]
        )
        asked += run(study, space, 1, judge)
    crashed = [i for i, p in enumerate(asked) if p["mem_fraction_static"] < 0.80]
    assert crashed  # the region was found once
    for i in crashed:
        fraction = asked[i]["mem_fraction_static"]
        later = [p for p in asked[i + 1 :] if p["mem_fraction_static"] <= fraction]
        assert not later  # every fraction at or below a crashed one is refused before launch
    assert len(crashed) <= 3


def test_the_view_shows_crashes_as_infeasible_and_hides_the_baseline(space: Any) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({}, user_attrs={"role": "baseline"})
    baseline = study.ask()
    baseline.set_user_attr("outcome", "ok")
    study.tell(baseline, 50.0)
    good = dict(space.enqueued[0])
    bad = {**good, "mem_fraction_static": 0.75}
    for p, outcome, value in ((good, "ok", 70.0), (bad, "oom_kv_pool", None)):
        study.enqueue_trial(p)
        trial = study.ask()
        space.suggest(trial)
        trial.set_user_attr("outcome", outcome)
        study.tell(trial, value, state=TrialState.COMPLETE if value else TrialState.PRUNED)
    view = StudyView(study, space, lambda t: [-1.0 if t.user_attrs.get("outcome") == "ok" else 1.0])
    trials = view._get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) == 2  # the baseline is not in the space
    crashed = next(t for t in trials if t.constraints and max(t.constraints.values()) > 0)
    measured = next(t for t in trials if t is not crashed)
    assert crashed.value == 70.0  # the worst measured value
    assert measured.value == 70.0 and max(measured.constraints.values()) < 0
    assert FILL in crashed.params and "speculative_num_draft_tokens" not in crashed.params


@pytest.mark.parametrize(
    ("steps", "topk", "draft"), [(2, 1, 3), (3, 2, 5), (2, 4, 9), (5, 4, 16), (1, 2, 3)]
)
def test_draft_fill_round_trips(space: Any, steps: int, topk: int, draft: int) -> None:
    fill = DraftFill(space)
    p = {**dict(space.enqueued[0]), "speculative_num_steps": steps,
         "speculative_eagle_topk": topk, "speculative_num_draft_tokens": draft}  # fmt: skip
    model = fill.to_model(p)
    assert 0.0 <= model[FILL] <= 1.0
    assert fill.from_model(model) == p


def test_every_draft_fill_is_a_configuration_sglang_runs(space: Any) -> None:
    fill = DraftFill(space)
    for steps in range(1, 7):
        for topk in (1, 2, 4, 8):
            for share in (0.0, 0.3, 0.77, 1.0):
                p = fill.from_model({**dict(space.enqueued[0]), "speculative_num_steps": steps,
                                     "speculative_eagle_topk": topk, FILL: share})  # fmt: skip
                assert check_rules(space.config_for(p)) is None, p


class _ChainOnly(SimEngine):
    """An engine whose draft tree holds one token per step whatever the top-k."""

    def draft_token_bounds(self, steps: int, topk: int) -> tuple[int, int]:
        return steps + 1, steps + 1


def test_repairs_and_draft_fill_follow_the_engines_draft_tree(space: Any) -> None:
    sglang_like = sampler_for(space)
    p = {**dict(space.enqueued[0]), "speculative_num_steps": 3, "speculative_eagle_topk": 4,
         "speculative_num_draft_tokens": 16}  # fmt: skip
    lo, hi = sglang_like.engine.draft_token_bounds(3, 4)
    assert lo <= sglang_like.repair(p)["speculative_num_draft_tokens"] <= hi
    engine = _ChainOnly(space.engine)
    chain = AutotuneSampler(optuna.samplers.RandomSampler(seed=0), space, None, engine=engine)
    assert chain.repair(p)["speculative_num_draft_tokens"] == 4
    model = {k: v for k, v in p.items() if k != "speculative_num_draft_tokens"}
    back = DraftFill(space, engine).from_model({**model, FILL: 0.9})
    assert back["speculative_num_draft_tokens"] == 4


def test_what_a_start_measures_ignores_the_settled_knobs(space: Any) -> None:
    sampler = sampler_for(space)
    base = {
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 2,
        "speculative_num_draft_tokens": 6,
        "cuda_graph_max_bs": 16,
        "mem_fraction_static": 0.8,
        "allreduce": "nccl",
    }
    # the space runs at concurrency 4: every graph batch here captures it
    assert sampler.measures(base) == sampler.measures(
        {**base, "cuda_graph_max_bs": 512, "mem_fraction_static": 0.9}
    )
    for knob, other in (
        ("speculative_num_steps", 4),
        ("speculative_eagle_topk", 4),
        ("speculative_num_draft_tokens", 7),
        ("allreduce", "custom"),
    ):
        assert sampler.measures(base) != sampler.measures({**base, knob: other})


def test_a_graph_batch_counts_where_it_changes_which_load_runs_in_graphs() -> None:
    space = load_space(SPACE.parent / "eagle3-h100-mix.yaml")  # concurrency 1, 16 and 64
    sampler = sampler_for(space)
    base = {
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "mem_fraction_static": 0.8,
    }

    def measures(batch: int) -> Any:
        return sampler.measures({**base, "cuda_graph_max_bs": batch})

    assert measures(64) == measures(256)
    assert measures(16) == measures(32)
    assert measures(8) != measures(16) != measures(64)


def test_no_proposal_measures_a_measured_combination_again(space: Any) -> None:
    """A model that sees only the memory fraction matter keeps asking for the best speculative
    setting with another fraction; each such proposal moves to an unmeasured one instead."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = sampler_for(space, seed=1)
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def judge(p: dict[str, Any]) -> tuple[str, float | None]:
        return "ok", 10.0 * p["mem_fraction_static"] + 0.01 * p["speculative_num_steps"]

    asked = run(study, space, 16, judge)
    measured = [sampler.measures(p) for p in asked]
    assert len(set(measured)) == len(measured)
