"""What one server start said about its memory, per GPU: a :class:`MemoryReading`.

An engine reads it from a start's log (:meth:`autotune.engines.Engine.read_memory`), the study
records it on the trial (the ``memory`` user attribute, :meth:`MemoryReading.to_dict`) and reads
it back on resume (:meth:`MemoryReading.from_dict`); the engine then predicts from it whether
another configuration would run out of memory at start-up
(:meth:`autotune.engines.Engine.memory_refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class MemoryReading:
    """The memory figures of one start, per GPU, in GiB as the log prints them (two decimals),
    and the knobs of the configuration that printed them. ``None``: the log did not say (a start
    that crashed before that phase, a log without the line)."""

    #: The static fraction the start ran at.
    mem_fraction_static: float
    #: The memory the fraction is a share of (what is left outside the static pool, over
    #: ``1 - mem_fraction_static``).
    total_gib: float | None = None
    weights_gib: float | None = None
    draft_weights_gib: float | None = None
    #: What was left after the weights loaded before the KV pool (the pool is sized from it).
    free_after_weights_gib: float | None = None
    kv_tokens: int | None = None
    kv_gib: float | None = None
    free_after_pool_gib: float | None = None
    #: The largest batch size whose CUDA graph was captured, and what all graphs took.
    graph_max_bs: int | None = None
    graph_gib: float | None = None
    free_after_graphs_gib: float | None = None
    #: Memory the server said it reserved on the GPU outside the static fraction's arithmetic
    #: (SGLang 0.5.17's multimodal feature pool); already missing from ``kv_gib``.
    reserved_gib: float | None = None
    # the configuration's knobs that the figures depend on
    speculative_algorithm: str = "none"
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    tp_size: int = 1
    allreduce: str = "custom"
    cuda_graph: bool = True

    @property
    def has_pool(self) -> bool:
        """Whether the KV pool's figures were read (the pool was allocated)."""
        return self.kv_gib is not None and self.total_gib is not None

    @property
    def has_graphs(self) -> bool:
        """Whether the CUDA graphs were captured and their memory read."""
        return self.graph_gib is not None and self.graph_max_bs is not None

    def to_dict(self) -> dict[str, Any]:
        """The reading as a JSON-ready mapping (the trial's ``memory`` attribute)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object) -> MemoryReading | None:
        """The reading a stored mapping holds; ``None`` when it is not one (another version's
        record, a damaged attribute)."""
        if not isinstance(data, Mapping):
            return None
        names = {f.name for f in fields(cls)}
        try:
            reading = cls(**{k: v for k, v in data.items() if k in names})
        except TypeError:
            return None
        for f in fields(cls):
            value = getattr(reading, f.name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if f.name in _NUMBERS and not (number or (value is None and f.name != _FRACTION)):
                return None
        return reading


_FRACTION = "mem_fraction_static"
#: The fields that hold a number (``None`` allowed, except for the fraction).
_NUMBERS = frozenset(
    {
        _FRACTION,
        "total_gib",
        "weights_gib",
        "draft_weights_gib",
        "free_after_weights_gib",
        "kv_tokens",
        "kv_gib",
        "free_after_pool_gib",
        "graph_max_bs",
        "graph_gib",
        "free_after_graphs_gib",
        "reserved_gib",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "tp_size",
    }
)
