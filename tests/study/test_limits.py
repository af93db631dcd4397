"""Latency limits and several objectives in real studies (``autotune study start`` against the
simulated server): a trial over a limit is measured, COMPLETE and infeasible, the report's best
is within the limits and names the violations; a two-objective study reports its Pareto front."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from ._helpers import finished_trials, run_cli, small_space, start_study

pytestmark = pytest.mark.timeout(600)

BASE = {"cuda_graph_max_bs": 32, "mem_fraction_static": 0.85}
#: A one-step chain: TPOT 4.4 ms on the H100 profile at concurrency 1 (the baseline's: 6.3 ms).
CHAIN = {
    **BASE,
    "speculative_num_steps": 1,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 2,
}
#: A deep tree: TPOT 2.8 ms, the highest throughput of the three.
DEEP = {
    **BASE,
    "speculative_num_steps": 5,
    "speculative_eagle_topk": 8,
    "speculative_num_draft_tokens": 32,
}


def _objective(trial: Any) -> dict[str, Any]:
    return {k: v for k, v in trial.params.items() if k in DEEP}


def test_a_trial_over_a_limit_is_measured_infeasible_and_not_the_best(tmp_path: Path) -> None:
    limit = "tpot_p99_ms <= 3.6"
    space = small_space(
        tmp_path / "spaces",
        configs=[CHAIN, DEEP],
        edit={
            "objective": {
                "metric": "output_tok_s",
                "constraints": [{"metric": "tpot_p99_ms", "max": 3.6}],
            }
        },
    )
    run = start_study(space, "limits", 4, tmp_path / "studies")
    trials = finished_trials(run.load())
    assert len(trials) == 4
    by_role = {t.user_attrs["role"]: t for t in trials if t.user_attrs["role"] == "baseline"}
    chain = next(t for t in trials if _objective(t) == CHAIN)
    deep = next(t for t in trials if _objective(t) == DEEP)
    for over in (by_role["baseline"], chain):
        # measured, recorded as a measurement, and over the limit: not a crash
        assert over.state == TrialState.COMPLETE and over.user_attrs["outcome"] == "ok"
        assert over.user_attrs["tpot_p99_ms"] > 3.6
        assert over.constraints["starts"] <= 0 and over.constraints[limit] > 0
    assert deep.state == TrialState.COMPLETE and deep.constraints[limit] <= 0
    assert deep.user_attrs["tpot_p99_ms"] <= 3.6
    # every figure a limit may name is on the trial
    for name in ("ttft_median_ms", "tpot_mean_ms", "itl_p90_ms", "e2e_p99_ms", "total_tok_s"):
        assert isinstance(deep.user_attrs[name], float), name

    report = run_cli("study", "report", *run.cli_args(), "--json")
    assert report.returncode == 0, report.describe()
    data = json.loads(report.stdout)
    feasible = [t for t in trials if t.state == TrialState.COMPLETE and t.constraints[limit] <= 0]
    best = max(feasible, key=lambda t: t.value)
    assert data["best"]["number"] == best.number
    assert data["best"]["feasible"] is True
    over = sum(1 for t in trials if t.state == TrialState.COMPLETE and t.constraints[limit] > 0)
    assert over >= 2
    assert data["violations"] == {limit: over}
    text = run_cli("study", "report", *run.cli_args())
    assert f"measured over a limit (left out of the best): {limit}: {over} trials" in text.stdout


def _dominates(a: list[float], b: list[float], signs: list[float]) -> bool:
    pairs = [(s * x, s * y) for s, x, y in zip(signs, a, b, strict=True)]
    return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)


def test_a_two_objective_study_reports_its_pareto_front(tmp_path: Path) -> None:
    space = small_space(
        tmp_path / "spaces",
        configs=[CHAIN, DEEP],
        edit={"objective": {"metrics": ["output_tok_s", "ttft_p99_ms"]}},
    )
    run = start_study(space, "front", 6, tmp_path / "studies")
    study = run.load()
    assert study.metric_names == ["output_tok_s", "ttft_p99_ms"]
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    trials = finished_trials(study)
    measured = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(trials) == 6 and len(measured) >= 4
    for t in measured:
        assert len(t.values) == 2
        assert t.values[1] == pytest.approx(t.user_attrs["ttft_p99_ms"], rel=1e-3)
    sampled = [t for t in trials if t.user_attrs["role"] == "search"]
    assert sampled, "the sampler proposed no trial of the two-objective study"

    report = run_cli("study", "report", *run.cli_args(), "--json")
    assert report.returncode == 0, report.describe()
    data = json.loads(report.stdout)
    assert data["metrics"] == ["output_tok_s", "ttft_p99_ms"]
    front = data["pareto_front"]
    assert front
    signs = [1.0, -1.0]
    values = {t.number: list(t.values) for t in measured}
    numbers = [row["number"] for row in front]
    for row in front:
        assert row["values"] == pytest.approx(values[row["number"]])
        # no member of the front is dominated by any measured trial
        assert not any(_dominates(v, row["values"], signs) for v in values.values())
    # every measured trial left out is dominated by a member of the front
    for number, v in values.items():
        if number not in numbers:
            assert any(_dominates(values[n], v, signs) for n in numbers), number
    # the speed-up is of the first objective, the best the front's best by it
    assert data["best"]["number"] == max(numbers, key=lambda n: values[n][0])
    text = run_cli("study", "report", *run.cli_args())
    assert f"Pareto front (maximize output_tok_s, minimize ttft_p99_ms): {len(front)} trials" in (
        text.stdout
    )
