"""The strategies of the search benchmark, each a setting of the one study loop.

Every study is a run of the loop of ``autotune study start``
(:class:`~autotune.study._runner.StudyRunner`, set up by
:func:`~autotune.study._setup.finish_setup`) on in-memory storage, with the oracle as its trial
evaluator (:class:`~autotune.searchbench._oracle.OracleEvaluator`). The sampler choice, the first
trials, the refusals before launch, the lessons of crashes, the handling of duplicates and the
recording are the tuner's own code; a strategy only sets the loop's options:

``default``
    ``autotune study start`` as it comes: :func:`~autotune.study.build_sampler`'s choice (on the
    simulator of an SGLang server with one objective and no latency limits, the twin-guided
    sampler; else GPSampler, or TPE for a conditional space), after the baseline, the space's own
    configurations and SGLang's automatic choice.
``gp``
    ``autotune study start --sampler gp``, the tuner's sampler without the twin: GPSampler (TPE
    for a conditional space or without PyTorch) behind :class:`~autotune.study.AutotuneSampler`,
    after the same first trials.
``tpe`` / ``random``
    Optuna's TPESampler (multivariate) / RandomSampler as they come in place of the tuner's
    sampler, after the same baseline and space configurations; only what SGLang's rules refuse
    is refused before launch (a trial, no GPU time), and nothing is learned from crashes.
``grid``
    SGLang's bench_speculative order queued after the baseline and the space's configurations:
    steps (1, 3, 5, 7) x top-k (1, 2, 4, 8) x draft tokens (2, 4, 8, 16, 32), trees that cannot
    hold the draft tokens skipped, the other knobs from the space's first configuration; the
    study ends with the queue.
``twin``
    ``autotune study start --sampler twin``: the twin-guided sampler
    (:mod:`autotune.study._twin_sampler`), its prior built from what a user knows of the
    profile's box (:meth:`~autotune.twin.BoxFacts.from_profile`), wrong by the benchmark's
    ``twin_errors`` (as ``default`` is, where ``auto`` chooses the twin); one trial per
    speculative combination, the search stopped when the best is within 1% of the twin's
    predicted optimum.
``sglang-auto``
    the configuration a user gets by setting nothing: the space with nothing searched, so after
    the baseline one trial runs with speculation on and every searched knob left to SGLang.

Ablations of ``default``, each without one of its techniques, measure what each is worth:
``no-informed`` (no SGLang automatic choice queued first), ``no-learning`` (crashes neither
shown to the model as infeasible nor turned into lessons), ``no-refusal`` (no refusal before
launch from known incompatibilities, the memory estimate or lessons; SGLang's rules still apply).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._errors import Interrupted
from autotune.engines import Engine
from autotune.searchbench._bookkeeping import StudyTrace, trace_of
from autotune.searchbench._oracle import Oracle, OracleEvaluator
from autotune.space import SearchSpace
from autotune.study._choice import without_twin
from autotune.study._runner import StudyRunner
from autotune.study._setup import StudyOptions, finish_setup, set_target
from autotune.study._storage import StudyPaths

if TYPE_CHECKING:
    import optuna

STRATEGIES = ("default", "gp", "tpe", "random", "grid", "sglang-auto", "twin")
ABLATIONS = ("no-informed", "no-learning", "no-refusal")


@dataclass(frozen=True)
class Plan:
    """The loop's options that make one strategy (see the module docstring)."""

    #: Queue SGLang's automatic choice first (``study start`` without ``--no-informed``).
    informed: bool = True
    #: Crashes shown to the sampler's model and turned into lessons.
    learn: bool = True
    #: The tuner's refusals before launch (else SGLang's rules alone).
    refuse: bool = True
    #: ``tpe`` / ``random``: Optuna's sampler as it comes; None: the tuner's (build_sampler).
    sampler: str | None = None
    #: ``grid`` / ``auto``: a fixed sequence of configurations; the study ends with it.
    sequence: str | None = None
    #: The tuner's sampler by this name (``study start --sampler``).
    tuner_sampler: str = "auto"


_PLAIN = Plan(informed=False, learn=False, refuse=False)

PLANS: dict[str, Plan] = {
    "default": Plan(),
    "gp": Plan(tuner_sampler="gp"),
    "tpe": dataclasses.replace(_PLAIN, sampler="tpe"),
    "random": dataclasses.replace(_PLAIN, sampler="random"),
    "grid": dataclasses.replace(_PLAIN, sampler="random", sequence="grid"),
    "sglang-auto": dataclasses.replace(_PLAIN, sampler="random", sequence="auto"),
    "twin": Plan(tuner_sampler="twin"),
    "no-informed": Plan(informed=False),
    "no-learning": Plan(learn=False),
    "no-refusal": Plan(refuse=False),
}


def run_study(
    space: SearchSpace,
    engine: Engine,
    oracle: Oracle,
    strategy: str,
    seed: int,
    budget: int,
    *,
    folder: Path,
    noise: float = 0.02,
    twin_errors: Mapping[str, float] | None = None,
    enqueued: bool = True,
) -> StudyTrace:
    """One study of ``strategy`` with ``budget`` trials, run by the tuner's loop.

    ``folder`` takes the study's debug log and (empty) artifact folder; ``twin_errors``: what
    the twin's prior is wrong by (``twin``); ``enqueued=False`` leaves out the space's own
    configurations (the baseline stays).
    """
    import optuna

    plan = PLANS[strategy]
    if not enqueued:
        space = dataclasses.replace(space, enqueued=())
    if plan.sequence == "auto":
        space = dataclasses.replace(space, parameters=(), enqueued=())
    name = f"{strategy}-{seed}"
    sampler = without_twin(plan.tuner_sampler, space)
    options = StudyOptions(
        study_name=name,
        seed=seed,
        informed=plan.informed,
        n_trials=budget,
        progress=False,
        sampler=sampler,
        twin_errors=tuple(sorted((twin_errors or {}).items())),
    )
    study = optuna.create_study(
        study_name=name,
        storage=optuna.storages.InMemoryStorage(),
        directions=[optuna.study.StudyDirection[d.upper()] for d in space.objective.directions],
    )
    finish_setup(study, space, engine, options)
    if plan.sequence is not None:
        for params in grid_order(space, engine) if plan.sequence == "grid" else [{}]:
            study.enqueue_trial(params, user_attrs={"role": "search"}, skip_if_exists=False)
        budget = min(budget, len(study.get_trials(deepcopy=False)))
    target = set_target(study, budget)
    paths = StudyPaths(name, "in-memory", folder / f"{name}-artifacts", folder / f"{name}-logs")
    runner = StudyRunner(
        study,
        space,
        engine,
        paths,
        options,
        target,
        evaluator=OracleEvaluator(oracle, seed=seed, noise=noise, engine=engine),
        sampler=_plain_sampler(plan.sampler, seed),
        learn=plan.learn,
        refuse=plan.refuse,
        quiet=True,
    )
    try:
        summary = runner.run()
    except Interrupted as e:  # (its hint names `study resume`: nothing of it is kept)
        raise Interrupted(
            f"the search benchmark was stopped during study {name}; nothing was written"
        ) from e
    return trace_of(study, strategy, seed, summary.verdict)


def _plain_sampler(name: str | None, seed: int) -> optuna.samplers.BaseSampler | None:
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return None


def grid_order(space: SearchSpace, engine: Engine) -> list[dict[str, Any]]:
    """The ``grid`` strategy's configurations, in order (see the module docstring); draft
    tokens follow ``engine``'s bounds for each steps and top-k."""
    base = _base_params(space)
    names = {p.name for p in space.parameters}
    out: list[dict[str, Any]] = []
    seen = []
    for steps in (1, 3, 5, 7):
        for topk in (1, 2, 4, 8):
            for draft in (2, 4, 8, 16, 32):
                low, high = engine.draft_token_bounds(steps, topk)
                if draft > high:
                    continue
                draft = max(low, draft)
                params = dict(base)
                params.update(
                    speculative_num_steps=steps,
                    speculative_eagle_topk=topk,
                    speculative_num_draft_tokens=draft,
                )
                params = {k: v for k, v in params.items() if k in names}
                inside = (p.contains(params[p.name]) for p in space.parameters
                          if p.name in params)  # fmt: skip
                if not all(inside):
                    continue
                config = space.config_for(params)
                if config not in seen:
                    seen.append(config)
                    out.append(params)
    return out


def _base_params(space: SearchSpace) -> dict[str, Any]:
    if space.enqueued:
        return dict(space.enqueued[0])
    out: dict[str, Any] = {}
    for param in space.parameters:
        values = param.values() or ()
        if values:
            out[param.name] = values[len(values) // 2]
    return out
