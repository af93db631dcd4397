"""Canonical knob names and the server configuration they describe.

Search spaces, the engine adapters, the simulator and the trial record all speak of a server
configuration in these names (``speculative_num_steps``, ``allreduce``, ...). Each engine adapter
maps them to the flags and environment of the engine release it drives.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune._errors import ConfigError

#: All-reduce modes between the GPUs of one server, in canonical names; each engine adapter
#: spells a mode in its own flags and environment (``engines/sglang``: SGLang's custom all-reduce
#: by default, NCCL with a forced algorithm, FlashInfer fusion, symmetric-memory variants).
ALLREDUCE_MODES: tuple[str, ...] = (
    "custom",  # the engine's own custom all-reduce kernel (SGLang's default with P2P)
    "nccl",  # NCCL, the engine's own kernel switched off
    "nccl_tree",  # NCCL forced to the Tree algorithm
    "nccl_ring",  # NCCL forced to the Ring algorithm
    "flashinfer_fusion",  # FlashInfer all-reduce fused with the following norm
    "torch_symm_mem",  # PyTorch symmetric-memory all-reduce
    "nccl_symm",  # NCCL symmetric-memory kernels
    "mscclpp",  # MSCCL++
)

#: Speculative algorithms; ``none`` means no speculative decoding.
SPECULATIVE_ALGORITHMS: tuple[str, ...] = (
    "none",
    "EAGLE",
    "EAGLE3",
    "NEXTN",
    "STANDALONE",
    "NGRAM",
)

#: The three numbers SGLang wants all set or all unset.
SPECULATIVE_NUMBERS: tuple[str, ...] = (
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)


@dataclass(frozen=True)
class ServerConfig:
    """One server configuration in canonical names.

    ``None`` means "not set": the engine chooses (for ``mem_fraction_static`` that is SGLang's
    automatic fraction, for the speculative numbers SGLang's automatic choice).
    """

    speculative_algorithm: str = "none"
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    cuda_graph_max_bs: int | None = None
    mem_fraction_static: float | None = None
    #: The share of each GPU's whole memory one instance may use (weights, activations, CUDA
    #: graphs and KV cache together: vLLM's memory knob), unlike SGLang's static pool share.
    gpu_memory_utilization: float | None = None
    allreduce: str = "custom"
    disable_cuda_graph: bool = False
    tp_size: int = 1
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    attention_backend: str | None = None
    page_size: int | None = None
    #: Adaptive speculation: the engine picks the steps at run time among candidate steps.
    speculative_adaptive: bool | None = None
    #: The engine's second speculative worker (overlap-scheduled), where a release offers the
    #: choice; ``None``: the release's default.
    spec_v2: bool | None = None

    @property
    def speculative(self) -> bool:
        """Whether speculative decoding is on."""
        return self.speculative_algorithm != "none"

    @classmethod
    def knob_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_params(cls, params: Mapping[str, Any], *, source: str | None = None) -> ServerConfig:
        """Build a configuration from canonical parameters, checking names and types.

        Raises:
            ConfigError: an unknown name or a value of the wrong type or range; the message names
                the key and what is allowed.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in params.items():
            if key not in fields:
                raise ConfigError(
                    f"unknown knob {key!r}",
                    source=source,
                    hint="known knobs: " + ", ".join(fields),
                )
            values[key] = _coerce(key, raw, source)
        return cls(**values)

    def to_params(self, *, include_unset: bool = False) -> dict[str, Any]:
        """The canonical parameters; unset ones (``None``) only with ``include_unset``."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and not include_unset:
                continue
            out[f.name] = value
        return out

    def replace(self, **changes: Any) -> ServerConfig:
        return dataclasses.replace(self, **changes)


#: Knobs that are a share of GPU memory (a number in (0, 1), or unset), and whether 1 itself is
#: allowed: SGLang's static share stays below it, vLLM's whole-instance share may be all of it.
_FRACTION_KNOBS: Mapping[str, bool] = {"mem_fraction_static": False, "gpu_memory_utilization": True}

_INT_KNOBS = {
    "speculative_num_steps": 1,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 1,
    "cuda_graph_max_bs": 1,
    "tp_size": 1,
    "max_running_requests": 1,
    "chunked_prefill_size": -1,
    "page_size": 1,
}


#: Switches whose unset value (``None``, ``auto``) leaves the choice to the engine.
_OPTIONAL_SWITCHES = frozenset({"speculative_adaptive", "spec_v2"})


def _coerce(key: str, raw: Any, source: str | None) -> Any:
    def bad(allowed: str) -> ConfigError:
        return ConfigError(f"{key}={raw!r} is not allowed: expected {allowed}", source=source)

    if key in _INT_KNOBS:
        if raw is None or (isinstance(raw, str) and raw.lower() in ("auto", "none", "")):
            return None
        if isinstance(raw, bool):
            raise bad("an integer")
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise bad("an integer") from None
        if isinstance(raw, float) and raw != value:
            raise bad("an integer")
        if value < _INT_KNOBS[key]:
            raise bad(f"an integer >= {_INT_KNOBS[key]}")
        return value
    if key in _FRACTION_KNOBS:
        if raw is None or (isinstance(raw, str) and raw.lower() in ("auto", "none", "")):
            return None
        try:
            value_f = float(raw)
        except (TypeError, ValueError):
            raise bad("a number between 0 and 1, or auto") from None
        whole = _FRACTION_KNOBS[key] and value_f == 1.0
        if math.isnan(value_f) or not (0.0 < value_f < 1.0 or whole):
            raise bad("a number between 0 and 1, or auto")
        return value_f
    if key == "allreduce":
        if raw not in ALLREDUCE_MODES:
            raise bad("one of " + ", ".join(ALLREDUCE_MODES))
        return raw
    if key == "speculative_algorithm":
        if raw is None or (isinstance(raw, str) and raw.lower() == "none"):
            return "none"
        if not isinstance(raw, str) or raw.upper() not in SPECULATIVE_ALGORITHMS:
            raise bad("one of " + ", ".join(SPECULATIVE_ALGORITHMS))
        return raw.upper()
    if key in _OPTIONAL_SWITCHES and (
        raw is None or (isinstance(raw, str) and raw.lower() in ("auto", "none", ""))
    ):
        return None
    if key == "disable_cuda_graph" or key in _OPTIONAL_SWITCHES:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false", "1", "0", "yes", "no"):
            return raw.lower() in ("true", "1", "yes")
        if isinstance(raw, int) and raw in (0, 1):
            return bool(raw)
        raise bad("true or false")
    # attention_backend: a free string, as SGLang's own parser checks the choices
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise bad("a string")
    return raw


@dataclass(frozen=True)
class Infeasible:
    """Why a configuration cannot start, judged before launch.

    ``category`` is a crash category (``oom_kv_pool``, ``unsupported_arch``, ``bad_args``, ...)
    or ``infeasible``; ``knob`` names the knob that decides it when one does.
    """

    reason: str
    category: str = "infeasible"
    knob: str | None = None
