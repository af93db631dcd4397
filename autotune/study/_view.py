"""The study as the sampler's model sees it: crashes as infeasible points, phantoms, draft fill.

See :mod:`autotune.study._sampler` for why. Trials are translated into COMPLETE trials of the
model's space; the study itself is never changed. A measured trial that broke a latency limit
of the space stays what it is, a measured point, with its violated constraint: the sampler
learns the region beyond the limit as infeasible, not as a crash. A multi-objective study's
trials keep every value.

With a load mix (``objective.loads``) the view may be *focused* on one load point: every trial
then shows the base sampler its figure at that point rather than the weighted mean, so that the
proposal aims at that load's own best (see :func:`autotune.study._sampler.load_focus`). The
trials are the same; only the value the model fits changes.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.space import SearchSpace
from autotune.study._optuna import SamplerStudy, constraint_system_attrs, is_proposal_note
from autotune.study._record import Outcome, TrialRecord, outcome_of
from autotune.study._reparam import DraftFill


class StudyView(SamplerStudy):
    """The study as the base sampler sees it (see the module docstring)."""

    def __init__(
        self,
        study: optuna.Study,
        space: SearchSpace,
        constraints: Callable[[FrozenTrial], Sequence[float]] | None,
        fill: DraftFill | None = None,
        *,
        crashes: bool = True,
        focus: str | None = None,
    ) -> None:
        """``focus``: the label of the load point whose figure stands for each trial's value
        (single-objective studies with a load mix only; None: the study's own values)."""
        super().__init__(study)
        self._with_crashes = crashes
        self._focus = focus
        self._space = space
        self._constraints = constraints
        self._fill = fill or DraftFill(space)
        self._required = {p.name for p in space.parameters if not p.when}
        self._phantoms: list[FrozenTrial] = []
        self._worst: list[float] = [0.0] * len(space.objective.metrics)
        self._real = self._build()

    def add_phantom(self, params: Mapping[str, Any]) -> None:
        self._phantoms.append(self._frozen(params, None))

    def usable_count(self) -> int:
        return len(self._real) + len(self._phantoms)

    def sampler_trials(self, states: Container[TrialState] | None) -> list[FrozenTrial]:
        running = [
            t
            for t in self._study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if self._required <= set(t.params)
        ]
        everything = self._real + self._phantoms + running
        if states is None:
            return list(everything)
        return [t for t in everything if t.state in states]

    def keeps_note(self, key: str) -> bool:
        """The base sampler's notes about a proposal that may be replaced are not stored."""
        return not is_proposal_note(key)

    def _build(self) -> list[FrozenTrial]:
        finished = self._study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)
        )
        usable = [t for t in finished if t.params and self._required <= set(t.params)]
        measured = [v for t in usable if t.state == TrialState.COMPLETE and (v := self._values(t))]
        if measured:
            # the worst value of each objective: a crash is as bad as the worst measured trial
            for i, direction in enumerate(self._study.directions):
                column = [v[i] for v in measured]
                maximize = direction == optuna.study.StudyDirection.MAXIMIZE
                self._worst[i] = min(column) if maximize else max(column)
        out = []
        for t in usable:
            outcome = outcome_of(t.user_attrs)
            if t.state == TrialState.COMPLETE and outcome is Outcome.OK and self._values(t):
                out.append(self._frozen(t.params, t))
            elif outcome is not None and outcome.unmeasurable and self._with_crashes:
                out.append(self._frozen(t.params, None))
        return out

    def _values(self, trial: FrozenTrial) -> list[float] | None:
        """The values the model sees for a measured trial: its own, or with a focus its figure
        at the focused load point (None: not measured there)."""
        if self._focus is None:
            return list(trial.values) if trial.values else None
        value = TrialRecord.from_attrs(trial.user_attrs).at_load(self._focus)
        return None if value is None else [value]

    def _frozen(self, params: Mapping[str, Any], source: FrozenTrial | None) -> FrozenTrial:
        """A COMPLETE trial: the measured one (a latency limit it broke as a violated
        constraint), or a crashed one at the worst value of every objective."""
        dists = self._fill.distributions(self._space.distributions())
        params = self._fill.to_model(params)
        constraints: tuple[float, ...]
        if source is not None and self._constraints is not None:
            constraints = tuple(self._constraints(source))
        else:
            constraints = (1.0,) * (1 + len(self._space.objective.constraints))
        shown = None if source is None else self._values(source)
        values = shown if shown else list(self._worst)
        return optuna.trial.create_trial(
            state=TrialState.COMPLETE,
            values=values,
            params={k: params[k] for k in dists if k in params},
            distributions={k: d for k, d in dists.items() if k in params},
            system_attrs=constraint_system_attrs(constraints),
        )
