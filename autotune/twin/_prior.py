"""The twin's coefficients and the simulator profile a set of them describes.

A :class:`Layout` is what the facts fix (the GPU's datasheet figures, the model's shapes, the
all-reduce modes of the interconnect and which of them fail on the GPU's architecture) plus the
list of uncertain coefficients, each with a prior centre and spread (:class:`Coefficient`). One
vector of coefficient values is one candidate box: :meth:`Layout.profile` turns it into a
:class:`~autotune.sim.Profile` in the simulator's schema, which the simulator's own model
evaluates and ``autotune sim serve --sim-profile`` serves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from autotune._knobs import ALLREDUCE_MODES
from autotune._workload import WorkloadSpec
from autotune.sim import Profile
from autotune.sim._profile import (
    Acceptance,
    AllReduceMode,
    AutoFraction,
    Draft,
    Hardware,
    Model,
    MoE,
    Protocol,
    Runtime,
    Startup,
)
from autotune.twin._facts import BoxFacts
from autotune.twin._gpus import (
    ALLREDUCE_MEMORY_GIB,
    ALLREDUCE_TEMPLATES,
    PCIE_FALLBACKS,
    gpu_spec,
    mode_failure,
    sglang_defaults,
)

_GIB = 1024**3
_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.56, "fp4": 0.56}

#: Names of coefficient groups that ``errors`` may scale (see :meth:`Layout.with_errors`).
ERROR_GROUPS: Mapping[str, tuple[str, ...]] = {
    "bandwidth": ("mem_efficiency",),
    "compute": ("compute_efficiency",),
    "acceptance": ("acc_p1", "acc_floor"),
    "allreduce": ("ar_alpha", "ar_beta"),
    "overhead": ("step_overhead_ms", "spec_cycle_overhead_ms", "draft_step_overhead_ms"),
    "memory": ("activation_gib", "graph_base_gib", "graph_gib_per_token"),
    "startup": ("startup_scale", "capture_per_size_s"),
}


@dataclass(frozen=True)
class Coefficient:
    """One uncertain coefficient: its prior centre and spread (of its logarithm, or of the
    value itself where ``linear``), and the range it is kept in."""

    name: str
    centre: float
    spread: float
    low: float
    high: float
    linear: bool = False
    #: What it is, for the export's comments and the learning report.
    what: str = ""

    def to_z(self, value: float) -> float:
        """The value on the fitting scale (log, or linear)."""
        return value if self.linear else math.log(max(value, 1e-12))

    def from_z(self, z: float) -> float:
        value = z if self.linear else math.exp(z)
        return min(self.high, max(self.low, value))


@dataclass(frozen=True)
class Layout:
    """The fixed part of the twin's box and its list of coefficients (module docstring)."""

    facts: BoxFacts
    tp: int
    workloads: Mapping[str, WorkloadSpec]
    default_workload: str
    coefficients: tuple[Coefficient, ...]
    #: Modes with protocols of their own: mode -> protocols (alpha_us, us_per_kib, min, max).
    protocols: Mapping[str, tuple[tuple[float, float, float | None, float | None], ...]]
    #: Modes that fall back to another, and why.
    fallbacks: Mapping[str, tuple[str, str]]
    #: Failure names by mode: (failure, failure_with_graphs), as learned or predicted.
    failures: Mapping[str, tuple[str | None, str | None]]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.coefficients)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def centre(self) -> dict[str, float]:
        return {c.name: c.centre for c in self.coefficients}

    def with_errors(self, errors: Mapping[str, float]) -> Layout:
        """The layout whose prior centres of the named groups (:data:`ERROR_GROUPS`, or a
        coefficient's own name) are multiplied by the given factors."""
        from autotune._errors import ConfigError

        coefs = list(self.coefficients)
        for group, factor in errors.items():
            prefixes = ERROR_GROUPS.get(group, (group,))
            hit = False
            for i, c in enumerate(coefs):
                if any(c.name == p or (p.endswith(":") and c.name.startswith(p)) for p in prefixes):
                    centre = min(c.high, max(c.low, c.centre * factor))
                    coefs[i] = replace(c, centre=centre)
                    hit = True
            if not hit:
                raise ConfigError(
                    f"twin error {group!r} names no coefficient",
                    hint="groups: " + ", ".join(ERROR_GROUPS) + "; or a coefficient's name",
                )
        return replace(self, coefficients=tuple(coefs))

    def with_failure(self, mode: str, failure: tuple[str | None, str | None]) -> Layout:
        return replace(self, failures={**self.failures, mode: failure})

    # --- the profile of one coefficient vector ------------------------------------------------
    def profile(self, values: Mapping[str, float], name: str = "twin") -> Profile:
        """The simulator profile of the coefficient ``values`` (every name of the layout)."""
        f, v = self.facts, values
        gpu = gpu_spec(f.gpu_name)
        cc = f.compute_capability or gpu.compute_capability
        modes: dict[str, AllReduceMode] = {}
        for mode in ALLREDUCE_MODES:
            if mode in self.fallbacks:
                target, why = self.fallbacks[mode]
                modes[mode] = AllReduceMode(falls_back_to=target, why=why)
                continue
            a = v["ar_alpha"] * v[f"ar_alpha:{mode}"]
            b = v["ar_beta"] * v[f"ar_beta:{mode}"]
            protocols = tuple(
                Protocol(alpha * a, beta * b, max_kib=hi, min_kib=lo)
                for alpha, beta, lo, hi in self.protocols[mode]
            )
            failure, with_graphs = self.failures.get(mode, (None, None))
            modes[mode] = AllReduceMode(
                protocols=protocols,
                extra_memory_gib=v.get(f"ar_mem:{mode}", 0.0),
                failure=failure,
                failure_with_graphs=with_graphs,
            )
        compute_dtype = f.weight_dtype if f.weight_dtype in ("fp8", "fp4") else "bf16"
        if getattr(gpu, f"{compute_dtype}_tflops", None) is None:
            compute_dtype = "bf16"
        hardware = Hardware(
            gpu_name=f.gpu_name,
            gpu_count=f.gpu_count,
            memory_gib=f.gpu_memory_gib,
            mem_bw_tbs=gpu.mem_bw_tbs,
            mem_efficiency=v["mem_efficiency"],
            bf16_tflops=gpu.bf16_tflops,
            compute_efficiency=v["compute_efficiency"],
            compute_capability=cc,
            interconnect=f.interconnect,
            context_gib=v["context_gib"],
            allreduce=modes,
            fp8_tflops=gpu.fp8_tflops,
            fp4_tflops=gpu.fp4_tflops,
        )
        weights = _weights_gib(f)
        moe = None
        if f.moe:
            assert f.routed_experts and f.experts_per_token and f.expert_gib and f.moe_layers
            moe = MoE(
                routed_experts=f.routed_experts,
                experts_per_token=f.experts_per_token,
                shared_experts=f.shared_experts,
                expert_gib=f.expert_gib,
                moe_layers=f.moe_layers,
                routing_locality=v.get("routing_locality", 1.0),
                block_tokens=f.moe_block_tokens,
            )
        model = Model(
            name=f.model_name,
            architecture=f.architecture,
            layers=f.layers,
            hidden=f.hidden,
            vocab_size=f.vocab_size,
            context_length=f.context_length,
            weights_gib=weights,
            dense_gib=_dense_gib(f) * v["dense_scale"],
            flops_per_token_g=2.0 * (f.active_params_b or f.model_params_b),
            kv_bytes_per_token=f.kv_bytes_per_token,
            kv_sharded=f.kv_sharded,
            allreduces_per_layer=2,
            moe=moe,
            replicated_gib=v["replicated_gib"],
            kv_heads=f.kv_heads,
            compute_dtype=compute_dtype,
        )
        drafts: dict[str, Draft] = {}
        if f.draft_params_b is not None:
            drafts[f.draft_algorithm] = Draft(
                algorithm=f.draft_algorithm,
                architecture=f.draft_architecture,
                weights_gib=v["draft_weights_gib"],
                step_gib=v["draft_step_gib"],
                kv_bytes_per_token=max(1, round(v["draft_kv_bytes"])),
                collectives_per_step=3 if self.tp > 1 else 0,
                step_overhead_ms=v["draft_step_overhead_ms"],
                branch_overhead_ms=v["draft_branch_overhead_ms"],
                acceptance=Acceptance(
                    p1=v["acc_p1"],
                    decay=v["acc_decay"],
                    floor=v["acc_floor"],
                    rank_share=v["acc_rank_share"],
                    rank_ratio=v["acc_rank_ratio"],
                    temperature_penalty=0.15,
                ),
            )
        max_bs, chunk = sglang_defaults(f.gpu_memory_gib, self.tp)
        runtime = Runtime(
            step_overhead_ms=v["step_overhead_ms"],
            eager_overhead_ms=v["eager_overhead_ms"],
            spec_cycle_overhead_ms=v["spec_cycle_overhead_ms"],
            tree_overhead_ms_per_token=v["tree_overhead_ms_per_token"],
            activation_gib=v["activation_gib"],
            graph_base_gib=v["graph_base_gib"],
            graph_gib_per_token=v["graph_gib_per_token"],
            default_cuda_graph_max_bs=max_bs,
            default_chunked_prefill=chunk,
            default_max_running_requests=2048,
            auto_fraction=AutoFraction(
                base_mib=v["auto_base_mib"],
                per_chunk_token_mib=1.5,
                per_tp_mib=1024,
                per_graph_bs_mib=2,
                speculative_mib=2048,
                floor_gib=10,
            ),
        )
        s = v["startup_scale"]
        startup = Startup(
            init_s=(6.0 + 2.0 * self.tp) * s,
            weight_load_s=max(5.0, weights / max(1, self.tp) / 0.12) * s,
            draft_load_s=1.5 * s,
            kv_alloc_s=1.0 * s,
            graph_capture_base_s=3.0 * s,
            graph_capture_per_size_s=v["capture_per_size_s"],
            warmup_s=3.0 * s,
        )
        return Profile(
            name=name,
            description=(
                f"twin of {f.gpu_count}x {f.gpu_name} ({f.interconnect}) serving {f.model_name}"
            ),
            source="autotune twin",
            hardware=hardware,
            model=model,
            drafts=drafts,
            runtime=runtime,
            startup=startup,
            workloads=dict(self.workloads),
            acceptance_scale={w: 1.0 for w in self.workloads},
            default_workload_name=self.default_workload,
        )


def build_layout(facts: BoxFacts, tp: int, workloads: Sequence[WorkloadSpec]) -> Layout:
    """The layout of ``facts`` at tensor parallelism ``tp``, with the twin's prior spreads."""
    gpu = gpu_spec(facts.gpu_name)
    cc = facts.compute_capability or gpu.compute_capability
    link = "nvlink" if facts.interconnect.lower().startswith("nv") else "pcie"
    template = ALLREDUCE_TEMPLATES[link]
    protocols = {m: template[m] for m in ALLREDUCE_MODES if m in template}
    fallbacks = {}
    if link == "pcie":
        fallbacks = {m: ("nccl", why) for m, why in PCIE_FALLBACKS.items()}
    failures = {m: mode_failure(m, cc, max(1, tp)) for m in protocols}
    weights = _weights_gib(facts)
    tp = max(1, tp)
    scale = facts.hidden / 4096
    coefs: list[Coefficient] = [
        Coefficient(
            "mem_efficiency",
            gpu.mem_efficiency,
            0.15,
            0.2,
            0.98,
            what="achieved share of peak memory bandwidth",
        ),
        Coefficient(
            "compute_efficiency",
            0.60,
            0.20,
            0.15,
            0.95,
            what="achieved share of peak tensor throughput",
        ),
        Coefficient(
            "dense_scale",
            1.0,
            0.08 if not facts.moe else 0.2,
            0.5,
            1.5,
            what="weights read every pass, over the config's estimate",
        ),
        Coefficient(
            "replicated_gib",
            0.0 if not facts.moe else 1.0,
            1.0,
            0.0,
            50.0,
            linear=True,
            what="weights every rank holds in full (GiB per GPU)",
        ),
        Coefficient(
            "context_gib",
            0.9 if tp == 1 else 1.0,
            0.3,
            0.2,
            6.0,
            what="CUDA context and communication buffers (GiB per GPU)",
        ),
        Coefficient(
            "step_overhead_ms",
            0.7 if tp == 1 else 2.0,
            0.6,
            0.01,
            50.0,
            what="scheduling and sampling per forward (ms)",
        ),
        Coefficient(
            "eager_overhead_ms",
            0.15 * facts.layers,
            0.5,
            0.1,
            200.0,
            what="kernel launches per forward without CUDA graphs (ms)",
        ),
        # the CPU work around a speculative cycle varies by an order of magnitude between
        # boxes (overlap scheduling or not, the host's CPU, the vocabulary's size), and no fact
        # before a start tells it: wide spreads here and in the tree and branch overheads, so
        # that a box far from the centre still leaves the chains and trees it favours in reach
        Coefficient(
            "spec_cycle_overhead_ms",
            1.0,
            1.2,
            0.01,
            50.0,
            what="CPU work of one speculative cycle (ms)",
        ),
        Coefficient(
            "tree_overhead_ms_per_token",
            0.02,
            1.5,
            1e-4,
            2.0,
            what="tree verify bookkeeping per verified token (ms)",
        ),
        Coefficient(
            "activation_gib",
            2.0 * max(1.0, scale**0.5),
            0.4,
            0.1,
            40.0,
            what="activation workspace outside the static pool (GiB)",
        ),
        Coefficient("graph_base_gib", 0.4, 0.4, 0.01, 10.0, what="CUDA-graph pool, fixed (GiB)"),
        Coefficient(
            "graph_gib_per_token",
            0.0012 * scale,
            0.6,
            1e-5,
            0.1,
            what="CUDA-graph pool per captured token (GiB)",
        ),
        Coefficient(
            "auto_base_mib",
            512.0,
            0.8,
            64.0,
            40000.0,
            what="the automatic fraction's base reserve (MiB)",
        ),
        Coefficient(
            "startup_scale", 1.0, 0.7, 0.05, 50.0, what="start-up durations, over the generic ones"
        ),
        Coefficient(
            "capture_per_size_s",
            0.3 * max(1.0, facts.layers / 32),
            0.7,
            0.01,
            20.0,
            what="CUDA-graph capture per batch size (s)",
        ),
    ]
    if facts.moe:
        coefs.append(
            Coefficient(
                "routing_locality",
                0.8,
                0.15,
                0.3,
                1.0,
                linear=True,
                what="routing locality of consecutive tokens",
            )
        )
    if facts.draft_params_b is not None:
        draft_gib = facts.draft_params_b * 1e9 * 2 / _GIB
        per_gpu = draft_gib / tp * (1.0 if tp == 1 else 2.0)
        layer_kv = facts.kv_bytes_per_token / max(1, facts.layers)
        shards = 1 if not facts.kv_sharded else min(tp, facts.kv_heads or tp)
        coefs += [
            Coefficient(
                "draft_weights_gib",
                per_gpu,
                0.5,
                0.01,
                100.0,
                what="the draft head's weights per GPU (GiB)",
            ),
            Coefficient(
                "draft_step_gib",
                # a share of the head's weights per GPU (the fit keeps it to the weights the
                # memory line gives); how much of it one forward reads depends on what is
                # sharded and what replicated, which no fact before a start tells: a wide spread
                per_gpu * 0.4,
                1.0,
                0.005,
                50.0,
                what="weights one draft forward reads per GPU (GiB)",
            ),
            Coefficient(
                "draft_kv_bytes",
                layer_kv / shards,
                0.5,
                1.0,
                1e7,
                what="the draft's KV bytes per token per GPU",
            ),
            Coefficient(
                "draft_step_overhead_ms", 0.25, 0.7, 0.005, 20.0, what="per draft forward (ms)"
            ),
            Coefficient(
                "draft_branch_overhead_ms",
                0.1,
                1.5,
                1e-4,
                10.0,
                what="per draft forward per extra branch (ms)",
            ),
            Coefficient("acc_p1", 0.70, 0.20, 0.05, 0.99, what="depth-1 acceptance"),
            Coefficient("acc_decay", 0.93, 0.05, 0.6, 1.0, what="acceptance decay per depth"),
            Coefficient("acc_floor", 0.35, 0.30, 0.01, 0.95, what="acceptance floor"),
            Coefficient(
                "acc_rank_share",
                0.62,
                0.20,
                0.05,
                0.95,
                what="share of misses caught by lower ranks",
            ),
            Coefficient("acc_rank_ratio", 0.45, 0.20, 0.05, 0.9, what="decay over ranks"),
        ]
    if protocols:
        coefs.append(
            Coefficient(
                "ar_alpha",
                1.0,
                0.4,
                0.05,
                20.0,
                what="all-reduce latency of every mode, over the interconnect's",
            )
        )
        coefs.append(
            Coefficient(
                "ar_beta",
                1.0,
                0.4,
                0.05,
                20.0,
                what="all-reduce cost per KiB of every mode, over the interconnect's",
            )
        )
    for mode in protocols:
        coefs.append(
            Coefficient(
                f"ar_alpha:{mode}",
                1.0,
                0.3,
                0.05,
                20.0,
                what=f"{mode} all-reduce latency, over the interconnect's",
            )
        )
        coefs.append(
            Coefficient(
                f"ar_beta:{mode}",
                1.0,
                0.3,
                0.05,
                20.0,
                what=f"{mode} all-reduce cost per KiB, over the interconnect's",
            )
        )
        if mode in ALLREDUCE_MEMORY_GIB:
            coefs.append(
                Coefficient(
                    f"ar_mem:{mode}",
                    ALLREDUCE_MEMORY_GIB[mode],
                    0.5,
                    0.0,
                    10.0,
                    what=f"{mode} buffers (GiB per GPU)",
                )
            )
    del weights
    loads = {w.name: w for w in workloads}
    return Layout(
        facts=facts,
        tp=tp,
        workloads=loads,
        default_workload=workloads[0].name,
        coefficients=tuple(coefs),
        protocols=protocols,
        fallbacks=fallbacks,
        failures=failures,
    )


def _weights_gib(f: BoxFacts) -> float:
    if f.weights_gib is not None:
        return f.weights_gib
    return f.model_params_b * 1e9 * _DTYPE_BYTES.get(f.weight_dtype, 2.0) / _GIB


def _dense_gib(f: BoxFacts) -> float:
    """Weights every forward reads: all but the routed experts (MoE) and the embedding table."""
    weights = _weights_gib(f)
    bytes_per = weights * _GIB / max(1e-9, f.model_params_b * 1e9)
    if f.moe:
        assert f.routed_experts and f.expert_gib and f.moe_layers
        return max(0.01 * weights, weights - f.routed_experts * f.expert_gib * f.moe_layers)
    embedding = f.vocab_size * f.hidden * bytes_per / _GIB
    return max(0.5 * weights, weights - embedding)
