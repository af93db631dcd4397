"""The twin's SGLang facts are the engine adapter's: architecture support and defaults agree."""

from __future__ import annotations

import pytest

from autotune._knobs import ALLREDUCE_MODES, ServerConfig
from autotune.engines import EngineSpec, Hardware, create_engine
from autotune.twin import GPU_TABLE
from autotune.twin._gpus import mode_failure, sglang_defaults, sglang_speculative_running_cap

#: Every GPU the twin knows, and architectures it does not (Ampere, Blackwell Ultra, consumer
#: Blackwell), whose answers must come from the engine all the same.
CAPABILITIES = sorted({s.compute_capability for s in GPU_TABLE} | {(8, 0), (10, 3), (12, 1)})
RANKS = (1, 2, 4, 6, 8)


@pytest.mark.parametrize("kind", ["sglang", "sim"])
@pytest.mark.parametrize("capability", CAPABILITIES)
def test_the_twins_allreduce_failures_are_the_engines(
    kind: str, capability: tuple[int, int]
) -> None:
    engine = create_engine(EngineSpec(kind=kind, check_paths=False))
    hardware = Hardware(compute_capability=capability)
    for mode in ALLREDUCE_MODES:
        for tp in RANKS:
            eager = ServerConfig(allreduce=mode, tp_size=tp, disable_cuda_graph=True)
            graphs = ServerConfig(allreduce=mode, tp_size=tp)
            refuses_eager = engine.incompatibility(eager, hardware) is not None
            refuses_graphs = engine.incompatibility(graphs, hardware) is not None
            failure, with_graphs = mode_failure(mode, capability, tp)
            where = f"{mode} at tp {tp} on SM{capability[0]}{capability[1]}"
            assert (failure is not None) == refuses_eager, where
            assert (failure is not None or with_graphs is not None) == refuses_graphs, where


def test_a_mode_the_engine_refuses_at_some_ranks_fails_in_the_twin_at_those_ranks_only() -> None:
    # torch symmetric memory on SM90 runs at 4, 6 and 8 ranks, not at 2 (the copy the twin kept
    # before asking the engine said every rank count ran)
    assert mode_failure("torch_symm_mem", (9, 0), 2)[0] is not None
    assert mode_failure("torch_symm_mem", (9, 0), 8) == (None, None)


@pytest.mark.parametrize("memory_gib", [16.0, 23.99, 34.9, 44.52, 59.9, 79.65, 140.4, 178.35])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_the_twins_sglang_defaults_are_the_engines(memory_gib: float, tp: int) -> None:
    engine = create_engine(EngineSpec(kind="sglang", check_paths=False))
    chosen = engine.server_defaults(Hardware(memory_gib=memory_gib), tp)
    assert sglang_defaults(memory_gib, tp) == (
        chosen["cuda_graph_max_bs"],
        chosen["chunked_prefill_size"],
    )


def test_the_twins_running_cap_under_speculation_is_the_engines() -> None:
    engine = create_engine(EngineSpec(kind="sglang", check_paths=False))
    chosen = engine.server_defaults(Hardware(), 1, speculative=True)
    assert sglang_speculative_running_cap() == chosen["max_running_requests"]
