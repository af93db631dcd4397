"""Per-GPU memory at start-up, as SGLang accounts it.

After the CUDA context and communication buffers (``context_gib``) and the weights of the target
(``weights_gib / tp``) and of the draft head are loaded, the KV pool gets what the static
fraction leaves::

    kv_pool = total * mem_fraction_static - context - target_weights - draft_weights

and SGLang refuses to start when that holds no token. Everything outside the static pool,
``total * (1 - mem_fraction_static)``, must hold the activation workspace and the CUDA-graph
pool, which grows with the captured batch sizes and, under speculation, with the verify width
(``max_bs * num_draft_tokens``) and the draft width (``max_bs * topk``); capture fails with an
out-of-memory error otherwise. Too low a fraction starves the KV pool, too high a fraction starves
the graphs: the feasible band depends on the other knobs.

Memory that another part of the server reserves on the GPU after SGLang measured its budget
and before it sizes the pool (``reserved_gib``: SGLang 0.5.17's multimodal feature pool, 1 GiB
unless ``--mm-feature-transport cpu``) is missing from what the weights leave, so it comes out of
the KV pool whole; what is left outside the static pool stays ``total * (1 - fraction)``.

The automatic fraction follows SGLang's reserved-memory rule (see :func:`auto_fraction`) with
the profile's constants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune._knobs import ServerConfig
from autotune.sim._profile import Profile
from autotune.sim._types import MemoryPlan

_GIB = 1024**3


@dataclass(frozen=True)
class MemoryVerdict:
    """The memory plan and, when start-up cannot succeed, why."""

    plan: MemoryPlan
    failure: str | None  # "weights", "kv_pool", "graph", "activations" or None
    graph_tokens: int
    max_bs: int
    #: For a graph failure: the captured batch size at which capture runs out.
    failing_bs: int | None = None
    shortfall_gib: float = 0.0


def capture_sizes(max_bs: int) -> list[int]:
    """The batch sizes SGLang captures CUDA graphs for, up to ``max_bs``."""
    sizes = [b for b in (1, 2, 4, 8, 12) if b <= max_bs]
    sizes += list(range(16, max_bs + 1, 8))
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sorted(set(sizes))


def graph_tokens_per_bs(config: ServerConfig) -> int:
    """Tokens a captured graph of batch size 1 holds (verify width plus draft width)."""
    if not config.speculative:
        return 1
    steps = config.speculative_num_steps or 1
    topk = config.speculative_eagle_topk or 1
    n_draft = config.speculative_num_draft_tokens or (steps + 1)
    return n_draft + topk


def max_bs_of(profile: Profile, config: ServerConfig) -> int:
    if config.cuda_graph_max_bs is not None:
        return config.cuda_graph_max_bs
    default = profile.runtime.default_cuda_graph_max_bs
    if config.speculative and config.max_running_requests is None:
        return min(default, 48)
    return default


def auto_fraction(profile: Profile, config: ServerConfig) -> float:
    """SGLang's automatic ``mem_fraction_static`` for this configuration.

    SGLang's rule (``ServerArgs._handle_gpu_memory_settings``), in its order: a reserve of
    metadata, prefill activations (1.5 MiB per token of the prefill chunk, at least 2,048),
    CUDA graphs (2 MiB per request of the decode graphs' largest batch, before speculation caps
    the batch at 48) and parallel buffers (1 GiB per 8 ranks); at least 10 GiB on a GPU of more
    than 60 GiB; then 2 GiB more for an EAGLE draft head and its graphs, on top of that floor.
    The fraction is what the reserve leaves, to three decimals. The profile gives the constants
    (``runtime.auto_fraction``): SGLang's are 512, 1.5, 2, 1,024, 2,048 MiB and 10 GiB; a
    profile may add what its model's kernels reserve on top (``base_mib``).
    """
    af = profile.runtime.auto_fraction
    total_mib = profile.hardware.memory_gib * 1024
    chunk = config.chunked_prefill_size or profile.runtime.default_chunked_prefill
    max_bs = config.cuda_graph_max_bs or profile.runtime.default_cuda_graph_max_bs
    reserved_mib = (
        af.base_mib
        + max(chunk, 2048) * af.per_chunk_token_mib
        + max_bs * af.per_graph_bs_mib
        + config.tp_size / 8 * af.per_tp_mib
    )
    if total_mib > 60 * 1024:
        reserved_mib = max(reserved_mib, af.floor_gib * 1024)
    if config.speculative:
        reserved_mib += af.speculative_mib
    return round((total_mib - reserved_mib) / total_mib, 3)


def plan_memory(
    profile: Profile, config: ServerConfig, *, reserved_gib: float = 0.0
) -> MemoryVerdict:
    hw = profile.hardware
    rt = profile.runtime
    total = hw.memory_gib
    tp = max(1, config.tp_size)
    mode = hw.effective_allreduce(config.allreduce)[1] if tp > 1 else None
    context = hw.context_gib + (mode.extra_memory_gib if mode is not None else 0.0)
    target = profile.model.weights_gib / tp + profile.model.replicated_gib
    draft = profile.draft(config.speculative_algorithm) if config.speculative else None
    draft_w = draft.weights_gib if draft is not None else 0.0
    was_auto = config.mem_fraction_static is None
    fraction = (
        auto_fraction(profile, config)
        if config.mem_fraction_static is None
        else config.mem_fraction_static
    )
    static = total * fraction
    kv_pool = static - context - target - draft_w - reserved_gib
    kv_per_token = profile.model.kv_bytes_per_gpu(tp)
    if draft is not None:
        kv_per_token += draft.kv_bytes_per_token
    kv_tokens = max(0, int(kv_pool * _GIB // kv_per_token)) if kv_pool > 0 else 0
    graphs = not config.disable_cuda_graph
    max_bs = max_bs_of(profile, config)
    per_bs = graph_tokens_per_bs(config)
    graph_tokens = max_bs * per_bs if graphs else 0
    graph_gib = rt.graph_base_gib + rt.graph_gib_per_token * graph_tokens if graphs else 0.0
    free_after = total - max(static, context + target + draft_w + reserved_gib)
    plan = MemoryPlan(
        total_gib=total,
        mem_fraction_static=fraction,
        fraction_was_auto=was_auto,
        context_gib=context,
        target_weights_gib=target,
        draft_weights_gib=draft_w,
        kv_pool_gib=max(0.0, kv_pool),
        kv_tokens=kv_tokens,
        graph_gib=graph_gib,
        activation_gib=rt.activation_gib,
        free_after_static_gib=free_after,
        reserved_gib=reserved_gib,
    )
    if context + target + draft_w + reserved_gib > total:
        return MemoryVerdict(plan, "weights", graph_tokens, max_bs)
    if kv_tokens <= 0:
        return MemoryVerdict(plan, "kv_pool", graph_tokens, max_bs)
    if graphs and rt.activation_gib + graph_gib > free_after:
        room = free_after - rt.activation_gib - rt.graph_base_gib
        failing = max_bs
        for bs in capture_sizes(max_bs):
            if rt.graph_gib_per_token * bs * per_bs > room:
                failing = bs
                break
        shortfall = rt.activation_gib + graph_gib - free_after
        return MemoryVerdict(plan, "graph", graph_tokens, max_bs, failing, shortfall)
    if not graphs and rt.activation_gib > free_after:
        shortfall = rt.activation_gib - free_after
        return MemoryVerdict(plan, "activations", 0, max_bs, None, shortfall)
    return MemoryVerdict(plan, None, graph_tokens, max_bs)


def gib_str(value: float) -> str:
    """Memory as SGLang prints it (GiB labelled GB, two decimals)."""
    return f"{value:.2f}"


def mib_ceil(value_gib: float) -> float:
    return math.ceil(value_gib * 1024 / 2) * 2
