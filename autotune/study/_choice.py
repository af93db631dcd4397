"""Which Optuna sampler a study uses, decided before anything is created or launched.

Optuna's GPSampler needs PyTorch (its CPU build is enough), which autotune installs only with its
``gp`` extra (``pip install 'autotune[gp]'``): an environment that serves SGLang or vLLM already
has the torch build the engine pins, and a fresh CPU machine need not download one for the
demo. The choice therefore depends on whether torch can be imported here:

* ``auto`` (the default) is GPSampler, or TPE for a conditional space (GPSampler does not model
  parameters that exist only for some values of others); without torch it is TPE, and the
  choice carries a note that says so once, why, and how to get the GP sampler;
* ``gp`` asked for explicitly without torch is a :class:`~autotune._errors.ConfigError`, raised
  before the study is created, since the user asked for a sampler that cannot run here;
* ``tpe`` and ``random`` never need torch (and never import it);
* ``twin`` is the twin-guided sampler (:mod:`autotune.study._twin_sampler`), which needs the
  box's facts; where it has proposed every speculative combination, ``auto``'s choice goes on.

torch is imported only when the choice needs to know (``auto`` on an unconditional space, or
``gp``): ``autotune --help`` and a TPE study stay as fast as without it.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

from autotune._errors import ConfigError

SAMPLERS = ("auto", "gp", "tpe", "random", "twin")

#: How a user gets the GP sampler (the extra that brings PyTorch).
GP_INSTALL = "pip install 'autotune[gp]'"
#: PyTorch without the CUDA libraries, for a machine without a GPU (pip's default torch on Linux
#: x86_64 is the CUDA build, with several GB of CUDA libraries).
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class SamplerChoice:
    """The sampler a study runs with: ``name`` is ``gp``, ``tpe``, ``random`` or ``twin``."""

    #: What was asked for (``--sampler``): one of :data:`SAMPLERS`.
    requested: str
    name: str
    #: One line for the user when the choice is not what ``auto`` usually gives (None: nothing
    #: to say).
    note: str | None = None


@functools.cache
def torch_missing() -> str | None:
    """Why PyTorch cannot be imported here (the import's own message), or None when it can.

    A broken build (a missing shared library) counts as missing: GPSampler could not run on it.
    """
    try:
        importlib.import_module("torch")
    except (ImportError, OSError) as e:
        return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return None


def choose_sampler(
    requested: str,
    *,
    conditional: bool,
    source: str = "--sampler",
) -> SamplerChoice:
    """The sampler for ``requested`` on a space that is (or is not) ``conditional``.

    Raises:
        ConfigError: an unknown sampler name, or ``gp`` where PyTorch cannot be imported.
    """
    if requested not in SAMPLERS:
        raise ConfigError(
            f"unknown sampler {requested!r}",
            source=source,
            hint="choose one of: " + ", ".join(SAMPLERS),
        )
    if requested in ("tpe", "random", "twin"):
        return SamplerChoice(requested, requested)
    if requested == "auto" and conditional:
        return SamplerChoice(requested, "tpe")
    why = torch_missing()
    if why is None:
        return SamplerChoice(requested, "gp")
    if requested == "gp":
        raise ConfigError(
            f"the GP sampler needs PyTorch, which cannot be imported here ({why})",
            source=source,
            hint=f"install it with {GP_INSTALL} (without a GPU, PyTorch's CPU build is enough: "
            f"{CPU_TORCH}), or choose --sampler tpe",
        )
    return SamplerChoice(
        requested,
        "tpe",
        note=(
            "sampler: TPE, not the GP sampler, because PyTorch cannot be imported here "
            f"({why}); for the GP sampler install it with {GP_INSTALL} (without a GPU, "
            f"PyTorch's CPU build is enough: {CPU_TORCH})"
        ),
    )
