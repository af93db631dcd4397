"""A study reads the memory lines of its starts and refuses what they predict will not start.

On the simulated H100: the baseline, then an enqueued EAGLE-3 configuration whose CUDA graphs
(batch 256 x (32 draft tokens + top-k 4)) take 11.36 GiB and fit at mem_fraction_static=0.80,
then the same at 0.90, where only 7.97 GiB is left outside the static pool: refused before
launch by the second start's reading, and the simulator started with it does crash in capture.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from autotune.crashes import classify_text
from autotune.engines import MemoryReading, create_engine
from autotune.space import load_space
from autotune.study._feasibility import Feasibility
from autotune.study._memory import MemoryReadings
from autotune.study._record import Outcome, TrialRecord

from ._helpers import finished_trials, free_port, small_space, start_study

GRAPHS: dict[str, Any] = {
    "speculative_num_steps": 8,
    "speculative_eagle_topk": 4,
    "speculative_num_draft_tokens": 32,
    "cuda_graph_max_bs": 256,
}
FITS = {**GRAPHS, "mem_fraction_static": 0.80}
TOO_HIGH = {**GRAPHS, "mem_fraction_static": 0.90}


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_space(tmp_path_factory.mktemp("space"), configs=[FITS, TOO_HIGH])


def test_a_start_s_memory_lines_refuse_a_later_proposal(space: Path, tmp_path: Path) -> None:
    run = start_study(space, "memlines", 3, tmp_path / "studies")
    study = run.load()
    trials = finished_trials(study)
    assert [t.number for t in trials] == [0, 1, 2], run.start.describe()
    baseline, fits, refused = trials

    # every start recorded its reading, the baseline's automatic fraction included
    for t in (baseline, fits):
        assert t.user_attrs["outcome"] == "ok", t.user_attrs
        assert MemoryReading.from_dict(t.user_attrs["memory"]) is not None
    reading = MemoryReading.from_dict(fits.user_attrs["memory"])
    assert reading is not None
    assert (reading.mem_fraction_static, reading.graph_max_bs) == (0.8, 256)
    assert reading.graph_gib == 11.36 and reading.total_gib == pytest.approx(79.65, abs=0.01)

    # the later proposal is refused before launch, by prediction, with the arithmetic
    attrs = refused.user_attrs
    assert refused.state == TrialState.PRUNED and refused.params["mem_fraction_static"] == 0.90
    assert attrs["outcome"] == "infeasible" and attrs["command"] is None
    assert attrs["refused_as"] == "oom_cuda_graph"
    reason = attrs["failure_line"]
    assert reason.startswith("trial 1: its start at mem_fraction_static=0.8 captured CUDA graphs")
    rest = re.search(r"79\.65 x \(1 - 0\.9\) = ([\d.]+) GiB", reason)
    assert rest is not None and "11.36 >" in reason, reason

    # a resumed study knows the reading from the stored trial
    loaded = load_space(space)
    feasibility = Feasibility(loaded, create_engine(loaded.engine))
    config = loaded.config_for(dict(refused.params))
    assert feasibility.check(config, dict(refused.params)) is None  # nothing learned yet
    feasibility.learn_from(study)
    again = feasibility.check(config, dict(refused.params))
    assert again is not None and again.reason == reason

    # the simulator, launched with the refused configuration, crashes as predicted
    engine = create_engine(loaded.engine)
    launch = engine.build_launch(config, port=free_port())
    done = subprocess.run(
        list(launch.argv), env=dict(launch.env), capture_output=True, text=True, timeout=120
    )
    log = done.stdout + done.stderr
    assert done.returncode != 0
    assert classify_text(log, engine.crash_rules()).category == "oom_cuda_graph", log
    room = re.search(r"Capture cuda graph begin\..* avail mem=([\d.]+) GB", log)
    assert room is not None and float(room.group(1)) == pytest.approx(
        float(rest.group(1)), abs=0.011
    )


def test_a_log_that_cannot_be_read_records_no_reading(space: Path, tmp_path: Path) -> None:
    loaded = load_space(space)
    readings = MemoryReadings(create_engine(loaded.engine))
    record = TrialRecord(outcome=Outcome.OK, role="search")
    config = loaded.config_for(FITS)
    readings.record(config, record, tmp_path / "missing.log")
    readings.record(config, record, None)
    (tmp_path / "quiet.log").write_text("Init torch distributed begin.\n")
    readings.record(config, record, tmp_path / "quiet.log")
    assert "memory" not in record.user_attrs()
