"""The search benchmark under latency limits: the optimum within them, the incumbent chosen
among trials measured within them, violations booked per half of a study, and a short run of
``autotune bench search`` on a tiny space with a limit that binds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune._slo import RequestLimits
from autotune.cli import main
from autotune.searchbench import Oracle, StudyTrace, TrialTrace, score_study, summarise
from autotune.searchbench._benchmark import prepare
from autotune.searchbench._optimum import find_optimum, grid
from autotune.space import SearchSpace
from autotune.study._setup import make_engine

from .conftest import TINY


def _oracle(path: Path) -> tuple[SearchSpace, Oracle]:
    space, model = prepare(str(path), None)
    return space, Oracle.for_space(model, space)


def _limited(tmp_path: Path, limit: float) -> Path:
    path = tmp_path / "tiny-limited.yaml"
    text = TINY.replace(
        "objective: {metric: output_tok_s}",
        f"objective: {{metric: output_tok_s, constraints: [{{metric: itl_p99_ms, max: {limit}}}]}}",
    )
    assert text != TINY
    path.write_text(text)
    return path


def _free_itl(tmp_path: Path) -> tuple[float, float]:
    """The unconstrained optimum's ITL p99 and the lowest ITL p99 of the tiny space."""
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    space, oracle = _oracle(path)
    opt = find_optimum(space, oracle, make_engine(space))
    best = oracle.answer(space.config_for(opt.params)).metrics["itl_p99_ms"]
    lowest = min(
        v
        for p in grid(space)
        if (v := oracle.answer(space.config_for(p)).metrics.get("itl_p99_ms")) is not None
    )
    assert best is not None
    return best, lowest


def test_the_optimum_is_the_best_within_the_limits(tmp_path: Path) -> None:
    free, lowest = _free_itl(tmp_path)
    assert lowest < free, "the tiny space has no configuration with a lower ITL tail"
    limit = round((free + lowest) / 2, 4)
    space, oracle = _oracle(_limited(tmp_path, limit))
    opt = find_optimum(space, oracle, make_engine(space))
    assert opt.unconstrained_value is not None and opt.value < opt.unconstrained_value
    assert opt.violating and opt.violating > 0
    best = oracle.answer(space.config_for(opt.params))
    itl = best.metrics["itl_p99_ms"]
    assert itl is not None and itl <= limit
    assert oracle.feasible(space.config_for(opt.params))


def test_the_incumbent_is_chosen_among_trials_within_the_limits() -> None:
    trials = (
        TrialTrace(0, "baseline", "ok", 50.0, 50.0, 10.0, violated=True),
        TrialTrace(1, "search", "ok", 120.0, 118.0, 10.0, violated=True, true_feasible=False),
        TrialTrace(2, "search", "ok", 90.0, 92.0, 10.0, true_feasible=True),
        TrialTrace(3, "search", "ok", 95.0, 96.0, 10.0, true_feasible=False),  # lucky
    )
    score = score_study(StudyTrace("x", 0, trials), 100.0, 1, maximize=True)
    # trial 1 measured best but over the limit: never the incumbent
    assert score.history == (0.0, 0.0, 0.92, 0.96)
    assert score.final_feasible is False
    assert score.violations == (2, 0) and score.halves == (2, 2)
    assert score.violation_shares() == (1.0, 0.0)
    other = score_study(StudyTrace("x", 1, trials[:3]), 100.0, 1, maximize=True)
    assert other.final_feasible is True
    summary = summarise([score, other])
    assert summary.final_feasible == 1
    assert summary.violation_share_first_half == pytest.approx((1.0 + 1.0) / 2)


def test_bench_search_prints_what_the_limits_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    free, lowest = _free_itl(tmp_path)
    space = _limited(tmp_path, round((free + lowest) / 2, 4))
    out = tmp_path / "out"
    code = main(
        ["bench", "search", "--space", str(space), "--samplers", "default", "--seeds", "2",
         "--budget", "8", "--out", str(out)]
    )  # fmt: skip
    run = capsys.readouterr()
    assert code == 0, run.err
    assert "constraints: itl_p99_ms <=" in run.out
    assert "(the limit binds)" in run.out
    assert "best meets at noise 0" in run.out
    assert "default: the confirmed choice meets the limits at noise 0 in" in run.out
    data = json.loads(next(out.glob("*.json")).read_text())
    default = data["strategies"]["default"]
    assert 0 <= default["final_feasible"] <= 2
    assert 0.0 <= default["violation_share_first_half"] <= 1.0
    assert data["optimum"]["unconstrained_value"] > data["optimum"]["value"]


def test_the_oracle_counts_goodput_from_the_models_requests(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    space, model = prepare(str(path), None)
    config = space.baseline_config()
    verdict = model.evaluate(config, space.workload)
    assert verdict.benchmark_s and len(verdict.requests) == space.workload.num_prompts
    ttfts = sorted(r[0] for r in verdict.requests)
    # half the requests within the TTFT limit, by the model's own per-request figures
    limit_s = ttfts[len(ttfts) // 2 - 1]
    limits = RequestLimits(ttft_ms=1000 * limit_s)
    answer = Oracle(model, space.workload, limits=limits).answer(config)
    good = sum(1 for r in verdict.requests if r[0] <= limit_s)
    assert 0 < good < len(ttfts)
    assert answer.metrics["goodput"] == pytest.approx(good / verdict.benchmark_s)
    loose = Oracle(model, space.workload, limits=RequestLimits(ttft_ms=1e9)).answer(config)
    assert loose.metrics["goodput"] == pytest.approx(loose.metrics["request_throughput"])
    # a multi-objective answer carries every objective's value
    two = Oracle(model, space.workload, metrics=("output_tok_s", "goodput"), limits=limits)
    both = two.answer(config)
    assert both.values == (both.metrics["output_tok_s"], both.metrics["goodput"])
