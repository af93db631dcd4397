"""Whole studies against the oracle, one per strategy and seed.

Strategies:

``default``
    what ``autotune study start`` does: the baseline, the space's own configurations, SGLang's
    automatic choice, then GPSampler proposals through :class:`AutotuneSampler` (crashes teach
    the sampler, proposals known to fail are refused before launch and replaced).
``tpe`` / ``random``
    Optuna's TPESampler / RandomSampler as they come, after the same baseline and space
    configurations; a proposal SGLang's rules refuse is refused (no GPU time, but a trial).
``grid``
    SGLang's bench_speculative order: steps (1, 3, 5, 7) x top-k (1, 2, 4, 8) x draft tokens
    (2, 4, 8, 16, 32), trees that cannot hold the draft tokens skipped, the other knobs from the
    space's first configuration.
``sglang-auto``
    the configuration a user gets by setting nothing: speculation on, everything else SGLang's
    automatic choice (one trial; a crash is its result).

Ablations of ``default``, each without one of its techniques, measure what each is worth:
``no-informed`` (no SGLang automatic choice enqueued first), ``no-learning`` (crashes neither
shown to the model as infeasible nor turned into lessons), ``no-refusal`` (no refusal before launch
from known incompatibilities, the memory estimate or lessons; SGLang's rules still apply).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune._knobs import ServerConfig
from autotune.engines import Engine, Infeasible
from autotune.searchbench._oracle import Oracle
from autotune.space import SearchSpace, check_rules
from autotune.study._feasibility import Feasibility
from autotune.study._record import OK
from autotune.study._sampler import AutotuneSampler
from autotune.study._setup import informed_configs

STRATEGIES = ("default", "tpe", "random", "grid", "sglang-auto")
ABLATIONS = ("no-informed", "no-learning", "no-refusal")


@dataclass(frozen=True)
class TrialTrace:
    """One trial as the benchmark books it."""

    number: int
    role: str
    status: str  # "ok", a crash category, or "refused"
    measured: float | None
    true_value: float | None
    seconds: float


@dataclass(frozen=True)
class StudyTrace:
    strategy: str
    seed: int
    trials: tuple[TrialTrace, ...]


class StudySimulator:
    """Runs the strategies of one space on one oracle."""

    def __init__(
        self,
        space: SearchSpace,
        engine: Engine,
        oracle: Oracle,
        *,
        noise: float = 0.02,
        n_startup_trials: int = 5,
    ) -> None:
        self.space = space
        self.engine = engine
        self.oracle = oracle
        self.noise = noise
        self.n_startup_trials = n_startup_trials
        self.maximize = space.objective.direction == "maximize"

    def run(self, strategy: str, seed: int, budget: int) -> StudyTrace:
        """One study of ``strategy`` (see the module docstring) with ``budget`` trials."""
        if strategy in ("grid", "sglang-auto"):
            configs = self._grid() if strategy == "grid" else [self._auto()]
            return self._fixed(strategy, seed, budget, configs)
        return self._optuna(strategy, seed, budget)

    # --- Optuna-driven strategies ----------------------------------------------------------
    def _optuna(self, strategy: str, seed: int, budget: int) -> StudyTrace:
        rng = random.Random(f"{seed}:noise")
        feasibility: Feasibility | None = None
        sampler: optuna.samplers.BaseSampler
        default_like = strategy == "default" or strategy in ABLATIONS
        learn = strategy != "no-learning"
        if default_like:
            feasibility = (
                _RulesOnly(self.space, self.engine)
                if strategy == "no-refusal"
                else Feasibility(self.space, self.engine)
            )
            sampler = AutotuneSampler(
                optuna.samplers.GPSampler(
                    seed=seed,
                    n_startup_trials=self.n_startup_trials,
                    warn_independent_sampling=False,
                ),
                self.space,
                feasibility,
                seed=seed,
                n_startup_trials=self.n_startup_trials,
                constraints=self._constraints,
                learn_from_crashes=learn,
            )
        elif strategy == "tpe":
            sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True)
        else:
            sampler = optuna.samplers.RandomSampler(seed=seed)
        study = optuna.create_study(
            direction="maximize" if self.maximize else "minimize", sampler=sampler
        )
        for first, first_role in self._first(strategy):
            study.enqueue_trial(first, user_attrs={"role": first_role})
        traces: list[TrialTrace] = []
        for number in range(budget):
            if feasibility is not None and learn:
                feasibility.learn_from(study)
            trial = study.ask()
            role = str(trial.user_attrs.get("role", "search"))
            params: dict[str, Any] | None
            if role == "baseline":
                params = None
                config = self.space.baseline_config()
            else:
                params = self.space.suggest(trial)
                config = self.space.config_for(params)
            refused = check_rules(config) if params is not None else None
            if refused is None and feasibility is not None and params is not None:
                refused = feasibility.check(config, params)
            if refused is not None:
                trace = TrialTrace(number, role, "refused", None, None, 0.0)
                outcome = "infeasible"
            else:
                answer = self.oracle.measure(config, noise=self.noise, rng=rng)
                true = self.oracle.answer(config).value
                trace = TrialTrace(number, role, answer.status, answer.value, true, answer.seconds)
                outcome = answer.status
            traces.append(trace)
            trial.set_user_attr("outcome", outcome)
            trial.set_constraint("starts", -1.0 if outcome == OK else 1.0)
            if trace.measured is not None:
                study.tell(trial, trace.measured)
            else:
                study.tell(trial, state=TrialState.PRUNED)
        return StudyTrace(strategy, seed, tuple(traces))

    def _first(self, strategy: str) -> Iterator[tuple[dict[str, Any], str]]:
        if self.space.baseline is not None:
            yield {}, "baseline"
        for params in self.space.enqueued:
            yield dict(params), "enqueued"
        if strategy == "default" or (strategy in ABLATIONS and strategy != "no-informed"):
            for params in informed_configs(self.space, self.engine):
                yield params, "informed"

    def _constraints(self, trial: optuna.trial.FrozenTrial) -> list[float]:
        return [-1.0 if trial.user_attrs.get("outcome") == OK else 1.0]

    # --- fixed sequences -------------------------------------------------------------------
    def _fixed(
        self, strategy: str, seed: int, budget: int, configs: list[ServerConfig]
    ) -> StudyTrace:
        rng = random.Random(f"{seed}:noise")
        sequence: list[tuple[str, ServerConfig]] = []
        if self.space.baseline is not None:
            sequence.append(("baseline", self.space.baseline_config()))
        if strategy == "grid":
            sequence += [("enqueued", self.space.config_for(p)) for p in self.space.enqueued]
        sequence += [("search", c) for c in configs]
        traces = []
        for number, (role, config) in enumerate(sequence[:budget]):
            answer = self.oracle.measure(config, noise=self.noise, rng=rng)
            traces.append(
                TrialTrace(
                    number,
                    role,
                    answer.status,
                    answer.value,
                    self.oracle.answer(config).value,
                    answer.seconds,
                )
            )
        return StudyTrace(strategy, seed, tuple(traces))

    def _grid(self) -> list[ServerConfig]:
        base = self._base_params()
        names = {p.name for p in self.space.parameters}
        out = []
        for steps in (1, 3, 5, 7):
            for topk in (1, 2, 4, 8):
                for draft in (2, 4, 8, 16, 32):
                    if steps * topk + 1 < draft:
                        continue
                    if topk == 1 and draft != steps + 1:
                        draft = steps + 1
                    params = dict(base)
                    params.update(
                        speculative_num_steps=steps,
                        speculative_eagle_topk=topk,
                        speculative_num_draft_tokens=draft,
                    )
                    params = {k: v for k, v in params.items() if k in names}
                    inside = (p.contains(params[p.name]) for p in self.space.parameters
                              if p.name in params)  # fmt: skip
                    if not all(inside):
                        continue
                    config = self.space.config_for(params)
                    if config not in out:
                        out.append(config)
        return out

    def _base_params(self) -> dict[str, Any]:
        if self.space.enqueued:
            return dict(self.space.enqueued[0])
        out: dict[str, Any] = {}
        for param in self.space.parameters:
            values = param.values() or ()
            if values:
                out[param.name] = values[len(values) // 2]
        return out

    def _auto(self) -> ServerConfig:
        fixed = {k: v for k, v in self.space.fixed.items() if k == "speculative_algorithm"}
        return ServerConfig.from_params({**fixed, "tp_size": self.space.engine.tp_size})


class _RulesOnly(Feasibility):
    """Only SGLang's rules and the engine release; nothing known or learned."""

    def known(self, config: ServerConfig) -> Infeasible | None:
        return None

    def learned(
        self, config: ServerConfig, params: Mapping[str, Any] | None = None
    ) -> Infeasible | None:
        return None
