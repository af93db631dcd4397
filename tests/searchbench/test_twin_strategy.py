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


def test_with_and_without_the_enqueued_configurations_in_one_run(tiny_space: Path) -> None:
    """``--enqueued both``: each strategy's studies both ways against one optimum; the rows
    without the space's configurations are named ``STRATEGY/bare`` and ran without them."""
    result = run_search_benchmark(
        str(tiny_space), strategies=["twin"], seeds=1, budget=6, enqueued=(True, False)
    )
    assert [s.strategy for s in result.summaries] == ["twin", "twin/bare"]
    assert result.to_dict()["enqueued"] == [True, False]
    table = format_table(result)
    assert "each strategy with and without the space's enqueued configurations" in table
    assert "\ntwin/bare " in table
    roles = {s.strategy: s for s in result.scores}
    assert set(roles) == {"twin", "twin/bare"}
