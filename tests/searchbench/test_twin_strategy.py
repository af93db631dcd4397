"""The search benchmark's ``twin`` strategy, its deliberately wrong prior, and the studies
without the space's own configurations."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.searchbench import format_table, run_search_benchmark

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

#: One configuration the tiny space enqueues (a top-k 1 chain, the fused all-reduce that the
#: seed box cannot run, refused before launch: the studies with it and without it differ).
CONFIG = (
    "  configs:\n"
    "    - {speculative_num_steps: 1, speculative_eagle_topk: 1, speculative_num_draft_tokens: 2,"
    " cuda_graph_max_bs: 16, mem_fraction_static: 0.84, allreduce: flashinfer_fusion}\n"
)


@pytest.fixture
def enqueuing_space(tiny_space: Path) -> Path:
    text = tiny_space.read_text()
    assert text.endswith("enqueue:\n  baseline: {allreduce: nccl, cuda_graph_max_bs: 128}\n")
    path = tiny_space.with_name("enqueuing.yaml")
    path.write_text(text + CONFIG)
    return path


def test_the_table_states_the_twins_errors_and_the_missing_configurations(
    enqueuing_space: Path,
) -> None:
    result = run_search_benchmark(
        str(enqueuing_space),
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


def test_with_and_without_the_enqueued_configurations_in_one_run(
    enqueuing_space: Path, tiny_space: Path
) -> None:
    """``--enqueued both``: each strategy's studies both ways against one optimum; the rows
    without the space's configurations are named ``STRATEGY/bare`` and ran without them. A
    space that enqueues nothing runs each strategy once."""
    result = run_search_benchmark(
        str(enqueuing_space), strategies=["twin"], seeds=1, budget=6, enqueued=(True, False)
    )
    assert [s.strategy for s in result.summaries] == ["twin", "twin/bare"]
    assert result.to_dict()["enqueued"] == [True, False]
    table = format_table(result)
    assert "each strategy with and without the space's enqueued configurations" in table
    assert "\ntwin/bare " in table
    by_label = {s.strategy: s for s in result.scores}
    assert set(by_label) == {"twin", "twin/bare"}
    # the enqueued fused all-reduce cannot run on the seed box, so it is refused before launch:
    # the study with it has that refusal more
    assert by_label["twin"].refused > by_label["twin/bare"].refused

    once = run_search_benchmark(
        str(tiny_space), strategies=["twin"], seeds=1, budget=4, enqueued=(True, False)
    )
    assert [s.strategy for s in once.summaries] == ["twin"]
    assert once.to_dict()["enqueued"] == []
    assert "the space enqueues no configurations" in format_table(once)
