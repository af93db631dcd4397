"""optuna-dashboard as a user sees it: ``autotune dashboard`` served by a real process, its pages
rendered by headless Chromium (see ``_browser``), and the rendered DOM read.

A study that ``autotune study start`` ran against the simulated server shows its objective under
the metric's name, every trial's outcome and speed-up in the trials table, and its space file as a
study artifact (not as a user attribute); a study of two objectives shows its Pareto front.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from study._helpers import StudyRun, run_cli, small_space, start_study

from ._browser import Page, find_chromium, render, serve_dashboard


@pytest.fixture(scope="module")
def chromium() -> str:
    return find_chromium()


@pytest.fixture(scope="module")
def seed_pages(chromium: str, seed_study: StudyRun) -> tuple[Page, Page, Page]:
    """The seed study's top page, its trials table (Smart Selection) and the trial list's pages
    of trials 0 to 4."""
    with serve_dashboard(*seed_study.cli_args()) as (url, _):
        top = render(chromium, f"{url}/dashboard/studies/1")
        table = render(chromium, f"{url}/dashboard/studies/1/smartSelection")
        listed = render(chromium, f"{url}/dashboard/studies/1/trials?numbers=0,1,2,3,4")
    return top, table, listed


def test_the_objective_is_shown_under_its_metric_name(seed_pages: tuple[Page, Page, Page]) -> None:
    top, _, _ = seed_pages
    history = [title for title, ids in top.ytitles if "plot-history" in ids]
    assert history == ["output_tok_s"], top.ytitles
    assert "Objective 0" not in top.text


def test_each_trial_s_outcome_and_speedup_are_in_the_trials_table(
    seed_pages: tuple[Page, Page, Page], seed_study: StudyRun
) -> None:
    _, table, _ = seed_pages
    heads, rows = table.table_with("UserAttribute outcome")
    assert "UserAttribute speedup" in heads
    trials = seed_study.load().trials
    assert sorted(int(r["Number"]) for r in rows) == [t.number for t in trials]
    by_number = {int(r["Number"]): r for r in rows}
    outcomes = set()
    for trial in trials:
        row = by_number[trial.number]
        assert row["UserAttribute outcome"] == trial.user_attrs["outcome"], row
        outcomes.add(row["UserAttribute outcome"])
        speedup = trial.user_attrs.get("speedup")
        if speedup is not None:
            assert float(row["UserAttribute speedup"]) == pytest.approx(speedup), row
        else:
            assert row["UserAttribute speedup"] == "", row
    # measured trials, a crash at start-up, a refusal before launch, a CUDA-graph crash
    assert {"ok", "oom_kv_pool", "infeasible", "oom_cuda_graph"} <= outcomes
    assert by_number[0]["UserAttribute speedup"] == "1.0"


def test_the_trial_list_shows_each_trial_s_verdict_first(
    seed_pages: tuple[Page, Page, Page], seed_study: StudyRun
) -> None:
    _, _, listed = seed_pages
    text = listed.text
    starts = [text.index(f"Trial {n} (trial_id=") for n in range(5)]
    pages = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
    trials = seed_study.load().trials
    for trial, page in zip(trials[:5], pages, strict=True):
        attrs = trial.user_attrs
        note = page[page.index("Note") : page.index("Value")]  # the note comes before the rest
        assert attrs["outcome"] in note, (trial.number, page[:600])
        if attrs.get("speedup") is not None and attrs["role"] != "baseline":
            assert f"x{attrs['speedup']:.2f} over the baseline" in note, note
    assert "the baseline" in pages[0] and "oom_kv_pool after" in pages[2]
    assert "RuntimeError" in pages[2] and "refused before launch" in pages[3]


def test_the_space_file_is_a_study_artifact_not_an_attribute(
    seed_pages: tuple[Page, Page, Page], seed_study: StudyRun
) -> None:
    top, _, _ = seed_pages
    assert "Study Artifacts" in top.text
    artifacts = top.text[top.text.index("Study Artifacts") :]
    assert seed_study.space.name in artifacts
    _, attrs = top.table_with("Key")
    keys = {row["Key"] for row in attrs}
    assert "autotune:space_text" not in keys  # (the first page of them: the verdict's lead)
    assert "autotune:space_artifact" in seed_study.load().user_attrs
    assert max(len(row["Value"]) for row in attrs) < 200, attrs
    # the space file's own lines are not on the page (they are in the artifact)
    first = next(line for line in seed_study.space.read_text().splitlines() if "model_path" in line)
    assert first.strip() not in top.html


def test_a_study_without_metric_names_still_opens(chromium: str, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'old.db'}"
    study = optuna.create_study(study_name="old", storage=storage, direction="maximize")
    for x in (1.0, 2.0, 3.0):
        study.enqueue_trial({"x": x})
        study.optimize(lambda t: t.suggest_float("x", 0.0, 4.0) * 2.0, n_trials=1)
    with serve_dashboard("--study-name", "old", "--studies-dir", str(tmp_path)) as (url, _):
        top = render(chromium, f"{url}/dashboard/studies/1")
    history = [title for title, ids in top.ytitles if "plot-history" in ids]
    assert history == ["Objective 0"], top.ytitles  # what a name replaces


def test_a_two_objective_study_shows_its_pareto_front(chromium: str, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'front.db'}"
    study = optuna.create_study(
        study_name="front", storage=storage, directions=["maximize", "minimize"]
    )
    study.set_metric_names(["output_tok_s", "itl_p99_ms"])
    # throughput against latency: three on the front, two dominated
    points = [(100.0, 20.0), (140.0, 30.0), (180.0, 45.0), (120.0, 40.0), (90.0, 50.0)]
    for tok_s, itl in points:
        trial = study.ask()
        trial.suggest_int("steps", 1, 8)
        study.tell(trial, [tok_s, itl])
    assert len(study.best_trials) == 3
    with serve_dashboard("--study-name", "front", "--studies-dir", str(tmp_path)) as (url, _):
        top = render(chromium, f"{url}/dashboard/studies/1")
    assert "Pareto Front" in top.text
    card = top.text[top.text.index("Pareto Front") :]
    assert "output_tok_s" in card and "itl_p99_ms" in card
    # plotly drew one marker per trial in the front's plot
    assert top.count("path", "point", inside="graph-pareto-front") == len(points)
    assert "Objective 0" not in top.text


def test_a_two_objective_study_autotune_ran_shows_the_front_the_report_lists(
    chromium: str, tmp_path: Path
) -> None:
    """Throughput against TTFT, measured by ``autotune study start`` on the simulated server: the
    dashboard's Pareto front card names both metrics, draws every measured trial, and the report
    lists the same front that Optuna computes from the stored study."""
    base = {"cuda_graph_max_bs": 32, "mem_fraction_static": 0.85}
    configs = [
        {
            **base,
            "speculative_num_steps": steps,
            "speculative_eagle_topk": topk,
            "speculative_num_draft_tokens": draft,
        }
        for steps, topk, draft in ((1, 1, 2), (5, 8, 32), (3, 4, 8))
    ]
    space = small_space(
        tmp_path / "spaces",
        configs=configs,
        edit={"objective": {"metrics": ["output_tok_s", "ttft_p99_ms"]}},
    )
    run = start_study(space, "front", 6, tmp_path / "studies")
    study = run.load()
    measured = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    assert len(measured) >= 4
    report = run_cli("study", "report", *run.cli_args(), "--json")
    assert report.returncode == 0, report.describe()
    front = sorted(row["number"] for row in json.loads(report.stdout)["pareto_front"])
    assert front == sorted(t.number for t in study.best_trials)

    with serve_dashboard(*run.cli_args()) as (url, _):
        top = render(chromium, f"{url}/dashboard/studies/1")
    assert "Pareto Front" in top.text
    card = top.text[top.text.index("Pareto Front") :]
    assert "output_tok_s" in card and "ttft_p99_ms" in card
    assert top.count("path", "point", inside="graph-pareto-front") == len(measured)
    assert "Objective 0" not in top.text


def test_the_study_page_s_attributes_lead_with_the_verdict(
    seed_pages: tuple[Page, Page, Page], seed_study: StudyRun
) -> None:
    """The verdict's attributes are the first the study page lists (here: not confirmed, the
    session study turns confirmation off), then the study's own."""
    top, _, _ = seed_pages
    _, attrs = top.table_with("Key")
    plain = seed_study.load().user_attrs
    assert [row["Key"] for row in attrs[:2]] == ["verdict", "confirmed_trial"]
    assert attrs[0]["Value"] == plain["verdict"]
    assert plain["verdict"].startswith("not confirmed yet")
