"""The sampler of a study: Optuna's Bayesian samplers, taught by crashes, kept off known failures.

Optuna's GPSampler fits only COMPLETE trials, TPE ranks PRUNED trials without intermediate values
last, and neither knows that a crash happened *because* of a knob. autotune records a start-up
crash truthfully (a PRUNED trial with its ``outcome``) and teaches the sampler through a view of
the study in which:

* every crashed or refused trial appears as a COMPLETE trial with the worst value measured so far
  and a violated constraint (``starts > 0``), so GPSampler's constrained acquisition (LogCEI) and
  TPE's feasibility split both learn the crashed region;
* a measured trial over a latency limit of the space (``objective.constraints``) keeps its
  figures and its violated constraint, so the constrained acquisition learns where the limits
  bind;
* the baseline trial (no speculation, outside the space) is left out;
* proposals the tuner already knows cannot start (the engine's rules, its release, known
  incompatibilities, the memory estimate, lessons of earlier crashes; see
  :mod:`autotune.study._feasibility`) are added as *phantom* crashed trials and the base sampler is
  asked again, so no GPU time and no trial is spent on them.

Proposals are repaired to what the engine would run: the draft tokens are brought within the
engine's bounds for the proposal's steps and top-k (:meth:`Engine.draft_token_bounds`; SGLang:
steps + 1 with top-k 1, never more than the tree holds, steps x top-k + 1). The repaired values are
what the trial records and what is launched.

A proposal that would measure again what a started trial measured (the same knobs but for the
settled ones, :data:`SETTLED_KNOBS`, with a CUDA-graph batch that captures the same load points)
is moved a step in the other knobs to one not measured yet: away from the crash edges the graph
batch and the memory shares change nothing, and re-measuring is the confirmation's work, not the
search's.

With a load mix, every other proposal is aimed at one load point in turn (:func:`load_focus`):
the model then fits the trials' figures at that point alone. The weighted objective's best and
each load's own best (the report's per-load winners, the launch that follows them) are then
both searched for, rather than only the first, whose optimum can lie far from a load's own (a
tree that wins at concurrency 1 can lose to a chain over the mix).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from autotune.engines import Engine, create_engine
from autotune.space import ParamSpec, SearchSpace
from autotune.study._feasibility import Feasibility
from autotune.study._optuna import fixed_params
from autotune.study._record import TrialRecord
from autotune.study._reparam import DraftFill
from autotune.study._view import StudyView

#: How many times a proposal known to fail is replaced before it is recorded as refused.
MAX_ATTEMPTS = 40

#: Knobs that change a started server's speed only where they change which load runs in CUDA
#: graphs (the graph batch) or near the crash edges (the memory shares).
SETTLED_KNOBS = ("cuda_graph_max_bs", "mem_fraction_static", "gpu_memory_utilization")


class AutotuneSampler(BaseSampler):
    """Wraps an Optuna sampler; see the module docstring."""

    def __init__(
        self,
        base: optuna.samplers.BaseSampler,
        space: SearchSpace,
        feasibility: Feasibility | None,
        *,
        seed: int | None = None,
        n_startup_trials: int = 6,
        constraints: Callable[[FrozenTrial], Sequence[float]] | None = None,
        on_refusal: Callable[[str], None] | None = None,
        repair: bool = True,
        learn_from_crashes: bool = True,
        engine: Engine | None = None,
    ) -> None:
        """``engine``: whose draft tree repairs follow (default: the feasibility's, else the
        space's engine)."""
        self.base = base
        self.space = space
        self.feasibility = feasibility
        if engine is None:
            engine = feasibility.engine if feasibility is not None else create_engine(space.engine)
        self.engine = engine
        self.rng = random.Random(seed)
        self.n_startup_trials = n_startup_trials
        self.constraints = constraints
        self.on_refusal = on_refusal
        self.repair_proposals = repair
        self.fill = DraftFill(space, engine)
        self.learn_from_crashes = learn_from_crashes

    # --- Optuna's BaseSampler interface ----------------------------------------------------
    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return {
            name: dist for name, dist in self.space.distributions().items() if not dist.single()
        }

    def sample_relative(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        search_space: dict[str, BaseDistribution],
    ) -> dict[str, Any]:
        if fixed_params(trial) is not None:
            return {}
        view = StudyView(
            study,
            self.space,
            self.constraints,
            self.fill,
            crashes=self.learn_from_crashes,
            focus=load_focus(
                self.space,
                trial.number,
                study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)),
            ),
        )
        seen = _tried(study)
        measured = {self.measures(t.params) for t in _started(study)}
        proposal: dict[str, Any] = {}
        for _ in range(MAX_ATTEMPTS):
            proposal = self._propose(view, trial, search_space)
            if self.measures(proposal) in measured:
                proposal = self._elsewhere(proposal, seen, measured)
            if _key(proposal) in seen:
                proposal = self._neighbour(proposal, seen)
            reason = self._refusal(proposal)
            if reason is None:
                return proposal
            if self.on_refusal is not None:
                self.on_refusal(reason)
            view.add_phantom(proposal)
        # the model keeps proposing what cannot run: repair its last proposal instead
        repaired = self.repair(proposal) if self.repair_proposals else proposal
        if self._refusal(repaired) is None and _key(repaired) not in seen:
            return repaired
        return self._neighbour(repaired, seen)

    def _refusal(self, proposal: Mapping[str, Any]) -> str | None:
        """The category of why ``proposal`` cannot run, or None."""
        if self.feasibility is None:
            return None
        verdict = self.feasibility.check(self.space.config_for(proposal), proposal)
        return None if verdict is None else verdict.category

    def measures(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """What a start with ``params`` measures: its knobs but the settled ones, and for the
        CUDA-graph batch only which of the space's concurrencies it captures (a proposal
        that differs from a measured one in nothing else measures it again)."""
        key = tuple(sorted((k, v) for k, v in _key(params) if k not in SETTLED_KNOBS))
        batch = params.get("cuda_graph_max_bs")
        if batch is None:
            return key
        points = self.space.objective.loads
        caps = [p.concurrency for p in points] if points else [self.space.workload.concurrency]
        if any(c is None for c in caps):  # an open request rate: any batch may matter
            return (*key, ("cuda_graph_max_bs", batch))
        return (*key, ("captures", tuple(c is not None and c <= batch for c in caps)))

    def _elsewhere(
        self, proposal: Mapping[str, Any], seen: set[Any], measured: set[Any]
    ) -> dict[str, Any]:
        """A configuration a step away from ``proposal`` in the knobs that decide what a start
        measures, not measured yet; ``proposal`` itself when there is none nearby."""
        params = [
            p for p in self.space.parameters if p.name in proposal and p.name not in SETTLED_KNOBS
        ]
        if not params:
            return dict(proposal)
        candidate, found = self._walk(
            proposal,
            params,
            lambda c: (
                self.measures(c) not in measured
                and _key(c) not in seen
                and self._refusal(c) is None
            ),
        )
        return candidate if found else dict(proposal)

    def _neighbour(self, proposal: Mapping[str, Any], seen: set[Any]) -> dict[str, Any]:
        """A configuration next to ``proposal`` (one knob one step away) not tried yet."""
        params = [p for p in self.space.parameters if p.name in proposal]
        candidate, _ = self._walk(
            proposal, params, lambda c: _key(c) not in seen and self._refusal(c) is None
        )
        return candidate

    def _walk(
        self,
        proposal: Mapping[str, Any],
        params: Sequence[ParamSpec],
        fits: Callable[[dict[str, Any]], bool],
    ) -> tuple[dict[str, Any], bool]:
        """Random moves of one or two of ``params`` a step from ``proposal`` (repaired), until
        one ``fits``: that candidate and True, or after :data:`MAX_ATTEMPTS` x 4 tries the last
        one and False."""
        candidate = dict(proposal)
        for _ in range(4 * MAX_ATTEMPTS):
            candidate = dict(proposal)
            for _ in range(1 + self.rng.randrange(2)):
                param = self.rng.choice(params)
                candidate[param.name] = _step(param, candidate[param.name], self.rng)
            if self.repair_proposals:
                candidate = self.repair(candidate)
            if fits(candidate):
                return candidate, True
        return candidate, False

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()
        self.rng.seed()

    # --- proposals -------------------------------------------------------------------------
    def _propose(
        self, view: StudyView, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if view.usable_count() >= self.n_startup_trials:
            model_space = self.fill.distributions(search_space)
            proposal = dict(
                self.base.sample_relative(view, trial, model_space)  # type: ignore[arg-type]
            )
            if proposal:
                proposal = self.fill.from_model(proposal)
                # a model's proposal is taken as it is: if SGLang's rules refuse it, the model
                # learns that from the refusal, rather than from a repaired point it never chose
                return self._complete(proposal)
        proposal = self._complete({})
        return self.repair(proposal) if self.repair_proposals else proposal

    def _complete(self, proposal: Mapping[str, Any]) -> dict[str, Any]:
        """Keep the active parameters, drawing the missing ones at random."""
        out: dict[str, Any] = {}
        for param in self.space.parameters:
            if not param.active({**self.space.fixed, **out}):
                continue
            if param.name in proposal:
                out[param.name] = param.normalise(proposal[param.name])
            else:
                out[param.name] = random_value(param, self.rng)
        return out

    def repair(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Bring the draft-token count within the engine's bounds for these steps and top-k."""
        out = dict(params)
        draft = self.space.parameter("speculative_num_draft_tokens")
        if draft is None or draft.name not in out:
            return out
        merged = {**self.space.fixed, **out}
        steps, topk = merged.get("speculative_num_steps"), merged.get("speculative_eagle_topk")
        if not isinstance(steps, int) or not isinstance(topk, int):
            return out
        value = int(out[draft.name])
        low, high = self.engine.draft_token_bounds(steps, topk)
        target = min(max(low, value), high)
        if target != value:
            choices = draft.values()
            if choices is None or target in choices:
                out[draft.name] = target
            else:
                fitting = [c for c in choices if low <= c <= high]
                if fitting:
                    out[draft.name] = min(fitting, key=lambda c: abs(c - target))
        return out


def load_focus(space: SearchSpace, number: int, trials: Sequence[FrozenTrial] = ()) -> str | None:
    """The load point the proposal of trial ``number`` aims at: none for even numbers (the
    weighted objective); for odd ones, in turn, the points whose best measured trial is not the
    weighted objective's best (those whose own best lies elsewhere), or every point while all
    agree. Only single-objective studies with two or more load points are focused."""
    points = space.objective.loads
    if len(points) < 2 or len(space.objective.metrics) > 1 or number % 2 == 0:
        return None
    labels = [p.label for p in points]
    apart = _apart(labels, trials, space.objective.direction == "maximize")
    pool = apart or labels
    return pool[(number // 2) % len(pool)]


def _apart(labels: Sequence[str], trials: Sequence[FrozenTrial], maximize: bool) -> list[str]:
    """The load points whose best measured trial (the baseline aside) is not the best by the
    weighted objective."""
    sign = 1.0 if maximize else -1.0
    records = [
        (t.number, TrialRecord.from_trial(t))
        for t in trials
        if t.state == TrialState.COMPLETE and t.values
    ]
    records = [(n, r) for n, r in records if r.role != "baseline" and r.measured and r.loads]
    weighted = [(sign * r.value, n) for n, r in records if r.value is not None]
    if not weighted:
        return []
    best = max(weighted)[1]
    out = []
    for label in labels:
        at = [(sign * v, n) for n, r in records if (v := r.at_load(label)) is not None]
        if at and max(at)[1] != best:
            out.append(label)
    return out


def _key(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in params.items()))


def _started(study: optuna.Study) -> list[FrozenTrial]:
    """Trials already run or running (not waiting ones), with parameters."""
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    return [t for t in study.get_trials(deepcopy=False, states=states) if t.params]


def _tried(study: optuna.Study) -> set[tuple[tuple[str, Any], ...]]:
    """Parameters of trials already run or running (not waiting ones)."""
    return {_key(t.params) for t in _started(study)}


def _step(param: ParamSpec, value: Any, rng: random.Random) -> Any:
    """One step from ``value``: the next value up or down, or another choice."""
    values = param.values()
    if values is None:
        assert param.low is not None and param.high is not None
        span = (param.high - param.low) * 0.1
        return min(param.high, max(param.low, value + rng.uniform(-span, span)))
    ordered = list(values)
    if param.kind == "categorical" and not all(isinstance(v, (int, float)) for v in ordered):
        others = [v for v in ordered if v != value]
        return rng.choice(others) if others else value
    try:
        i = ordered.index(value)
    except ValueError:
        i = min(range(len(ordered)), key=lambda j: abs(float(ordered[j]) - float(value)))
    j = min(len(ordered) - 1, max(0, i + rng.choice((-1, 1))))
    return ordered[j]


def random_value(param: ParamSpec, rng: random.Random) -> Any:
    """A uniformly drawn value (log-uniform for log parameters)."""
    if param.kind == "categorical":
        return rng.choice(list(param.choices))
    assert param.low is not None and param.high is not None
    if param.log:
        value = math.exp(rng.uniform(math.log(param.low), math.log(param.high)))
        if param.kind == "int":
            return int(min(param.high, max(param.low, round(value))))
        return value
    values = param.values()
    if values is not None:
        return rng.choice(list(values))
    return rng.uniform(param.low, param.high)
