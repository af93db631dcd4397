"""Per-GPU memory at start-up, as vLLM accounts it.

vLLM gives one instance a share of each GPU's whole memory (``--gpu-memory-utilization``) and
sizes its KV cache in what the share leaves after everything else it measured::

    kv_cache = utilization * total - context - weights - activation_peak - cuda_graphs

The context is the CUDA context and communication buffers; the weights are the target's shard
and the whole draft; the activation peak is what the profiling run at ``max_num_batched_tokens``
reached (the profile's activation workspace at its default prefill chunk, half of it growing
with the token budget); the CUDA graphs are vLLM's estimate of the graph pool for its capture
sizes (one graph per size up to ``max_cudagraph_capture_size``, each
``1 + num_speculative_tokens`` tokens wide per request). The cache is cut into blocks of
``block_size`` tokens. Start-up fails when the share does not even hold the weights (out of
memory while loading), when no block is left ("No available memory for the cache blocks"), and
when the blocks cannot hold one request of ``max_model_len`` tokens.

The drafter's own CUDA graphs (``num_speculative_tokens`` draft steps per captured size) are
not in the estimate: they are captured after the cache is allocated, in the memory outside the
share, and capture runs out of memory when that is smaller than they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune._knobs import ServerConfig
from autotune.sim._profile import Profile
from autotune.sim._types import MemoryPlan

_GIB = 1024**3


def vllm_capture_sizes(max_size: int) -> list[int]:
    """The batch sizes vLLM captures CUDA graphs for, up to ``max_size``."""
    sizes = [s for s in (1, 2, 4) if s <= max_size]
    sizes += list(range(8, min(max_size, 256) + 1, 8))
    sizes += list(range(272, max_size + 1, 16))
    return sorted(set(sizes)) or [1]


@dataclass(frozen=True)
class VLLMMemory:
    """The memory plan of one vLLM start-up and, when it cannot succeed, why.

    ``failure``: ``weights``, ``no_blocks``, ``max_model_len``, ``graph`` or ``None``.
    """

    plan: MemoryPlan
    failure: str | None
    utilization: float
    activation_gib: float
    graph_estimate_gib: float
    draft_graph_gib: float
    block_size: int
    num_blocks: int
    max_model_len: int
    #: GiB of KV cache one request of ``max_model_len`` tokens needs.
    needed_gib: float
    #: The longest request the cache holds (vLLM's estimated maximum model length).
    estimated_max_len: int
    capture_sizes: tuple[int, ...]


def plan_vllm_memory(
    profile: Profile, config: ServerConfig, *, max_model_len: int | None = None
) -> VLLMMemory:
    """vLLM's accounting of ``config`` on ``profile`` (see the module docstring)."""
    hw, rt = profile.hardware, profile.runtime
    total = hw.memory_gib
    tp = max(1, config.tp_size)
    util = config.gpu_memory_utilization if config.gpu_memory_utilization is not None else 0.9
    mode = hw.effective_allreduce(config.allreduce)[1] if tp > 1 else None
    context = hw.context_gib + (mode.extra_memory_gib if mode is not None else 0.0)
    target = profile.model.weights_gib / tp + profile.model.replicated_gib
    draft = profile.draft(config.speculative_algorithm) if config.speculative else None
    draft_w = draft.weights_gib if draft is not None else 0.0
    chunk = config.chunked_prefill_size or rt.default_chunked_prefill
    activation = rt.activation_gib * (0.5 + 0.5 * max(chunk, 256) / rt.default_chunked_prefill)
    steps = (config.speculative_num_steps or 0) if config.speculative else 0
    graphs = not config.disable_cuda_graph
    max_size = config.cuda_graph_max_bs or 512
    sizes = tuple(vllm_capture_sizes(max_size)) if graphs else ()
    estimate = rt.graph_base_gib + rt.graph_gib_per_token * max_size * (1 + steps) if graphs else 0
    drafts_graphs = graphs and draft is not None and not draft.table  # an n-gram table has none
    draft_graphs = rt.graph_gib_per_token * max_size * steps if drafts_graphs else 0.0
    budget = util * total
    kv = budget - context - target - draft_w - activation - estimate
    per_token = profile.model.kv_bytes_per_gpu(tp) + (draft.kv_bytes_per_token if draft else 0)
    block = config.page_size or 16
    blocks = max(0, int(kv * _GIB // (per_token * block))) if kv > 0 else 0
    length = max_model_len or profile.model.context_length
    needed = length * per_token / _GIB
    estimated = blocks * block
    plan = MemoryPlan(
        total_gib=total,
        mem_fraction_static=util,
        fraction_was_auto=config.gpu_memory_utilization is None,
        context_gib=context,
        target_weights_gib=target,
        draft_weights_gib=draft_w,
        kv_pool_gib=max(0.0, kv),
        kv_tokens=blocks * block,
        graph_gib=estimate + draft_graphs,
        activation_gib=activation,
        free_after_static_gib=total - budget,
    )
    failure: str | None = None
    if context + target + draft_w > total:
        failure = "weights"
    elif kv <= 0 or blocks == 0:
        failure = "no_blocks"
    elif blocks * block < length:
        failure = "max_model_len"
    elif draft_graphs > total - budget:
        failure = "graph"
    return VLLMMemory(
        plan=plan,
        failure=failure,
        utilization=util,
        activation_gib=activation,
        graph_estimate_gib=estimate,
        draft_graph_gib=draft_graphs,
        block_size=block,
        num_blocks=blocks,
        max_model_len=length,
        needed_gib=needed,
        estimated_max_len=estimated,
        capture_sizes=sizes,
    )


def gib2(value: float) -> str:
    """GiB as vLLM prints them (two decimals)."""
    return f"{math.floor(value * 100 + 0.5) / 100:.2f}"
