"""SGLang's memory lines at start-up, and what they predict for another configuration.

SGLang prints, per rank, in this order (``model_runner.py``; GiB labelled GB, two decimals)::

    Load weight begin. avail mem=X GB
    Load weight end. ... avail mem=X GB, mem usage=W GB.          (target, then the draft's)
    KV Cache is allocated. #tokens: N, KV size: S GB               (MLA; else K size + V size)
    Memory pool end. avail mem=F GB
    Capture cuda graph bs [1, 2, ..., B]
    Capture cuda graph end. ... mem usage=G GB. avail mem=A GB.    (then the draft's graphs)

SGLang 0.5.17 also says, from its main process before any of them, that its multimodal feature
pool takes memory on the GPU (``Using CUDA IPC for multimodal features: reserving up to 1024 MiB
on base GPU 0 ...``, unless ``--mm-feature-transport cpu``). The pool is taken after SGLang
measured its budget and before it sizes the KV pool, so it comes out of the pool whole: the
``S`` read below already lacks it and ``F`` does not hold it; every start of the same engine
section takes it again, so predictions between them stand as they are. The reading keeps it
(``reserved_gib``) and a refusal names it.

A KV line may name its dtype first (``KV Cache is allocated. dtype: torch.bfloat16, #tokens``).

SGLang sizes the KV pool as what the static fraction ``f`` of a per-GPU budget ``T`` leaves after
the weights, so the memory left outside the pool is ``F = T * (1 - f)``: ``T = F / (1 - f)``.
Everything else follows from that rule, for the same GPUs, tensor-parallel size, all-reduce mode
and draft model:

* the KV pool at another fraction ``f'`` is ``S + T * (f' - f)`` (a start without a draft
  model gives an upper bound for one with it: the draft's weights only take from the pool);
  zero or less and SGLang refuses to start;
* CUDA graphs and activations must fit in ``T * (1 - f')``; the graphs of a configuration at
  least as large in every knob that sizes them (batch size, steps, top-k, draft tokens) take at
  least the ``G`` read, so ``G > T * (1 - f')`` means capture runs out of memory.

A prediction refuses only beyond :data:`MARGIN_GIB` (plus the rounding of the printed figures):
a wrong refusal would cost the optimum, a missed one only a start.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeVar

from autotune._knobs import Infeasible, ServerConfig
from autotune.engines._memory import MemoryReading

#: How far past the edge a prediction must be before a configuration is refused (GiB per GPU).
MARGIN_GIB = 0.5

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RANK = re.compile(r"\bTP(\d+)\b")
_NUM = r"(-?\d+(?:\.\d+)?)"
_LOAD_END = re.compile(rf"Load weight end\..*?avail mem={_NUM} GB, mem usage={_NUM} GB")
_KV = re.compile(
    rf"KV Cache is allocated\..*?#tokens: (\d+), "
    rf"(?:KV size: {_NUM} GB|K size: {_NUM} GB, V size: {_NUM} GB)"
)
_POOL_END = re.compile(rf"Memory pool end\. avail mem={_NUM} GB")
_GRAPH_BS = re.compile(r"Capture cuda graph bs \[([\d,\s]+)\]")
_GRAPH_END = re.compile(
    rf"Capture (?:draft (?:extend )?)?cuda graph end\..*?mem usage={_NUM} GB\. avail mem={_NUM} GB"
)
_RESERVED = re.compile(r"multimodal features: reserving up to (\d+(?:\.\d+)?) MiB")
_ARGS_FRACTION = re.compile(r"server_args=ServerArgs\(.*?\bmem_fraction_static=([\d.]+)")


def read_memory(lines: Iterable[str], config: ServerConfig) -> MemoryReading | None:
    """The memory figures of one start's log ``lines``, launched with ``config``: each figure
    from the lowest rank that printed it; ``None`` when the log gives no fraction or no figure."""
    fraction = config.mem_fraction_static
    seen: dict[int, _RankLines] = {}
    reserved: float | None = None
    for raw in lines:
        line = _ANSI.sub("", raw)
        if fraction is None and (m := _ARGS_FRACTION.search(line)):
            fraction = float(m.group(1))
            continue
        if reserved is None and (m := _RESERVED.search(line)):
            reserved = round(float(m.group(1)) / 1024, 2)
            continue
        rank = _RANK.search(line)
        seen.setdefault(int(rank.group(1)) if rank else -1, _RankLines()).read(line)
    ranks = [seen[r] for r in sorted(seen)]

    def first(pick: Callable[[_RankLines], _T | None]) -> _T | None:
        return next((v for v in map(pick, ranks) if v is not None), None)

    weights = first(lambda r: r.weights or None) or []
    kv = first(lambda r: r.kv)
    free_pool = first(lambda r: r.free_pool)
    graphs = first(lambda r: (r.sizes, r.graphs) if r.sizes and r.graphs else None)
    if fraction is None or not (0.0 < fraction < 1.0) or not (weights or kv or free_pool):
        return None
    total = None if free_pool is None else round(free_pool / (1.0 - fraction), 3)
    return MemoryReading(
        mem_fraction_static=fraction,
        total_gib=total,
        weights_gib=weights[0][1] if weights else None,
        draft_weights_gib=weights[1][1] if len(weights) > 1 else None,
        free_after_weights_gib=first(lambda r: r.free_weights),
        kv_tokens=kv[0] if kv else None,
        kv_gib=kv[1] if kv else None,
        free_after_pool_gib=free_pool,
        graph_max_bs=max(graphs[0]) if graphs else None,
        graph_gib=round(sum(g for g, _ in graphs[1]), 2) if graphs else None,
        free_after_graphs_gib=graphs[1][-1][1] if graphs else None,
        reserved_gib=reserved,
        speculative_algorithm=config.speculative_algorithm,
        speculative_num_steps=config.speculative_num_steps,
        speculative_eagle_topk=config.speculative_eagle_topk,
        speculative_num_draft_tokens=config.speculative_num_draft_tokens,
        tp_size=config.tp_size,
        allreduce=config.allreduce,
        cuda_graph=not config.disable_cuda_graph,
    )


_T = TypeVar("_T")


class _RankLines:
    """The memory figures one rank printed, in the order it printed them."""

    def __init__(self) -> None:
        self.weights: list[tuple[float, float]] = []  # (avail after, usage) per model loaded
        self.free_weights: float | None = None  # avail after the last load before the pool
        self.kv: tuple[int, float] | None = None
        self.free_pool: float | None = None
        self.sizes: list[int] = []
        self.graphs: list[tuple[float, float]] = []  # (usage, avail after) per graph runner

    def read(self, line: str) -> None:
        if m := _LOAD_END.search(line):
            self.weights.append((float(m.group(1)), float(m.group(2))))
            if self.kv is None:
                self.free_weights = float(m.group(1))
        elif (m := _KV.search(line)) and self.kv is None:
            mla, k, v = m.group(2), m.group(3), m.group(4)
            self.kv = (int(m.group(1)), float(mla) if mla else float(k) + float(v))
        elif (m := _POOL_END.search(line)) and self.free_pool is None:
            self.free_pool = float(m.group(1))
        elif (m := _GRAPH_BS.search(line)) and not self.sizes:
            self.sizes = [int(s) for s in m.group(1).replace(",", " ").split()]
        elif m := _GRAPH_END.search(line):
            self.graphs.append((float(m.group(1)), float(m.group(2))))


def memory_refusal(reading: MemoryReading, config: ServerConfig) -> Infeasible | None:
    """Why ``config`` would run out of memory at start-up, predicted from ``reading`` with the
    arithmetic shown; ``None`` when the prediction is not clear (see the module docstring)."""
    fraction = config.mem_fraction_static
    if fraction is None or config.tp_size != reading.tp_size:
        return None
    if config.allreduce != reading.allreduce:
        return None
    return _kv_refusal(reading, config, fraction) or _graph_refusal(reading, config, fraction)


def _kv_refusal(reading: MemoryReading, config: ServerConfig, f: float) -> Infeasible | None:
    same = config.speculative_algorithm == reading.speculative_algorithm
    if not reading.has_pool or not (same or reading.speculative_algorithm == "none"):
        return None
    assert reading.kv_gib is not None and reading.total_gib is not None
    f0, total, kv = reading.mem_fraction_static, reading.total_gib, reading.kv_gib
    free_pool, free_weights = reading.free_after_pool_gib, reading.free_after_weights_gib
    if free_pool is not None and free_weights is not None:
        # what SGLang sized the pool from: the pool and its per-token buffers
        kv = max(kv, round(free_weights - free_pool, 2))
    pool = kv + total * (f - f0)
    slack = _rounding(f0, f)
    if pool >= -(MARGIN_GIB + slack):
        return None
    bound = "" if same else " at most (its draft model takes more)"
    beside = (
        f", {reading.reserved_gib:.2f} GiB taken before it by the multimodal feature pool"
        if reading.reserved_gib
        else ""
    )
    return Infeasible(
        f"its start at mem_fraction_static={f0:g} had {kv:.2f} GiB per GPU for its KV pool "
        f"(of {total:.2f} GiB, {reading.free_after_pool_gib:.2f} GiB left outside it{beside}); at "
        f"{f:g} the pool would be{bound} {kv:.2f} + {total:.2f} x ({f:g} - {f0:g}) = "
        f"{pool:.2f} GiB, no room for one token (refused beyond a margin of "
        f"{MARGIN_GIB + slack:.2f} GiB): raise mem_fraction_static",
        "oom_kv_pool",
        "mem_fraction_static",
    )


def _graph_refusal(reading: MemoryReading, config: ServerConfig, f: float) -> Infeasible | None:
    if config.disable_cuda_graph or not reading.has_graphs or reading.total_gib is None:
        return None
    larger = _at_least_as_large(reading, config)
    if larger is None:
        return None
    assert reading.graph_gib is not None
    f0, total, graph = reading.mem_fraction_static, reading.total_gib, reading.graph_gib
    rest = total * (1.0 - f)
    slack = _rounding(f0, f)
    if graph <= rest + MARGIN_GIB + slack:
        return None
    return Infeasible(
        f"its start at mem_fraction_static={f0:g} captured CUDA graphs {larger} in "
        f"{graph:.2f} GiB per GPU; this configuration's graphs take at least as much, but at "
        f"{f:g} only {total:.2f} x (1 - {f:g}) = {rest:.2f} GiB is left outside the static "
        f"pool for graphs and activations: {graph:.2f} > {rest:.2f} + a margin of "
        f"{MARGIN_GIB + slack:.2f} GiB; lower mem_fraction_static or cuda_graph_max_bs",
        "oom_cuda_graph",
        "mem_fraction_static",
    )


def _at_least_as_large(reading: MemoryReading, config: ServerConfig) -> str | None:
    """How the reading's graphs are described, when ``config`` captures graphs at least as
    large in every knob that sizes them; else ``None``."""
    assert reading.graph_max_bs is not None
    bs = config.cuda_graph_max_bs
    if bs is None or bs < reading.graph_max_bs:
        return None
    shown = f"up to batch size {reading.graph_max_bs}"
    if reading.speculative_algorithm == "none":
        return shown + " without speculation"
    if config.speculative_algorithm != reading.speculative_algorithm:
        return None
    knobs = (
        (reading.speculative_num_steps, config.speculative_num_steps, "steps"),
        (reading.speculative_eagle_topk, config.speculative_eagle_topk, "top-k"),
        (reading.speculative_num_draft_tokens, config.speculative_num_draft_tokens, "draft tokens"),
    )
    parts = []
    for theirs, mine, name in knobs:
        if theirs is None or mine is None or mine < theirs:
            return None
        parts.append(f"{theirs} {name}")
    return f"{shown} with {', '.join(parts)}"


def _rounding(f0: float, f: float) -> float:
    """The most the printed two-decimal figures can be off in a prediction at ``f`` from a
    reading at ``f0``: half a hundredth in each figure, the budget's carried over the change."""
    spread = abs(f - f0) / max(1e-6, 1.0 - f0)
    return 0.005 * (2.0 + spread)


def _one_rank(lines: list[str]) -> list[str]:
    """The lines of the lowest rank that printed memory lines, and the untagged lines."""
    ranks = {int(m.group(1)) for line in lines if "avail mem=" in line if (m := _RANK.search(line))}
    if not ranks:
        return lines
    low = min(ranks)
    return [line for line in lines if (m := _RANK.search(line)) is None or int(m.group(1)) == low]
