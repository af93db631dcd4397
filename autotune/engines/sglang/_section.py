"""SGLang's part of a space file: the flags autotune sets itself, and the paths it checks.

A space's ``engine.extra_args`` go to ``sglang.launch_server`` as given, so a word there that sets
what autotune sets from the space (the model, the port, a tuned knob) is refused when the space
is read (:func:`owned_flag`). The model folders and the interpreter of a real SGLang are checked
on this machine unless ``engine.check_paths`` is false or a launch prefix runs them elsewhere
(:func:`read_sglang_section`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from autotune._knobs import ServerConfig
from autotune.engines._paths import resolve_paths
from autotune.engines.sglang._dialects import emitted_flags

if TYPE_CHECKING:
    from autotune._document import Section
    from autotune.engines._spec import EngineSpec

#: SGLang flags autotune sets itself, and the key of the space file that decides each.
OWNED_FLAGS: Mapping[str, str] = MappingProxyType(
    {
        "--model-path": "engine.model_path",
        "--model": "engine.model_path",
        "--speculative-draft-model-path": "engine.draft_model_path",
        "--speculative-draft-model": "engine.draft_model_path",
        "--tp-size": "engine.tp_size",
        "--tp": "engine.tp_size",
        "--tensor-parallel-size": "engine.tp_size",
        "--host": "engine.host",
        "--port": "engine.port",
        "--cuda-graph-max-bs-decode": "cuda_graph_max_bs",
        "--disable-custom-all-reduce": "allreduce",
        "--enable-torch-symm-mem": "allreduce",
        "--enable-symm-mem": "allreduce",
        "--enable-mscclpp": "allreduce",
        "--enable-flashinfer-allreduce-fusion": "allreduce",
        "--speculative-ngram-max-bfs-breadth": "speculative_eagle_topk",
        **{
            "--" + k.replace("_", "-"): k
            for k in ServerConfig.knob_names()
            if k not in ("allreduce", "tp_size", "spec_v2")  # spec_v2: an environment variable
        },
    }
)


def owned_flag(arg: str) -> tuple[str, str] | None:
    """The flag autotune sets that ``arg`` (``--name`` or ``--name=value``) would set, and the
    key of the space that decides it; None for any other word.

    argparse (SGLang's and the simulated server's parser) accepts any unambiguous prefix of a
    flag (``--hos`` is ``--host``), so a word that is not exactly a known flag of its own and is
    a prefix of an owned flag counts as that flag.
    """
    name = arg.split("=", 1)[0]
    if not name.startswith("--") or len(name) <= 2:
        return None
    if name in OWNED_FLAGS:
        return name, OWNED_FLAGS[name]
    if name in _known_flags():
        return None
    hits = sorted(flag for flag in OWNED_FLAGS if flag.startswith(name))
    return (hits[0], OWNED_FLAGS[hits[0]]) if hits else None


def _known_flags() -> frozenset[str]:
    return frozenset(emitted_flags())


def read_sglang_section(sec: Section, spec: EngineSpec, *, base: Path) -> EngineSpec:
    """``spec`` with its model folders and interpreter resolved and checked on this machine.

    Relative paths are taken from ``base`` (the space file's folder). With ``check_paths: false``
    the paths are kept as written (relative ones still resolved for the interpreter); behind a
    launch prefix the interpreter is the prefix's business.

    Raises:
        ConfigError: a model path that is not a folder here, an interpreter not found.
    """
    return resolve_paths(sec, spec, base=base, engine="SGLang")
