"""GPU-time accounting and progress towards the optimum."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.searchbench import (
    Optimum,
    Oracle,
    SearchBenchResult,
    StudyTrace,
    TrialTrace,
    format_table,
    score_study,
    summarise,
)
from autotune.searchbench._benchmark import prepare
from autotune.searchbench._bookkeeping import ConfirmTrace
from autotune.searchbench._oracle import STOP_S


def trace(*trials: TrialTrace) -> StudyTrace:
    return StudyTrace("x", 0, trials)


def test_hours_and_trials_to_the_optimum_are_counted_to_the_reaching_trial() -> None:
    t = trace(
        TrialTrace(0, "baseline", "ok", 100.0, 100.0, 1000.0),  # never the incumbent
        TrialTrace(1, "search", "oom_kv_pool", None, None, 600.0),
        TrialTrace(2, "search", "refused", None, None, 0.0),
        TrialTrace(3, "search", "ok", 96.0, 95.0, 800.0),
        TrialTrace(4, "search", "ok", 99.0, 99.0, 800.0),
        TrialTrace(5, "search", "ok", 98.5, 100.0, 800.0),  # measured lower: not picked
    )
    score = score_study(t, 100.0, 8, maximize=True)
    assert score.history == (0.0, 0.0, 0.0, 0.95, 0.99, 0.99)
    assert score.trials_to[0.95] == 4
    assert score.trials_to[0.98] == 5
    assert score.gpu_hours_to[0.98] == pytest.approx((1000 + 600 + 0 + 800 + 800) * 8 / 3600)
    assert score.gpu_hours == pytest.approx(4000 * 8 / 3600)
    assert score.crash_share == pytest.approx(600 / 4000)
    assert (score.crashes, score.refused) == (1, 1)


def test_minimising_studies_invert_the_share() -> None:
    t = trace(TrialTrace(0, "search", "ok", 20.0, 20.0, 10.0))
    assert score_study(t, 10.0, 1, maximize=False).history == (0.5,)


def test_summary_takes_medians_and_treats_never_as_not_reached() -> None:
    reached = trace(TrialTrace(0, "search", "ok", 100.0, 100.0, 3600.0))
    missed = trace(TrialTrace(0, "search", "ok", 50.0, 50.0, 3600.0))
    scores = [score_study(t, 100.0, 1, maximize=True) for t in (reached, missed, missed)]
    summary = summarise(scores)
    assert summary.median_trials_to_98 is None
    assert summary.reached_98 == pytest.approx(1 / 3)
    summary = summarise(scores[:1] * 2 + scores[1:2])
    assert summary.median_trials_to_98 == 1


def test_a_trial_costs_its_startup_benchmark_and_stop(tiny_space: Path) -> None:
    space, model = prepare(str(tiny_space), None)
    oracle = Oracle(model, space.workload)
    ok = space.baseline_config()
    crash = space.config_for(
        {
            "speculative_num_steps": 2,
            "speculative_eagle_topk": 2,
            "speculative_num_draft_tokens": 4,
            "cuda_graph_max_bs": 16,
            "mem_fraction_static": 0.74,
            "allreduce": "nccl",
        }
    )
    measured = oracle.answer(ok)
    crashed = oracle.answer(crash)
    assert crashed.status == "oom_kv_pool" and crashed.value is None
    plan = model.plan_startup(crash)
    assert crashed.seconds == pytest.approx(plan.duration_s + STOP_S)
    full = model.plan_startup(ok).duration_s
    assert crashed.startup_s < full  # a KV-pool crash is decided before graph capture
    assert measured.seconds == pytest.approx(full + measured.benchmark_s + STOP_S)
    noisy = oracle.measure(ok, noise=0.05, rng=random.Random(1))
    assert noisy.value != measured.value and noisy.seconds == measured.seconds


def test_the_command_writes_table_json_and_figure(
    tiny_space: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(
        ["bench", "search", "--space", str(tiny_space),
         "--samplers", "default,random,grid,sglang-auto", "--seeds", "2", "--budget", "6",
         "--out", str(out), "--json"]
    )  # fmt: skip
    done = capsys.readouterr()
    assert code == 0, done.err
    data = json.loads(done.out)
    assert set(data["strategies"]) == {"default", "random", "grid", "sglang-auto"}
    for summary in data["strategies"].values():
        assert {"median_trials_to_98", "median_gpu_hours_to_98", "median_crash_share"} <= set(
            summary
        )
    # setting nothing on the seed system: the automatic fraction does not fit the draft head
    assert data["strategies"]["sglang-auto"]["median_final"] == 0.0
    # every study is confirmed; a space without limits says nothing of them
    for summary in data["strategies"].values():
        assert sum(summary["verdicts"].values()) == 2
    text = (out / "search-rtxpro6000x8-kimi-k2.5.txt").read_text()
    assert "confirmation: the best candidates" in text and "meets the limits" not in text
    names = {p.name for p in out.iterdir()}
    assert "search-rtxpro6000x8-kimi-k2.5.json" in names
    assert "search-rtxpro6000x8-kimi-k2.5.html" in names


def test_an_unknown_strategy_is_refused(
    tiny_space: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "search", "--space", str(tiny_space), "--samplers", "default,annealing"])
    done = capsys.readouterr()
    assert code != 0
    assert "unknown strategy 'annealing'" in done.err
    assert "Traceback" not in done.err


def _confirmed(kind: str, choice: int | None, leader: int | None) -> StudyTrace:
    from autotune.searchbench._bookkeeping import ConfirmTrace

    trials = (
        TrialTrace(0, "baseline", "ok", 100.0, 100.0, 1000.0),
        TrialTrace(1, "search", "ok", 104.0, 99.0, 800.0),  # lucky: measured high, truly slower
        TrialTrace(2, "search", "ok", 102.0, 103.0, 800.0),
    )
    return StudyTrace("x", 0, trials, ConfirmTrace(kind, choice, leader, 2.5, 12))


def test_the_confirmed_choice_is_judged_at_noise_0_and_its_gpu_hours_count() -> None:
    right = score_study(_confirmed("pays", 2, 2), 104.0, 8, maximize=True)
    assert right.confirmed == pytest.approx(103.0 / 104.0)
    assert not right.wrong_pays
    assert right.gpu_hours == pytest.approx(2600 * 8 / 3600 + 2.5)
    assert right.confirm_gpu_hours == 2.5
    # "pays" for a configuration truly slower than no speculation is wrong
    wrong = score_study(_confirmed("pays", 1, 1), 104.0, 8, maximize=True)
    assert wrong.wrong_pays and wrong.confirmed == pytest.approx(99.0 / 104.0)
    # "noise": no speculation is the choice, judged against the better of optimum and baseline
    off = score_study(_confirmed("noise", None, 1), 98.0, 8, maximize=True)
    assert off.confirmed == pytest.approx(1.0) and not off.wrong_pays
    summary = summarise([right, wrong, off])
    assert summary.verdicts == {"noise": 1, "pays": 2}
    assert summary.wrong_pays == 1
    assert summary.confirmed_98 == pytest.approx(2 / 3)


def test_each_study_has_a_row_and_the_seeds_that_missed_are_named() -> None:
    """The JSON keeps one row per study (where it reached 98%, where it ended, its verdict);
    the table names the seeds of a strategy that never reached 98% when others did."""

    def study(seed: int, *values: float, verdict: str = "pays") -> StudyTrace:
        trials = [TrialTrace(0, "baseline", "ok", 90.0, 90.0, 600.0)]
        trials += [TrialTrace(i + 1, "search", "ok", v, v, 600.0) for i, v in enumerate(values)]
        return StudyTrace("default", seed, tuple(trials), ConfirmTrace(verdict, 1, 1, 1.0, 4))

    def lucky(seed: int) -> StudyTrace:
        """A study that measured the optimum itself low, below a lucky 96.5% measured high."""
        trials = [TrialTrace(0, "baseline", "ok", 90.0, 90.0, 600.0)]
        trials += [
            TrialTrace(1, "search", "ok", 101.0, 96.5, 600.0),
            TrialTrace(2, "search", "ok", 97.0, 100.0, 600.0),
        ]
        return StudyTrace("default", seed, tuple(trials), ConfirmTrace("pays", 2, 2, 1.0, 4))

    traces = [
        study(0, 95.0, 99.0),
        study(1, 94.0, 96.5, 97.0, verdict="noise"),
        study(2, 99.0),
        lucky(3),
    ]
    scores = tuple(score_study(t, 100.0, 8, maximize=True) for t in traces)
    result = SearchBenchResult(
        "box", "space.yaml", 40, 2, Optimum(100.0, {}, 10), (summarise(scores),), scores, 1.0
    )
    rows = result.to_dict()["studies"]
    assert [(r["strategy"], r["seed"], r["trials"]) for r in rows] == [
        ("default", 0, 3),
        ("default", 1, 4),
        ("default", 2, 2),
        ("default", 3, 3),
    ]
    assert [r["trials_to_98"] for r in rows] == [3, None, 2, None]
    # the first trial that measured a configuration within 98%, whether it led or not
    assert [r["trials_to_find_98"] for r in rows] == [3, None, 2, 3]
    assert result.summaries[0].found_98 == pytest.approx(0.75)
    assert [r["final"] for r in rows] == [0.99, 0.97, 0.99, 0.965]
    assert [r["verdict"] for r in rows] == ["pays", "noise", "pays", "pays"]
    table = format_table(result)
    assert "default never reached 98% in: seed 1 (97.0% after 4 trials, verdict noise); " in table
    # a seed whose search found a configuration within 98% that its noise ranked below another
    assert (
        "seed 3 (96.5% after 3 trials, verdict pays; it measured one within 98% in 3 trials, "
        "lower than a luckier one)" in table
    )
    assert "seed 0 (" not in table
    lines = table.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("strategy"))
    header, row = lines[at], lines[at + 1]
    # reached 98% in 2 of 4 seeds; found one within 98% in 3 of 4, each under its heading
    for heading, figure in (("reached 98%", "50%"), ("found 98%", "75%")):
        end = header.index(heading) + len(heading)
        assert row[:end].endswith(" " + figure), (heading, header, row)
    # a strategy that reached 98% in every seed (or in none) gets no such line
    everyone = dataclasses.replace(result, summaries=(summarise(scores[:1]),), scores=scores[:1])
    assert "never reached" not in format_table(everyone)
