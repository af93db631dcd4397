"""The simulator's step-time and memory arithmetic over many candidate boxes at once.

The twin holds its belief as particles, each a coefficient vector (a candidate box). For one
configuration the simulator's own model answers the centre particle exactly
(:meth:`autotune.sim.SimModel.evaluate`); the other particles differ from it by what their
coefficients change, which this module computes for all of them at once with numpy, from the
same formulas as the simulator (:mod:`autotune.sim._timing`: soft roofline of memory and compute,
all-reduce protocols by message size, draft forwards, the speculative cycle, chunked prefill;
:mod:`autotune.sim._memory`: the static pool, the KV pool, the CUDA-graph pool). A particle's
prediction is the centre's exact answer times the ratio of its steady-state rate to the
centre's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autotune._knobs import ServerConfig
from autotune._workload import WorkloadSpec
from autotune.sim._acceptance import AcceptanceModel
from autotune.sim._memory import graph_tokens_per_bs
from autotune.sim._profile import Acceptance
from autotune.twin._gpus import gpu_spec, sglang_defaults, sglang_speculative_running_cap
from autotune.twin._prior import Layout, _dense_gib, _weights_gib

_GIB = 1024**3
_GFLOP_PER_BF16_GIB = 2.0 * _GIB / 2 / 1e9
Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class LoadShape:
    """What the rate depends on of a workload: requests in flight, mean prompt and output, and
    the KV tokens that hold every request in flight at once (more changes nothing)."""

    batch: int
    prompt: float
    output: float
    ample_kv_tokens: int

    @classmethod
    def of(cls, workload: WorkloadSpec, max_running: int) -> LoadShape:
        return _load_shape(workload, max_running)


@lru_cache(maxsize=256)
def _load_shape(workload: WorkloadSpec, max_running: int) -> LoadShape:
    lengths = workload.sample_lengths()
    batch = max(1, min(workload.concurrency, max_running, len(lengths)))
    reserved = sorted((p + o for p, o in lengths), reverse=True)
    return LoadShape(
        batch=batch,
        prompt=float(np.mean([p for p, _ in lengths])),
        output=float(np.mean([o for _, o in lengths])),
        ample_kv_tokens=int(sum(reserved[:batch])),
    )


def max_running_of(layout: Layout, config: ServerConfig) -> int:
    if config.max_running_requests is not None:
        return config.max_running_requests
    return sglang_speculative_running_cap() if config.speculative else 2048


def max_bs_of(layout: Layout, config: ServerConfig) -> int:
    if config.cuda_graph_max_bs is not None:
        return config.cuda_graph_max_bs
    default = sglang_defaults(layout.facts.gpu_memory_gib, layout.tp)[0]
    if config.speculative and config.max_running_requests is None:
        return min(default, sglang_speculative_running_cap())
    return default


def effective_mode(layout: Layout, mode: str) -> str:
    seen = [mode]
    while mode in layout.fallbacks and layout.fallbacks[mode][0] not in seen:
        mode = layout.fallbacks[mode][0]
        seen.append(mode)
    return mode


class Proxy:
    """Steady-state rate and start-up memory of one configuration for arrays of coefficients."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        f = layout.facts
        gpu = gpu_spec(f.gpu_name)
        self.bw_peak = gpu.mem_bw_tbs * 1e12 / _GIB / 1e3  # GiB per ms at efficiency 1
        dtype = f.weight_dtype if f.weight_dtype in ("fp8", "fp4") else "bf16"
        peak = getattr(gpu, f"{dtype}_tflops", None) or gpu.bf16_tflops
        self.tflops_peak = peak
        self.draft_tflops_peak = gpu.bf16_tflops
        self.tp = layout.tp
        self.weights = _weights_gib(f)
        self.dense = _dense_gib(f)
        self.flops = 2.0 * (f.active_params_b or f.model_params_b)
        shards = 1 if not f.kv_sharded else min(self.tp, f.kv_heads or self.tp)
        self.kv_gpu = f.kv_bytes_per_token / shards
        self.n_allreduce = 2 * f.layers

    # --- time ------------------------------------------------------------------------------
    def allreduce_ms(self, v: Arrays, mode: str, tokens: float) -> np.ndarray:
        if self.tp <= 1:
            return np.zeros_like(v["mem_efficiency"])
        mode = effective_mode(self.layout, mode)
        protos = self.layout.protocols[mode]
        kib = tokens * self.layout.facts.hidden * 2 / 1024
        a = v["ar_alpha"] * v[f"ar_alpha:{mode}"]
        b = v["ar_beta"] * v[f"ar_beta:{mode}"]
        fits = [
            p for p in protos if (p[3] is None or kib <= p[3]) and (p[2] is None or kib >= p[2])
        ] or list(protos)
        costs = [alpha * a + kib * beta * b for alpha, beta, _, _ in fits]
        return np.asarray(np.minimum.reduce(costs) / 1000.0)

    def expert_gib(self, v: Arrays, tokens: float) -> np.ndarray | float:
        f = self.layout.facts
        if not f.moe or tokens <= 0:
            return 0.0
        assert f.routed_experts and f.experts_per_token and f.expert_gib and f.moe_layers
        eff = tokens ** v["routing_locality"]
        frac = f.experts_per_token / f.routed_experts
        distinct = f.routed_experts * (1.0 - (1.0 - frac) ** eff)
        block = f.moe_block_tokens
        if block is not None:
            # each block of an expert's tokens streams its weights again (autotune.sim._timing)
            per_expert = tokens * f.experts_per_token / np.maximum(distinct, 1e-12)
            reads = distinct * np.maximum(1.0, per_expert / block)
            reads = reads + f.shared_experts * max(1.0, tokens / block)
        else:
            reads = distinct + f.shared_experts
        return reads * f.expert_gib * f.moe_layers / self.tp

    @staticmethod
    def roof(memory: np.ndarray, compute: np.ndarray) -> np.ndarray:
        top = np.maximum(memory, compute)
        low = np.minimum(memory, compute)
        return np.asarray(top * np.sqrt(1.0 + (low / np.maximum(top, 1e-12)) ** 2))

    def forward_ms(
        self, v: Arrays, mode: str, tokens: float, context: float, graph: bool, attn: float = 0.0
    ) -> np.ndarray:
        bw = self.bw_peak * v["mem_efficiency"]
        weights = self.dense * v["dense_scale"] / self.tp + v["replicated_gib"]
        weights = weights + self.expert_gib(v, tokens)
        memory = (weights + context * self.kv_gpu / _GIB) / bw
        tflops = self.tflops_peak * v["compute_efficiency"]
        compute = tokens * self.flops / self.tp / tflops + attn / tflops
        comm = self.n_allreduce * self.allreduce_ms(v, mode, tokens)
        over = v["step_overhead_ms"] + (0.0 if graph else v["eager_overhead_ms"])
        return np.asarray(self.roof(memory, compute) + comm + over)

    def draft_ms(
        self, v: Arrays, mode: str, tokens: float, graph: bool, branches: int = 1
    ) -> np.ndarray:
        bw = self.bw_peak * v["mem_efficiency"]
        memory = v["draft_step_gib"] / bw
        compute = (
            tokens
            * v["draft_step_gib"]
            * _GFLOP_PER_BF16_GIB
            / (self.draft_tflops_peak * v["compute_efficiency"])
        )
        comm = (3 if self.tp > 1 else 0) * self.allreduce_ms(v, mode, tokens)
        eager = 0.0 if graph else v["eager_overhead_ms"] * 0.1
        over = v["draft_step_overhead_ms"] + v["draft_branch_overhead_ms"] * (branches - 1)
        return np.asarray(self.roof(memory, compute) + comm + over + eager)

    def rate(
        self, v: Arrays, config: ServerConfig, load: LoadShape, accept: np.ndarray | None
    ) -> np.ndarray:
        """Output tokens per second in steady state: ``batch`` requests decoding together, each
        prompt prefilled once while the others wait (the simulator's scheduling)."""
        b = load.batch
        graph = (not config.disable_cuda_graph) and b <= max_bs_of(self.layout, config)
        context = b * (load.prompt + load.output / 2.0)
        mode = config.allreduce
        if config.speculative and accept is not None:
            steps = config.speculative_num_steps or 1
            topk = config.speculative_eagle_topk or 1
            n_draft = config.speculative_num_draft_tokens or (steps + 1)
            cycle = self.draft_ms(v, mode, b, graph, topk)
            cycle = cycle + (steps - 1) * self.draft_ms(v, mode, b * topk, graph, topk)
            verify = b * n_draft
            cycle = cycle + self.forward_ms(v, mode, verify, context, graph)
            if topk > 1:
                cycle = cycle + v["tree_overhead_ms_per_token"] * verify
            cycle = cycle + self.draft_ms(v, mode, float(np.mean(b * accept)), graph)
            cycle = cycle + v["spec_cycle_overhead_ms"]
            per_token = cycle / (b * accept)
        else:
            per_token = self.forward_ms(v, mode, b, context, graph) / b
        p = load.prompt
        attn = 4.0 * self.layout.facts.layers * self.layout.facts.hidden * p * (p / 2.0)
        attn = attn / self.tp / 1e9
        prefill = self.forward_ms(v, mode, p, 0.0, False, attn)
        if config.speculative:
            prefill = prefill + self.draft_ms(v, mode, p, False)
        total_ms = load.output * per_token * b + prefill * b
        return np.asarray(1000.0 * b * load.output / total_ms)

    # --- memory ----------------------------------------------------------------------------
    def memory(self, v: Arrays, config: ServerConfig) -> dict[str, np.ndarray]:
        """The start-up memory plan of :func:`autotune.sim._memory.plan_memory`, per particle."""
        f = self.layout.facts
        total = f.gpu_memory_gib
        ones = np.ones_like(v["mem_efficiency"])
        context = v["context_gib"] * ones
        if self.tp > 1:
            mode = effective_mode(self.layout, config.allreduce)
            extra = v.get(f"ar_mem:{mode}")
            if extra is not None:
                context = context + extra
        target = self.weights / self.tp + v["replicated_gib"] * ones
        spec = config.speculative and f.draft_params_b is not None
        draft_w = v["draft_weights_gib"] * ones if spec else 0.0 * ones
        if config.mem_fraction_static is None:
            fraction = self.auto_fraction(v, config) * ones
        else:
            fraction = config.mem_fraction_static * ones
        static = total * fraction
        kv_pool = static - context - target - draft_w
        per_token = self.kv_gpu + (v["draft_kv_bytes"] if spec else 0.0)
        kv_tokens = np.where(kv_pool > 0, np.floor(kv_pool * _GIB / per_token), 0.0)
        graphs = not config.disable_cuda_graph
        tokens = max_bs_of(self.layout, config) * graph_tokens_per_bs(config) if graphs else 0
        graph = v["graph_base_gib"] + v["graph_gib_per_token"] * tokens if graphs else 0 * ones
        free = total - np.maximum(static, context + target + draft_w)
        return {
            "fraction": fraction,
            "context": context,
            "target": target,
            "draft": draft_w,
            "kv_pool": kv_pool,
            "kv_tokens": kv_tokens,
            "graph": graph * ones,
            "activation": v["activation_gib"] * ones,
            "free": free,
        }

    def auto_fraction(self, v: Arrays, config: ServerConfig) -> np.ndarray:
        """SGLang's automatic fraction (:func:`autotune.sim._memory.auto_fraction`)."""
        total_mib = self.layout.facts.gpu_memory_gib * 1024
        max_bs_default, chunk_default = sglang_defaults(self.layout.facts.gpu_memory_gib, self.tp)
        chunk = config.chunked_prefill_size or chunk_default
        max_bs = config.cuda_graph_max_bs or max_bs_default
        reserved = (
            v["auto_base_mib"] + max(chunk, 2048) * 1.5 + max_bs * 2 + config.tp_size / 8 * 1024
        )
        if total_mib > 60 * 1024:
            reserved = np.maximum(reserved, 10 * 1024)
        if config.speculative:
            reserved = reserved + 2048
        return np.asarray(np.round((total_mib - reserved) / total_mib, 3))


ACCEPTANCE_NAMES = ("acc_p1", "acc_decay", "acc_floor", "acc_rank_share", "acc_rank_ratio")


def accept_length(layout: Layout, z: np.ndarray, steps: int, topk: int, n_draft: int) -> float:
    """The simulator's expected accept length of a (steps, top-k, draft tokens) tree for the
    acceptance coefficients of ``z``."""
    vals = {}
    for name in ACCEPTANCE_NAMES:
        c = layout.coefficients[layout.index(name)]
        vals[name[4:]] = c.from_z(float(z[layout.index(name)]))
    acc = Acceptance(temperature_penalty=0.15, **vals)
    model = AcceptanceModel.build(acc, depth=max(1, steps), temperature=0.0, scale=1.0)
    return float(model.tree(steps, topk, n_draft).expected_accept_length)
