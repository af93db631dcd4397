"""vLLM's part of a space file: the flags autotune sets itself, and the paths it checks.

A space's ``engine.extra_args`` go to ``vllm serve`` as given, so a word there that sets what
autotune sets from the space (the port, the speculative configuration, a tuned knob) is refused
when the space is read (:func:`owned_flag`). The model folders and the interpreter are checked on
this machine unless ``engine.check_paths`` is false or a launch prefix runs them elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from autotune.engines._paths import resolve_paths

if TYPE_CHECKING:
    from autotune._document import Section
    from autotune.engines._spec import EngineSpec

#: vLLM flags autotune sets itself, and the key of the space file that decides each.
OWNED_FLAGS: Mapping[str, str] = MappingProxyType(
    {
        "--model": "engine.model_path",
        "--host": "engine.host",
        "--port": "engine.port",
        "--tensor-parallel-size": "engine.tp_size",
        "-tp": "engine.tp_size",
        "--speculative-config": "speculative_algorithm",
        "-sc": "speculative_algorithm",
        "--gpu-memory-utilization": "gpu_memory_utilization",
        "--max-num-seqs": "max_running_requests",
        "--max-num-batched-tokens": "chunked_prefill_size",
        "--block-size": "page_size",
        "--attention-backend": "attention_backend",
        "--max-cudagraph-capture-size": "cuda_graph_max_bs",
        "--cuda-graph-sizes": "cuda_graph_max_bs",
        "--enforce-eager": "disable_cuda_graph",
        "--disable-custom-all-reduce": "allreduce",
    }
)


def owned_flag(arg: str) -> tuple[str, str] | None:
    """The flag autotune sets that ``arg`` (``--name`` or ``--name=value``) would set, and the
    key of the space that decides it; None for any other word.

    vLLM's parser accepts ``_`` for ``-`` in option names (``--max_num_seqs``), so both count.
    """
    name = arg.split("=", 1)[0]
    if not name.startswith("-") or len(name) < 2:
        return None
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    key = OWNED_FLAGS.get(name)
    return None if key is None else (name, key)


def read_vllm_section(sec: Section, spec: EngineSpec, *, base: Path) -> EngineSpec:
    """``spec`` with its model folders and interpreter resolved and checked on this machine.

    Raises:
        ConfigError: a model path that is not a folder here, an interpreter not found.
    """
    return resolve_paths(sec, spec, base=base, engine="vLLM")
