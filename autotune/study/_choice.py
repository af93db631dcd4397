"""Which Optuna sampler a study uses, decided before anything is created or launched.

Optuna's GPSampler needs PyTorch (its CPU build is enough), which autotune installs only with its
``gp`` extra (``pip install 'autotune[gp]'``): an environment that serves SGLang or vLLM already
has the torch build the engine pins, and a fresh CPU machine need not download one for the
demo. The choice therefore depends on whether torch can be imported here:

* ``auto`` (the default) is the twin-guided sampler where the twin can serve the study
  (:func:`twin_ready`: an SGLang server or its simulator, the box's facts known, one objective
  and no latency limits); elsewhere GPSampler, or TPE for a conditional
  space (GPSampler does not model parameters that exist only for some values of others);
  without torch it is TPE,
  and the choice carries a note that says so once, why, and how to get the GP sampler;
* ``gp`` asked for explicitly without torch is a :class:`~autotune._errors.ConfigError`, raised
  before the study is created, since the user asked for a sampler that cannot run here;
* ``tpe`` and ``random`` never need torch (and never import it);
* ``twin`` is the twin-guided sampler (:mod:`autotune.study._twin_sampler`), which needs the
  box's facts; where it has proposed every speculative combination, ``auto``'s choice goes on;
* ``survey`` is the twin-guided sampler aimed at what the twin knows least rather than at the
  optimum: trials added to a study (``autotune study resume --sampler survey``) so that the
  twin it exports predicts the box where the search never went.

torch is imported only when the choice needs to know (``auto`` on an unconditional space, or
``gp``): ``autotune --help`` and a TPE study stay as fast as without it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune._errors import ConfigError

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler
    from optuna.trial import FrozenTrial

    from autotune.space import SearchSpace
    from autotune.study._feasibility import Feasibility
    from autotune.study._sampler import AutotuneSampler
    from autotune.twin import BoxFacts

SAMPLERS = ("auto", "gp", "tpe", "random", "twin", "survey")
#: The samplers that keep a twin of the box (and need its facts).
TWIN_SAMPLERS = ("twin", "survey")

#: How a user gets the GP sampler (the extra that brings PyTorch).
GP_INSTALL = "pip install 'autotune[gp]'"
#: PyTorch without the CUDA libraries, for a machine without a GPU (pip's default torch on Linux
#: x86_64 is the CUDA build, with several GB of CUDA libraries).
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class SamplerChoice:
    """The sampler a study runs with: ``name`` is ``gp``, ``tpe``, ``random``, ``twin`` or
    ``survey``."""

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


def twin_ready(space: SearchSpace, *, facts_known: bool) -> bool:
    """Whether ``auto`` gives the twin-guided sampler for ``space``: the twin models SGLang
    (a real server whose box's facts are known, ``facts_known``: a ``--facts`` file, or the
    simulator, whose profile gives them) and searches one objective without latency limits (it
    predicts throughput, not latency percentiles; GPSampler learns those limits as
    constraints). Over a load mix it aims at the weighted figure and at each load point alone
    (the report's per-load winners), and stops once none of them can improve."""
    from autotune.engines import engine_class

    objective = space.objective
    if objective.multi or objective.constraints:
        return False
    engine = engine_class(space.engine.kind)
    return engine.twin_models and (facts_known or engine.facts_profile(space.engine) is not None)


def without_twin(requested: str, space: SearchSpace) -> str:
    """The sampler name to run for ``requested`` where ``gp`` means "the tuner without the
    twin": the GP sampler, or TPE where it cannot serve (a conditional space, or no PyTorch
    here); any other name is returned as it is."""
    if requested != "gp":
        return requested
    return choose_sampler("auto", conditional=space.conditional).name


def choose_sampler(
    requested: str,
    *,
    conditional: bool,
    source: str = "--sampler",
    twin: bool = False,
) -> SamplerChoice:
    """The sampler for ``requested`` on a space that is (or is not) ``conditional``;
    ``twin``: the twin can serve this study (:func:`twin_ready`), so ``auto`` is the twin.

    Raises:
        ConfigError: an unknown sampler name, or ``gp`` where PyTorch cannot be imported.
    """
    if requested not in SAMPLERS:
        raise ConfigError(
            f"unknown sampler {requested!r}",
            source=source,
            hint="choose one of: " + ", ".join(SAMPLERS),
        )
    if requested in ("tpe", "random", *TWIN_SAMPLERS):
        return SamplerChoice(requested, requested)
    if requested == "auto" and twin:
        return SamplerChoice(requested, "twin")
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


def build_sampler(
    name: str,
    space: SearchSpace,
    feasibility: Feasibility | None,
    *,
    seed: int | None,
    constraints: Callable[[FrozenTrial], Sequence[float]],
    on_refusal: Callable[[str], None] | None = None,
    n_startup_trials: int = 6,
    learn_from_crashes: bool = True,
    facts: BoxFacts | None = None,
    twin_errors: Mapping[str, float] | None = None,
) -> AutotuneSampler:
    """The study's sampler: ``twin`` is :class:`~autotune.study._twin_sampler.TwinSampler`,
    its twin's prior from ``facts`` (wrong by ``twin_errors``), over the choice ``auto`` makes
    without a twin; ``survey`` the same aimed at what the twin knows least; ``auto`` is that
    twin sampler where ``facts`` are given and :func:`twin_ready` holds, else GPSampler unless
    the space is conditional (then TPE) or PyTorch is missing here (then TPE; see
    :mod:`autotune.study._choice`).

    Both handle a multi-objective study (GPSampler: log expected hypervolume improvement,
    constrained; TPE: its multi-objective split), with the same constraints.

    ``learn_from_crashes=False`` hides crashes from the base sampler's model (the search
    benchmark's ``no-learning`` ablation).

    Raises:
        ConfigError: an unknown sampler, or ``gp`` without PyTorch, or ``twin`` without the
            box's facts or on a multi-objective study.
    """
    import optuna

    from autotune.study._sampler import AutotuneSampler

    twin = facts is not None and twin_ready(space, facts_known=True)
    choice = choose_sampler(name, conditional=space.conditional, twin=twin).name
    if choice in TWIN_SAMPLERS:
        return _twin_sampler(
            space,
            feasibility,
            aim="survey" if choice == "survey" else "optimum",
            seed=seed,
            constraints=constraints,
            on_refusal=on_refusal,
            n_startup_trials=n_startup_trials,
            learn_from_crashes=learn_from_crashes,
            facts=facts,
            errors=twin_errors,
        )
    base: BaseSampler
    if choice == "gp":
        base = optuna.samplers.GPSampler(
            seed=seed, n_startup_trials=n_startup_trials, warn_independent_sampling=False
        )
    elif choice == "tpe":
        base = optuna.samplers.TPESampler(
            seed=seed,
            n_startup_trials=n_startup_trials,
            multivariate=True,
            group=space.conditional,
            constant_liar=True,
        )
    else:
        base = optuna.samplers.RandomSampler(seed=seed)
        n_startup_trials = 10**9
    return AutotuneSampler(
        base,
        space,
        feasibility,
        seed=seed,
        n_startup_trials=n_startup_trials,
        constraints=constraints,
        on_refusal=on_refusal,
        learn_from_crashes=learn_from_crashes,
    )


def _twin_sampler(
    space: SearchSpace,
    feasibility: Feasibility | None,
    *,
    aim: str,
    seed: int | None,
    constraints: Callable[[FrozenTrial], Sequence[float]],
    on_refusal: Callable[[str], None] | None,
    n_startup_trials: int,
    learn_from_crashes: bool,
    facts: BoxFacts | None,
    errors: Mapping[str, float] | None,
) -> AutotuneSampler:
    from autotune.study._twin_sampler import TwinSampler
    from autotune.study._twin_trials import twin_facts
    from autotune.twin import Twin

    if space.objective.multi:
        raise ConfigError(
            "the twin sampler searches one objective; this space has "
            f"{len(space.objective.metrics)}",
            source="--sampler",
            hint="choose --sampler auto for a multi-objective study",
        )
    box = facts or twin_facts(space, None)
    twin = Twin.prior(box, space, seed=seed or 0, errors=errors)
    fallback = build_sampler(
        "auto",
        space,
        feasibility,
        seed=seed,
        constraints=constraints,
        n_startup_trials=n_startup_trials,
        learn_from_crashes=learn_from_crashes,
    )
    return TwinSampler(
        fallback.base,
        space,
        feasibility,
        twin,
        aim=aim,
        seed=seed,
        n_startup_trials=n_startup_trials,
        constraints=constraints,
        on_refusal=on_refusal,
        learn_from_crashes=learn_from_crashes,
    )
