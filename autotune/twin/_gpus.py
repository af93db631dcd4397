"""What a GPU's name and the interconnect tell before the first start.

The GPU table gives each known GPU's datasheet figures (HBM or GDDR bandwidth, dense tensor
throughput at BF16, FP8 and FP4, memory, compute capability); the interconnect gives the
all-reduce protocols of every mode, with the costs the shipped profiles model for NVLink and for
PCIe; which modes SGLang cannot run on the GPU's architecture and SGLang's own defaults are
asked of its engine adapter, which owns them. The twin's prior starts from
these and fits the achieved efficiencies and costs to the study's trials.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

from autotune._errors import ConfigError
from autotune._knobs import ServerConfig
from autotune.engines import Engine, EngineSpec, Hardware, engine_class


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU model (dense tensor throughput, no sparsity)."""

    key: str
    mem_bw_tbs: float
    bf16_tflops: float
    fp8_tflops: float | None
    fp4_tflops: float | None
    memory_gib: float
    compute_capability: tuple[int, int]
    #: Achieved share of peak bandwidth of small-batch decode kernels: HBM parts reach
    #: 0.71-0.80 in the shipped profiles' fits (one H200 measured 0.71-0.75), GDDR parts less
    #: at the quantised MoE kernels of large models (0.62); a prior centre, fitted per box.
    mem_efficiency: float = 0.72


#: Matched against ``nvidia-smi``'s name, most specific key first.
GPU_TABLE: tuple[GpuSpec, ...] = (
    # H200 SXM: 141 GB HBM3e, 4.8 TB/s, 989 / 1,979 TFLOP/s dense BF16 / FP8 (NVIDIA datasheet);
    # 143,771 MiB reported
    GpuSpec("h200", 4.8, 989.0, 1979.0, None, 140.40, (9, 0)),
    # H100 PCIe: 80 GB HBM2e, 2.0 TB/s, 756 / 1,513 TFLOP/s (datasheet)
    GpuSpec("h100 pcie", 2.0, 756.0, 1513.0, None, 79.65, (9, 0)),
    # H100 SXM: 80 GB HBM3, 3.35 TB/s, 989 / 1,979 TFLOP/s (datasheet); 81,559 MiB reported
    GpuSpec("h100", 3.35, 989.0, 1979.0, None, 79.65, (9, 0)),
    # B200: 180 GB HBM3e, 8 TB/s, 2,250 / 4,500 / 9,000 TFLOP/s BF16 / FP8 / FP4 dense (DGX B200
    # datasheet per GPU)
    GpuSpec("b200", 8.0, 2250.0, 4500.0, 9000.0, 178.35, (10, 0)),
    # A100 SXM 80 GB: HBM2e 2,039 GB/s, 312 TFLOP/s BF16 dense, no FP8 (datasheet)
    GpuSpec("a100", 2.039, 312.0, None, None, 79.15, (8, 0)),
    # RTX PRO 6000 Blackwell: 96 GB GDDR7, 1.79 TB/s (datasheet); BF16 dense of the order of
    # 440 TFLOP/s (the shipped profile's figure); 97,887 MiB reported
    GpuSpec("rtx pro 6000", 1.79, 440.0, 880.0, 1760.0, 95.59, (12, 0), 0.62),
    # L40S: 48 GB GDDR6, 864 GB/s, 362 / 733 TFLOP/s BF16 / FP8 dense (datasheet)
    GpuSpec("l40s", 0.864, 362.0, 733.0, None, 44.52, (8, 9)),
    # GeForce RTX 4090: 24 GB GDDR6X, 1,008 GB/s, 165.2 / 330.3 TFLOP/s BF16 / FP8 dense with
    # FP32 accumulate (Ada whitepaper); 24,564 MiB reported
    GpuSpec("4090", 1.008, 165.2, 330.3, None, 23.99, (8, 9), 0.80),
)


def gpu_spec(name: str) -> GpuSpec:
    """The table's entry for a GPU named as ``nvidia-smi`` names it.

    Raises:
        ConfigError: a GPU the table does not know (the message lists those it knows).
    """
    low = name.lower()
    for spec in GPU_TABLE:
        if spec.key in low:
            return spec
    raise ConfigError(
        f"the twin knows no GPU named {name!r}",
        hint="known GPUs: " + ", ".join(s.key for s in GPU_TABLE),
    )


Protocols = tuple[tuple[float, float, float | None, float | None], ...]

#: All-reduce protocols (alpha_us, us_per_kib, min_kib, max_kib) by interconnect and mode: the
#: shipped profiles' models (NVLink 4 through NVSwitch: h100x8 profiles, from ~360 GB/s achieved
#: one-way bandwidth per GPU and SGLang's dispatch by message size; PCIe 5.0 without NVLink: the
#: rtxpro6000x8 profile, NCCL LL and Simple at ~35 GB/s bus bandwidth, the one-shot custom kernel
#: slow over PCIe). A prior: the twin fits each mode's alpha and per-KiB cost.
ALLREDUCE_TEMPLATES: Mapping[str, Mapping[str, Protocols]] = {
    "nvlink": {
        "custom": ((7.5, 0.020, None, 256), (12.0, 0.005, 256, 8192), (28.0, 0.0035, 8192, None)),
        "nccl": ((16.0, 0.030, None, 512), (20.0, 0.008, None, 8192), (28.0, 0.0035, None, None)),
        "nccl_ring": (
            (22.0, 0.030, None, 512),
            (26.0, 0.009, None, 8192),
            (34.0, 0.0048, None, None),
        ),
        "nccl_tree": ((18.0, 0.035, None, 512), (32.0, 0.006, None, None)),
        "flashinfer_fusion": (
            (5.5, 0.020, None, 256),
            (10.0, 0.005, 256, 32768),
            (28.0, 0.0035, 32768, None),
        ),
        "torch_symm_mem": (
            (7.5, 0.020, None, 256),
            (12.0, 0.005, 256, 8192),
            (10.0, 0.003, 8192, 65536),
            (28.0, 0.0035, 65536, None),
        ),
        "nccl_symm": (
            (7.5, 0.020, None, 256),
            (12.0, 0.005, 256, 8192),
            (14.0, 0.0030, 8192, None),
        ),
        "mscclpp": (
            (6.0, 0.012, None, 1024),
            (12.0, 0.005, 1024.5, 8192),
            (28.0, 0.0035, 8192, None),
        ),
    },
    "pcie": {
        "nccl": ((75.0, 1.60, None, 64), (190.0, 0.05, None, None)),
        "nccl_ring": ((75.0, 1.60, None, 64), (190.0, 0.05, None, None)),
        "nccl_tree": ((95.0, 1.90, None, 64), (230.0, 0.07, None, None)),
        "custom": ((310.0, 2.4, None, 8192), (190.0, 0.05, 8192, None)),
        "flashinfer_fusion": ((75.0, 1.60, None, None),),
        "torch_symm_mem": ((75.0, 1.60, None, None),),
        "mscclpp": ((320.0, 2.0, None, 8192), (190.0, 0.05, 8192, None)),
    },
}

#: Extra memory per GPU of each mode's buffers (GiB; the shipped profiles' choices).
ALLREDUCE_MEMORY_GIB: Mapping[str, float] = {
    "custom": 0.25,
    "flashinfer_fusion": 0.40,
    "torch_symm_mem": 0.35,
    "nccl_symm": 0.50,
    "mscclpp": 0.30,
}

#: Modes over PCIe that the engine replaces, and why.
PCIE_FALLBACKS: Mapping[str, str] = {
    "nccl_symm": "NCCL's symmetric-memory kernels need NVLink; over PCIe NCCL runs its usual path",
}


#: The simulator's name of the start-up failure of each all-reduce mode the engine refuses on an
#: architecture (a mode not named here: the first one's, a failure at initialisation) ...
_ARCH_FAILURES: Mapping[str, str] = {
    "torch_symm_mem": "torch_symm_mem_arch",
    "flashinfer_fusion": "flashinfer_jit_arch",
}
#: ... and of a mode the engine refuses under CUDA-graph capture only.
_GRAPH_FAILURE = "nccl_tree_graph"


@lru_cache(maxsize=1)
def _sglang() -> Engine:
    """SGLang's adapter, the owner of its rules and defaults (built once: it holds no state the
    twin's questions change)."""
    return engine_class("sglang")(EngineSpec(kind="sglang", check_paths=False))


def mode_failure(mode: str, capability: tuple[int, int], tp: int) -> tuple[str | None, str | None]:
    """``(failure, failure_with_graphs)`` of all-reduce ``mode`` at ``tp`` ranks on a GPU of
    ``capability``, as SGLang's adapter judges it (:meth:`Engine.incompatibility`): a mode it
    refuses with graphs off fails at start-up; one it refuses only with graphs on fails at
    capture. The names are the simulator's (``autotune.sim``'s profile failures)."""
    engine = _sglang()
    hardware = Hardware(compute_capability=capability)
    eager = ServerConfig(allreduce=mode, tp_size=tp, disable_cuda_graph=True)
    if engine.incompatibility(eager, hardware) is not None:
        return _ARCH_FAILURES.get(mode, "torch_symm_mem_arch"), None
    if engine.incompatibility(replace(eager, disable_cuda_graph=False), hardware) is not None:
        return None, _GRAPH_FAILURE
    return None, None


@lru_cache(maxsize=64)
def sglang_defaults(memory_gib: float, tp: int) -> tuple[int, int]:
    """SGLang's default decode-graph batch cap and prefill chunk for a GPU of ``memory_gib`` at
    ``tp``, as its adapter gives them (:meth:`Engine.server_defaults`)."""
    chosen = _sglang().server_defaults(Hardware(memory_gib=memory_gib), tp)
    return chosen["cuda_graph_max_bs"], chosen["chunked_prefill_size"]


@lru_cache(maxsize=1)
def sglang_speculative_running_cap() -> int:
    """The running requests SGLang allows under speculative decoding when
    ``max_running_requests`` is unset, as its adapter gives it."""
    chosen = _sglang().server_defaults(Hardware(), 1, speculative=True)
    return chosen["max_running_requests"]
