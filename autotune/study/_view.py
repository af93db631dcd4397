"""The study as the sampler's model sees it: crashes as infeasible points, phantoms, draft fill.

See :mod:`autotune.study._sampler` for why. Trials are translated into COMPLETE trials of the
model's space; the study itself is never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.space import SearchSpace
from autotune.study._optuna import SamplerStudy, constraint_system_attrs, is_proposal_note
from autotune.study._record import Outcome, outcome_of
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
    ) -> None:
        super().__init__(study)
        self._with_crashes = crashes
        self._space = space
        self._constraints = constraints
        self._fill = fill or DraftFill(space)
        self._required = {p.name for p in space.parameters if not p.when}
        self._phantoms: list[FrozenTrial] = []
        self._worst = 0.0
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
        measured = [
            t.value for t in usable if t.state == TrialState.COMPLETE and t.value is not None
        ]
        if measured:
            maximize = self._study.direction == optuna.study.StudyDirection.MAXIMIZE
            self._worst = min(measured) if maximize else max(measured)
        out = []
        for t in usable:
            outcome = outcome_of(t.user_attrs)
            if t.state == TrialState.COMPLETE and outcome is Outcome.OK and t.value is not None:
                out.append(self._frozen(t.params, t))
            elif outcome is not None and outcome.unmeasurable and self._with_crashes:
                out.append(self._frozen(t.params, None))
        return out

    def _frozen(self, params: Mapping[str, Any], source: FrozenTrial | None) -> FrozenTrial:
        """A COMPLETE trial: the measured one, or a crashed one at the worst value."""
        dists = self._fill.distributions(self._space.distributions())
        params = self._fill.to_model(params)
        constraints: tuple[float, ...]
        if source is not None and self._constraints is not None:
            constraints = tuple(self._constraints(source))
        else:
            constraints = (1.0,) * (1 + len(self._space.objective.constraints))
        value = self._worst if source is None or source.value is None else source.value
        return optuna.trial.create_trial(
            state=TrialState.COMPLETE,
            value=value,
            params={k: params[k] for k in dists if k in params},
            distributions={k: d for k, d in dists.items() if k in params},
            system_attrs=constraint_system_attrs(constraints),
        )
