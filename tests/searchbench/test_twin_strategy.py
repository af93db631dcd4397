"""The search benchmark's ``twin`` strategy, its deliberately wrong prior, and the studies
without the space's own configurations."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.searchbench import format_table, run_search_benchmark

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_the_table_states_the_twins_errors_and_the_missing_configurations(
    tiny_space: Path,
) -> None:
    result = run_search_benchmark(
        str(tiny_space),
        strategies=["twin"],
        seeds=2,
        budget=12,
        twin_errors={"bandwidth": 0.85, "allreduce": 1.5},
        enqueued=False,
    )
    (summary,) = result.summaries
    assert summary.strategy == "twin" and summary.seeds == 2
    table = format_table(result)
    assert "without the space's enqueued configurations" in table
    assert "wrong by: allreduce x1.5, bandwidth x0.85" in table
    assert result.to_dict()["twin_errors"] == {"allreduce": 1.5, "bandwidth": 0.85}
    assert summary.reached_98 > 0
