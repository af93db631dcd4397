"""Where an engine's model folders and interpreter are, resolved and checked on this machine.

Both engine sections (``engine.kind: sglang`` and ``vllm``) read ``model_path``,
``draft_model_path`` and ``python`` the same way; only the name of the engine in the advice
differs.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune._document import Section
    from autotune.engines._spec import EngineSpec


def resolve_paths(sec: Section, spec: EngineSpec, *, base: Path, engine: str) -> EngineSpec:
    """``spec`` with its model folders and interpreter resolved and checked on this machine.

    Relative paths are taken from ``base`` (the space file's folder). With ``check_paths: false``
    the paths are kept as written (relative ones still resolved for the interpreter); behind a
    launch prefix the interpreter is the prefix's business. ``engine`` names the engine in the
    advice ("the environment SGLang is installed in").

    Raises:
        ConfigError: a model path that is not a folder here, an interpreter not found.
    """
    model, draft, python = spec.model_path, spec.draft_model_path, spec.python
    if spec.check_paths:
        model = _local_dir(sec, "model_path", model, base)
        draft = None if draft is None else _local_dir(sec, "draft_model_path", draft, base)
    if python is not None and not spec.launch_prefix:
        python = _interpreter(sec, python, base, spec.check_paths, engine)
    return dataclasses.replace(spec, model_path=model, draft_model_path=draft, python=python)


def _local_dir(sec: Section, key: str, raw: str, base: Path) -> str:
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = base / path
    if not path.is_dir():
        raise sec.error(
            f"{key} {str(path)!r} is not a directory on this machine",
            key,
            hint="for a hub id or a path on a remote box (launch_prefix), set check_paths: false",
        )
    return str(path)


def _interpreter(sec: Section, raw: str, base: Path, check: bool, engine: str) -> str:
    """A path (relative ones from the space's directory) or a name looked up on PATH."""
    if "/" in raw:
        path = Path(raw).expanduser()
        resolved = str(path if path.is_absolute() else base / path)
        found = Path(resolved).is_file()
    else:
        resolved = raw
        found = shutil.which(raw) is not None
    if check and not found:
        raise sec.error(
            f"python interpreter {resolved!r} not found",
            "python",
            hint=f"name the bin/python of the environment {engine} is installed in",
        )
    return resolved
