"""The twin of a stored study, and the check of a fitted twin against the simulator's truth.

:func:`twin_of_study` reads a study's space and trials (each trial's configuration, outcome,
figures and memory lines) and fits a twin to them, in trial order; the box's facts come from the
simulator profile of a study on the simulator, or from a facts file. :func:`check_twin` runs a
study on the simulator's model through the tuner's own loop (the search benchmark's oracle, with
the memory lines the simulated server prints), fits the twin to the stored study as
``autotune twin export`` does, and compares the exported profile's predictions at random
feasible configurations with the true profile's.
"""

from __future__ import annotations

import dataclasses
import random
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._errors import ConfigError
from autotune._knobs import ServerConfig

if TYPE_CHECKING:
    import optuna

    from autotune.space import SearchSpace
    from autotune.twin import BoxFacts, Twin

#: What ``autotune twin check`` makes the prior's centre wrong by (the search benchmark's).
DEFAULT_ERRORS = {"bandwidth": 0.85, "acceptance": 0.9, "allreduce": 1.5}
#: How many of the compared configurations ``autotune twin check`` lists, worst first.
WORST = 5


def parse_errors(text: str | None) -> dict[str, float]:
    """``bandwidth=0.85,acceptance=0.9`` as a mapping; ``none`` or empty: no errors."""
    from autotune.twin import ERROR_GROUPS

    if text is None:
        return dict(DEFAULT_ERRORS)
    if text.strip().lower() in ("", "none"):
        return {}
    out: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        try:
            factor = float(value)
        except ValueError:
            factor = -1.0
        if name not in ERROR_GROUPS or factor <= 0:
            raise ConfigError(
                f"--twin-errors: {part.strip()!r} is not GROUP=FACTOR",
                hint="groups: " + ", ".join(ERROR_GROUPS) + "; e.g. bandwidth=0.85,allreduce=1.5",
            )
        out[name] = factor
    return out


def facts_of(space: SearchSpace, facts_file: str | None) -> BoxFacts:
    """The box's facts (:func:`autotune.study._twin_sampler.twin_facts`)."""
    from autotune.study._twin_trials import twin_facts

    return twin_facts(space, facts_file)


def twin_of_study(
    study: optuna.Study,
    *,
    facts_file: str | None = None,
    facts: BoxFacts | None = None,
    errors: Mapping[str, float] | None = None,
    seed: int = 0,
) -> Twin:
    """A twin fitted to every finished, launched trial of ``study``, in trial order (the box's
    ``facts``, else those of :func:`facts_of`)."""
    from autotune.study._setup import load_study_space
    from autotune.twin import Twin

    space = load_study_space(study, None)
    box = facts or facts_of(space, facts_file)
    twin = Twin.prior(box, space, seed=seed, errors=errors)
    twin.observe_many(_observations(study, space))
    return twin


def _observations(study: optuna.Study, space: SearchSpace) -> list[tuple[ServerConfig, Any]]:
    """Each finished trial of ``study`` that launched a server, as the twin observes it, in
    trial order."""
    from optuna.trial import TrialState

    from autotune.study._twin_trials import observation

    states = (TrialState.COMPLETE, TrialState.PRUNED)
    return [
        o
        for trial in study.get_trials(deepcopy=False, states=states)
        if (o := observation(space, trial)) is not None
    ]


# --- the check -----------------------------------------------------------------------------
@dataclass
class CheckResult:
    """What ``autotune twin check`` found."""

    profile: str
    trials: int
    measured: int
    errors: list[float]
    prior_errors: list[float]
    #: Of ``trials``, those the survey sampler added.
    surveyed: int = 0
    coefficients: list[tuple[str, float, float, float | None]] = field(default_factory=list)
    predict_ms: float = 0.0
    observe_ms: float = 0.0
    #: Each compared configuration's knobs in words, in the order of ``errors``.
    configs: list[str] = field(default_factory=list)
    #: Where each compared configuration lies beyond what the study measured
    #: (:meth:`~autotune.twin.Twin.beyond`; empty: within it), in the order of ``errors``.
    beyond: list[list[str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        import numpy as np

        def dist(values: list[float]) -> str:
            e = np.abs(np.array(values))
            return f"median {np.median(e):.1%}, p90 {np.quantile(e, 0.9):.1%}, max {e.max():.1%}"

        survey = f", the last {self.surveyed} a survey" if self.surveyed else ""
        out = [
            f"profile {self.profile}: a study of {self.trials} trials ({self.measured} measured"
            f"{survey})",
            f"prior's predictions at {len(self.errors)} random feasible configurations, "
            f"against the true profile's: {dist(self.prior_errors)}",
            f"exported twin's predictions there: {dist(self.errors)}",
            *self._coverage_lines(dist),
            f"twin.predict: {self.predict_ms:.2f} ms per configuration (300 candidates, "
            f"{self.observe_ms:.0f} ms per observe at the end)",
            "",
            f"{'coefficient':<28} {'prior':>10} {'fitted':>10} {'truth':>10}"
            "   (a mode's ar_alpha / ar_beta: its cost over the interconnect's template)",
        ]
        for name, before, after, truth in self.coefficients:
            t = "" if truth is None else f"{truth:10.4g}"
            out.append(f"{name:<28} {before:10.4g} {after:10.4g} {t:>10}")
        return out

    def _coverage_lines(self, dist: Any) -> list[str]:
        """The errors within and beyond what the study measured, and the worst few."""
        if len(self.beyond) != len(self.errors) or len(self.configs) != len(self.errors):
            return []
        inside = [e for e, b in zip(self.errors, self.beyond, strict=True) if not b]
        outside = [e for e, b in zip(self.errors, self.beyond, strict=True) if b]
        out = []
        for words, group in (("within", inside), ("beyond", outside)):
            if group:
                out.append(
                    f"  {len(group)} {words} what the study's started trials covered: {dist(group)}"
                )
        worst = sorted(range(len(self.errors)), key=lambda i: -abs(self.errors[i]))[:WORST]
        out.append(f"  the worst {len(worst)}:")
        for i in worst:
            where = "; beyond: " + ", ".join(self.beyond[i]) if self.beyond[i] else ""
            out.append(f"    {self.errors[i]:+.1%}  {self.configs[i]}{where}")
        return out


def check_twin(
    space_path: str,
    *,
    profile: str | None = None,
    trials: int = 30,
    seed: int = 0,
    configs: int = 20,
    errors: Mapping[str, float] | None = None,
    sampler: str = "gp",
    survey: int = 0,
) -> CheckResult:
    """Run a study on the simulator, export its twin, compare with the truth (module doc);
    ``sampler``: the study's (``gp``: the full ``trials``, spread over the space; ``auto`` or
    ``twin``: the twin-guided search, which stops when it expects no better); ``survey``: then
    that many trials of the survey sampler, as ``study resume --sampler survey`` adds them."""
    import time

    from autotune.engines import create_engine
    from autotune.searchbench._benchmark import prepare
    from autotune.searchbench._oracle import Oracle
    from autotune.twin import BoxFacts, Twin

    space, truth = prepare(space_path, profile)
    engine = create_engine(space.engine)
    oracle = Oracle.for_space(truth, space)
    with tempfile.TemporaryDirectory(prefix="autotune-twin-check-") as tmp:
        folder = Path(tmp)
        name = f"twin-check-{seed}"
        study = _run_study(space, engine, oracle, name, seed, trials, folder, sampler=sampler)
        searched = len(_observations(study, space))
        if survey:
            total = len(study.trials) + survey
            study = _run_study(space, engine, oracle, name, seed, total, folder, sampler="survey")
        start = time.perf_counter()
        facts = BoxFacts.from_profile(truth.profile)
        twin = twin_of_study(study, facts=facts, errors=errors, seed=seed)
        fit_s = time.perf_counter() - start
    prior = Twin.prior(facts, space, seed=seed, errors=errors)
    truth_profile = truth.profile
    fitted = twin.profile()
    from autotune.sim import SimModel

    twin_model, prior_model = SimModel(fitted), SimModel(prior.profile())
    rng = random.Random(f"{seed}:check")
    chosen: list[ServerConfig] = []
    for params in space.sample(2000, seed=rng.randrange(1 << 30)):
        config = space.config_for(params)
        if oracle.feasible(config):
            chosen.append(config)
        if len(chosen) >= configs:
            break
    errs, prior_errs, words, beyond = [], [], [], []
    for config in chosen:
        true = oracle.answer(config).value
        assert true is not None
        errs.append(_value(twin_model, space, config) / true - 1.0)
        prior_errs.append(_value(prior_model, space, config) / true - 1.0)
        words.append(_words(space, config))
        beyond.append(twin.beyond(config))
    cands = [space.config_for(p) for p in space.sample(300, seed=seed + 1)]
    start = time.perf_counter()
    twin.predict(cands)
    predict_ms = (time.perf_counter() - start) * 1000 / len(cands)
    measured = sum(1 for _, r in twin.observations if str(r.outcome) == "ok")
    result = CheckResult(
        profile=truth_profile.name,
        trials=len(twin.observations),
        surveyed=len(twin.observations) - searched,
        measured=measured,
        errors=errs,
        prior_errors=prior_errs,
        predict_ms=predict_ms,
        observe_ms=fit_s * 1000 / max(1, len(twin.observations)),
        configs=words,
        beyond=beyond,
    )
    result.coefficients = _coefficients(prior, twin, truth_profile)
    return result


def _words(space: SearchSpace, config: ServerConfig) -> str:
    """The searched knobs of ``config``, ``name=value`` in the space's order."""
    return ", ".join(f"{p.name}={getattr(config, p.name, None)}" for p in space.parameters)


def _value(model: Any, space: SearchSpace, config: ServerConfig) -> float:
    """The objective ``model`` gives ``config`` over the space's load points (0: a crash)."""
    from autotune.searchbench._oracle import Oracle

    value = Oracle.for_space(model, space).answer(config).value
    return 0.0 if value is None else float(value)


def _coefficients(
    prior: Twin, twin: Twin, truth: Any
) -> list[tuple[str, float, float, float | None]]:
    from autotune.twin import truth_values

    before = {c.name: c.centre for c in prior.layout.coefficients}
    after = twin.centre_values()
    true = truth_values(twin, truth)
    names = [n for n in after if twin.layout.tp > 1 or not n.startswith("ar_")]
    for values in (before, after):
        # a mode's all-reduce cost is the interconnect-wide factor times the mode's own
        for name in names:
            kind, _, mode = name.partition(":")
            if mode and kind in ("ar_alpha", "ar_beta"):
                values[name] = values[name] * values[kind]
    names = [n for n in names if n not in ("ar_alpha", "ar_beta")]
    return [(name, before[name], after[name], true.get(name)) for name in names]


def run_oracle_study(
    space_path: str, folder: Path, *, trials: int, seed: int = 0, profile: str | None = None
) -> str:
    """A study of the tuner's loop on the simulator's model (memory lines included), stored
    in ``folder/check.db``; its SQLAlchemy URL (the study is named ``twin-check-SEED``)."""
    from autotune.engines import create_engine
    from autotune.searchbench._benchmark import prepare
    from autotune.searchbench._oracle import Oracle

    space, truth = prepare(space_path, profile)
    engine = create_engine(space.engine)
    name = f"twin-check-{seed}"
    _run_study(space, engine, Oracle.for_space(truth, space), name, seed, trials, folder)
    return f"sqlite:///{folder / 'check.db'}"


def _run_study(
    space: SearchSpace,
    engine: Any,
    oracle: Any,
    name: str,
    seed: int,
    trials: int,
    folder: Path,
    *,
    sampler: str = "gp",
) -> optuna.Study:
    """A study of ``trials`` trials by the tuner's loop, answered by the oracle, its trials
    carrying the memory lines the simulated server prints, in a SQLite file under
    ``folder`` (a study of that name already there goes on to ``trials`` in all)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from autotune.searchbench._oracle import OracleEvaluator
    from autotune.study._choice import without_twin
    from autotune.study._runner import StudyRunner
    from autotune.study._setup import StudyOptions, finish_setup, set_target
    from autotune.study._space_record import store_space
    from autotune.study._storage import StudyPaths

    sampler = without_twin(sampler, space)
    options = StudyOptions(
        study_name=name, seed=seed, n_trials=trials, progress=False, sampler=sampler
    )
    options = dataclasses.replace(options, confirm=False)
    url = f"sqlite:///{folder / 'check.db'}"
    before = 0
    if name in optuna.get_all_study_names(storage=url):  # go on with it (a survey)
        study = optuna.load_study(study_name=name, storage=url)
        before = len(study.trials)
    else:
        study = optuna.create_study(
            study_name=name,
            storage=url,
            directions=[optuna.study.StudyDirection[d.upper()] for d in space.objective.directions],
        )
        store_space(study, space, None)
        finish_setup(study, space, engine, options)
    target = set_target(study, trials)
    paths = StudyPaths(name, url, folder / f"{name}-artifacts", folder / f"{name}-logs")
    # a study that goes on draws fresh noise (the same seed would repeat its first draws)
    evaluator = OracleEvaluator(oracle, seed=seed + 100_003 * before, engine=engine)
    StudyRunner(study, space, engine, paths, options, target, evaluator=evaluator, quiet=True).run()
    return optuna.load_study(study_name=name, storage=url)
