"""The figures of a study (trials_frame, optimization_history, crash_map) on a study that
``autotune study start`` ran, checked trace by trace against plain Optuna."""

from __future__ import annotations

import json
from itertools import accumulate
from pathlib import Path
from typing import Any

import optuna
import plotly.graph_objects as go
import pytest
from study._helpers import StudyRun, finished_trials

from autotune.report import crash_map, optimization_history, trials_frame

from .conftest import SEED_TRIALS


def _traces(fig: go.Figure) -> dict[str, Any]:
    return {trace.name: trace for trace in fig.data}


def test_trials_frame(seed_study: StudyRun) -> None:
    plain = seed_study.load()
    rows = trials_frame(plain)
    trials = finished_trials(plain)
    assert [r["number"] for r in rows] == [t.number for t in trials] == list(range(SEED_TRIALS))
    for row, t in zip(rows, trials, strict=True):
        attrs = t.user_attrs
        assert row["outcome"] == attrs["outcome"]
        assert row["role"] == attrs["role"]
        assert row["value"] == t.value
        assert row["speedup"] == attrs.get("speedup")
        assert row["accept_length"] == attrs["accept_length"]
        assert row["feasible"] == (attrs["outcome"] == "ok")
        knobs = {k.removeprefix("knob:"): v for k, v in row.items() if k.startswith("knob:")}
        assert knobs == attrs["config"]


def test_optimization_history(seed_study: StudyRun) -> None:
    plain = seed_study.load()
    trials = finished_trials(plain)
    fig = optimization_history(plain)
    traces = _traces(fig)
    measured = [t for t in trials if t.user_attrs["outcome"] == "ok"]

    assert list(traces["measured"].x) == [t.number for t in measured]
    assert list(traces["measured"].y) == [t.value for t in measured]
    assert list(traces["best so far"].x) == [t.number for t in measured]
    assert list(traces["best so far"].y) == list(accumulate((t.value for t in measured), max))

    failed = {t.user_attrs["outcome"] for t in trials} - {"ok"}
    assert failed >= {"oom_kv_pool", "infeasible", "oom_cuda_graph"}
    assert set(traces) == {"measured", "best so far"} | failed
    lowest = min(t.value for t in measured if t.value is not None)
    for outcome in failed:
        numbers = [t.number for t in trials if t.user_attrs["outcome"] == outcome]
        assert list(traces[outcome].x) == numbers
        assert all(y < lowest for y in traces[outcome].y)
    assert "seed" in fig.layout.title.text
    assert fig.layout.yaxis.title.text == "output_tok_s"
    json.loads(fig.to_json())


def test_crash_map(seed_study: StudyRun) -> None:
    plain = seed_study.load()
    trials = finished_trials(plain)
    fig = crash_map(plain)
    traces = _traces(fig)

    placed = [t for t in trials if "mem_fraction_static" in t.user_attrs["config"]]
    assert 0 not in [t.number for t in placed]  # the baseline sets no static fraction
    assert set(traces) == {t.user_attrs["outcome"] for t in placed}
    for outcome, trace in traces.items():
        group = [t for t in placed if t.user_attrs["outcome"] == outcome]
        config = [t.user_attrs["config"] for t in group]
        assert list(trace.x) == [c["mem_fraction_static"] for c in config]
        assert list(trace.y) == [c["cuda_graph_max_bs"] for c in config]
        assert list(trace.text) == [f"trial {t.number}" for t in group]
    kv = traces["oom_kv_pool"]
    assert list(kv.x) == [0.79] and list(kv.y) == [128]
    assert fig.layout.xaxis.title.text == "mem_fraction_static"


def test_crash_map_on_other_knobs(seed_study: StudyRun) -> None:
    plain = seed_study.load()
    fig = crash_map(plain, x="speculative_num_steps", y="allreduce")
    points = {(x, y) for trace in fig.data for x, y in zip(trace.x, trace.y, strict=True)}
    assert (2, "flashinfer_fusion") in points
    assert (5, "nccl") in points
    assert fig.layout.yaxis.title.text == "allreduce"

    with pytest.raises(ValueError, match="sets both 'mem_fraction_static' and 'page_size'") as e:
        crash_map(plain, y="page_size")
    assert "cuda_graph_max_bs" in str(e.value)


def test_figures_of_an_empty_study(tmp_path: Path) -> None:
    study = optuna.create_study(
        study_name="empty", storage=f"sqlite:///{tmp_path / 'empty.db'}", direction="maximize"
    )
    assert trials_frame(study) == []
    history = _traces(optimization_history(study))
    assert set(history) == {"measured", "best so far"}
    assert list(history["measured"].x) == []
    assert crash_map(study).data == ()
