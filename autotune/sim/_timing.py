"""Time of one forward pass, one decode step and one speculative cycle.

A forward pass over ``tokens`` tokens of a batch whose requests hold ``context`` tokens of KV
cache in total costs, per GPU (all GPUs work in lock-step under tensor parallelism):

* memory: the dense weights, the routed experts the batch touches (distinct experts grow with
  the token count and saturate at all experts: the MoE term), and the KV cache read by attention,
  at the achieved memory bandwidth;
* compute: 2 x active parameters per token, at the achieved tensor throughput of the weights'
  dtype (GFLOP over TFLOP/s is milliseconds);
* the two combine as a soft roofline, ``(memory**p + compute**p) ** (1/p)`` with the hardware's
  ``roofline_sharpness`` p: a real GPU turns compute-bound gradually (one H200 measured 1.46x the
  one-token time at 128 tokens, where both parts are still below it), not at the corner of
  ``max(memory, compute)``;
* communication: ``allreduces_per_layer x layers`` all-reduces of ``tokens x hidden`` bf16 values,
  each costing the fastest applicable protocol's ``alpha + size x per-KiB cost`` of the mode
  (message-size dependent, as NCCL switches protocols);
* overhead: scheduling and sampling, plus kernel-launch cost when CUDA graphs are not used.

A draft forward is the same soft roofline over the head's weights (``step_gib``, read once per
forward) and its compute (2 flops per weight per token), so drafting for a wide batch costs more
than for one request. A speculative cycle is ``steps`` draft forwards (the first over ``batch``
tokens, the others over ``batch x topk``), a verify forward over ``batch x num_draft_tokens``
tokens, a draft-extend forward over the accepted tokens, tree bookkeeping per verified token,
and the CPU work of a cycle. An NGRAM cycle drafts from an n-gram table on the CPU instead: one
lookup (the drafter's ``step_overhead_ms``, plus ``branch_overhead_ms`` per BFS branch beyond the
first) and no draft forward or draft extend. Every term is a function of the profile's data,
nothing is tabulated.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune._knobs import ServerConfig
from autotune.sim._profile import AllReduceMode, Draft, Profile

_GIB = 1024**3


@dataclass(frozen=True)
class ForwardCost:
    """The parts of one forward pass, milliseconds."""

    memory_ms: float
    compute_ms: float
    comm_ms: float
    overhead_ms: float

    sharpness: float = 2.0

    @property
    def kernel_ms(self) -> float:
        """The matrix products and memory reads: memory and compute as a soft roofline."""
        return soft_roofline(self.memory_ms, self.compute_ms, self.sharpness)

    @property
    def total_ms(self) -> float:
        return self.kernel_ms + self.comm_ms + self.overhead_ms


def soft_roofline(memory_ms: float, compute_ms: float, sharpness: float) -> float:
    """``(memory**p + compute**p) ** (1/p)``: the larger part, plus a share of the smaller one
    that vanishes as their ratio grows (p = ``sharpness``)."""
    top = max(memory_ms, compute_ms)
    if top <= 0.0:
        return 0.0
    low = min(memory_ms, compute_ms)
    return float(top * (1.0 + (low / top) ** sharpness) ** (1.0 / sharpness))


#: FLOPs per weight per token of a matrix product (one multiply, one add), per GiB of bf16.
_GFLOP_PER_BF16_GIB = 2.0 * _GIB / 2 / 1e9


class StepTimer:
    """Forward-pass, decode-step and speculative-cycle times for one configuration."""

    def __init__(self, profile: Profile, config: ServerConfig) -> None:
        self.profile = profile
        self.config = config
        hw = profile.hardware
        self.tp = max(1, config.tp_size)
        self.bw_gib_ms = hw.mem_bw_tbs * hw.mem_efficiency * 1e12 / _GIB / 1e3  # GiB per ms
        self.tflops = hw.tflops(profile.model.compute_dtype)
        self.draft_tflops = hw.tflops("bf16")
        self.sharpness = hw.roofline_sharpness
        known = config.allreduce in hw.allreduce
        self.mode: AllReduceMode | None = (
            hw.effective_allreduce(config.allreduce)[1] if known else None
        )
        self.draft: Draft | None = (
            profile.draft(config.speculative_algorithm) if config.speculative else None
        )
        model = profile.model
        self.kv_bytes = model.kv_bytes_per_gpu(self.tp)
        self.n_allreduce = model.allreduces_per_layer * model.layers

    # --- building blocks -------------------------------------------------------------------
    def allreduce_ms(self, tokens: float) -> float:
        """One all-reduce of ``tokens`` hidden vectors (bf16) across the tensor-parallel group."""
        if self.tp <= 1 or self.mode is None:
            return 0.0
        kib = tokens * self.profile.model.hidden * 2 / 1024
        best: float | None = None
        for proto in self.mode.protocols:
            if proto.max_kib is not None and kib > proto.max_kib:
                continue
            if proto.min_kib is not None and kib < proto.min_kib:
                continue
            cost = proto.alpha_us + kib * proto.us_per_kib
            best = cost if best is None else min(best, cost)
        if best is None:
            best = min(p.alpha_us + kib * p.us_per_kib for p in self.mode.protocols)
        return best / 1000.0

    def expert_gib(self, tokens: float) -> float:
        moe = self.profile.model.moe
        if moe is None or tokens <= 0:
            return 0.0
        eff_tokens = tokens**moe.routing_locality
        frac = moe.experts_per_token / moe.routed_experts
        distinct = moe.routed_experts * (1.0 - (1.0 - frac) ** eff_tokens)
        reads = distinct
        if moe.block_tokens is not None and distinct > 0:
            # each block of an expert's tokens streams the expert's weights again
            per_expert = tokens * moe.experts_per_token / distinct
            reads = distinct * max(1.0, per_expert / moe.block_tokens)
            reads += moe.shared_experts * max(1.0, tokens / moe.block_tokens)
        else:
            reads += moe.shared_experts
        return float(reads * moe.expert_gib * moe.moe_layers / self.tp)

    def forward(self, tokens: float, context: float, *, graph: bool) -> ForwardCost:
        """Target-model forward over ``tokens`` tokens attending to ``context`` cached tokens."""
        model = self.profile.model
        rt = self.profile.runtime
        weights_gib = model.dense_gib / self.tp + model.replicated_gib + self.expert_gib(tokens)
        kv_gib = context * self.kv_bytes / _GIB
        memory_ms = (weights_gib + kv_gib) / self.bw_gib_ms
        compute_ms = tokens * model.flops_per_token_g / self.tp / self.tflops
        comm_ms = self.n_allreduce * self.allreduce_ms(tokens)
        overhead = rt.step_overhead_ms + (0.0 if graph else rt.eager_overhead_ms)
        return ForwardCost(memory_ms, compute_ms, comm_ms, overhead, self.sharpness)

    def draft_forward_ms(self, tokens: float, *, graph: bool, branches: int = 1) -> float:
        draft = self.draft
        if draft is None:
            return 0.0
        memory_ms = draft.step_gib / self.bw_gib_ms
        compute_ms = tokens * draft.step_gib * _GFLOP_PER_BF16_GIB / self.draft_tflops
        kernel_ms = soft_roofline(memory_ms, compute_ms, self.sharpness)
        comm_ms = draft.collectives_per_step * self.allreduce_ms(tokens)
        eager = 0.0 if graph else self.profile.runtime.eager_overhead_ms * 0.1
        overhead = draft.step_overhead_ms + draft.branch_overhead_ms * (branches - 1)
        return kernel_ms + comm_ms + overhead + eager

    # --- steps -----------------------------------------------------------------------------
    def decode_ms(self, batch: int, context: float, *, graph: bool) -> float:
        return self.forward(batch, context, graph=graph).total_ms

    def cycle_ms(self, batch: int, context: float, accepted_tokens: float, *, graph: bool) -> float:
        """One speculative cycle for ``batch`` requests holding ``context`` KV tokens in total.

        ``accepted_tokens`` is the number of tokens the batch gains in the cycle (bonus
        included); the draft-extend pass runs over them.
        """
        cfg = self.config
        steps = cfg.speculative_num_steps or 1
        topk = cfg.speculative_eagle_topk or 1
        n_draft = cfg.speculative_num_draft_tokens or (steps + 1)
        verify_tokens = batch * n_draft
        if self.draft is not None and self.draft.table:
            lookup_ms = self.draft.step_overhead_ms + self.draft.branch_overhead_ms * (topk - 1)
            verify_ms = self.forward(verify_tokens, context, graph=graph).total_ms
            if topk > 1:
                verify_ms += self.profile.runtime.tree_overhead_ms_per_token * verify_tokens
            return lookup_ms + verify_ms + self.profile.runtime.spec_cycle_overhead_ms
        draft_ms = self.draft_forward_ms(batch, graph=graph, branches=topk)
        draft_ms += (steps - 1) * self.draft_forward_ms(batch * topk, graph=graph, branches=topk)
        verify_ms = self.forward(verify_tokens, context, graph=graph).total_ms
        if topk > 1:
            # a tree (not a chain) is verified with a custom attention mask
            verify_ms += self.profile.runtime.tree_overhead_ms_per_token * verify_tokens
        extend_ms = self.draft_forward_ms(accepted_tokens, graph=graph)
        return draft_ms + verify_ms + extend_ms + self.profile.runtime.spec_cycle_overhead_ms

    def prefill_ms(self, tokens: int, context: float) -> float:
        """A prefill forward (never under CUDA graphs) of ``tokens`` new tokens."""
        model = self.profile.model
        cost = self.forward(tokens, context, graph=False)
        # attention over the chunk itself and its prefix: 4 * layers * hidden flops per pair
        attn_flops = 4.0 * model.layers * model.hidden * tokens * (context + tokens / 2.0)
        attn_ms = attn_flops / self.tp / (self.tflops * 1e12) * 1e3
        kernel_ms = soft_roofline(cost.memory_ms, cost.compute_ms + attn_ms, self.sharpness)
        total = kernel_ms + cost.comm_ms + cost.overhead_ms
        if self.draft is not None and not self.draft.table:
            total += self.draft_forward_ms(tokens, graph=False)
        return total
