"""The search benchmark on the vLLM space: the space runs on the engine that simulates vLLM,
and the model judges it by vLLM's rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune._knobs import ServerConfig
from autotune.searchbench import Oracle, run_study
from autotune.searchbench._benchmark import prepare
from autotune.study._setup import make_engine

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "vllm-eagle3-h100.yaml"

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_the_vllm_space_is_judged_by_vllms_rules(tmp_path: Path) -> None:
    space, model = prepare(str(SPACE), None)
    assert space.engine.kind == "sim-vllm" and model.engine == "vllm"
    oracle = Oracle(model, space.workload)
    engine = make_engine(space)
    fits = ServerConfig(
        speculative_algorithm="EAGLE3", speculative_num_steps=4, gpu_memory_utilization=0.9
    )
    assert engine.precheck(fits) is None
    assert oracle.answer(fits).status == "ok"
    assert oracle.answer(fits.replace(gpu_memory_utilization=0.35)).status == "oom_kv_pool"
    # what vLLM lacks is refused by the adapter, as in a study against the server
    refusal = engine.check_rules(fits.replace(speculative_eagle_topk=4))
    assert refusal is not None and refusal.knob == "speculative_eagle_topk"

    trace = run_study(space, engine, oracle, "random", 0, 8, folder=tmp_path)
    statuses = [t.status for t in trace.trials]
    assert len(statuses) == 8 and trace.trials[0].role == "baseline", statuses
    assert statuses.count("ok") >= 4 and set(statuses) <= {"ok", "oom_kv_pool", "oom_cuda_graph"}
