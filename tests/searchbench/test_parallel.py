"""The search benchmark spread over worker processes gives what one process gives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.searchbench import Oracle, find_optimum, run_search_benchmark
from autotune.searchbench._benchmark import prepare
from autotune.searchbench._parallel import WorkerError, fork_map


def _square_with_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def test_results_come_back_in_order_from_several_processes() -> None:
    out = fork_map(_square_with_pid, list(range(23)), 4)
    assert [v for v, _ in out] == [x * x for x in range(23)]
    pids = {pid for _, pid in out}
    assert len(pids) == 4 and os.getpid() not in pids


def test_one_job_runs_in_this_process() -> None:
    assert {pid for _, pid in fork_map(_square_with_pid, [1, 2, 3], 1)} == {os.getpid()}


def _fails_on_seven(x: int) -> int:
    if x == 7:
        raise ValueError(f"no sevens: {x}")
    return x


def test_a_worker_that_raises_is_reported_with_its_traceback() -> None:
    with pytest.raises(WorkerError) as caught:
        fork_map(_fails_on_seven, list(range(10)), 3)
    assert "ValueError: no sevens: 7" in caught.value.message
    assert "--jobs 1" in (caught.value.hint or "")


def _dies_on_two(x: int) -> int:
    if x == 2:
        os._exit(3)
    return x


def test_a_worker_that_dies_is_reported() -> None:
    with pytest.raises(WorkerError) as caught:
        fork_map(_dies_on_two, list(range(6)), 3)
    assert "died without answering" in caught.value.message
    assert "exit code 3" in caught.value.message


def test_the_optimum_over_several_processes_is_the_same(tiny_space: Path) -> None:
    space, model = prepare(str(tiny_space), None)
    one = find_optimum(space, Oracle(model, space.workload))
    three = find_optimum(space, Oracle(model, space.workload), jobs=3)
    assert three.value == one.value and three.params == one.params
    assert three.evaluated == one.evaluated and three.statuses == one.statuses
    assert (three.near_95, three.near_98) == (one.near_95, one.near_98)


def test_studies_over_several_processes_score_as_in_one(tiny_space: Path) -> None:
    kwargs = {"strategies": ["default", "random"], "seeds": 2, "budget": 5}
    one = run_search_benchmark(str(tiny_space), **kwargs)  # type: ignore[arg-type]
    two = run_search_benchmark(str(tiny_space), jobs=2, **kwargs)  # type: ignore[arg-type]
    assert [(s.strategy, s.seed) for s in two.scores] == [(s.strategy, s.seed) for s in one.scores]
    assert [s.history for s in two.scores] == [s.history for s in one.scores]
    assert [s.gpu_hours for s in two.scores] == pytest.approx([s.gpu_hours for s in one.scores])
