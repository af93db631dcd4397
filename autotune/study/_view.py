"""The study as the sampler's model sees it: crashes as infeasible points, phantoms, draft fill.

See :mod:`autotune.study._sampler` for why. Trials are translated into COMPLETE trials of the
model's space; the study itself is never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.space import SearchSpace
from autotune.study._record import OK, is_crash
from autotune.study._reparam import DraftFill


class StudyView:
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
        self._study = study
        self._with_crashes = crashes
        self._space = space
        self._constraints = constraints
        self._fill = fill or DraftFill(space)
        self._required = {p.name for p in space.parameters if not p.when}
        self._phantoms: list[FrozenTrial] = []
        self._worst = 0.0
        self._real = self._build()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def add_phantom(self, params: Mapping[str, Any]) -> None:
        self._phantoms.append(self._frozen(params, None))

    def usable_count(self) -> int:
        return len(self._real) + len(self._phantoms)

    def _get_trials(
        self,
        deepcopy: bool = True,
        states: Sequence[TrialState] | None = None,
        use_cache: bool = False,
    ) -> list[FrozenTrial]:
        running = [
            t
            for t in self._study._get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if self._required <= set(t.params)
        ]
        everything = self._real + self._phantoms + running
        if states is None:
            return list(everything)
        return [t for t in everything if t.state in states]

    def get_trials(
        self, deepcopy: bool = True, states: Sequence[TrialState] | None = None
    ) -> list[FrozenTrial]:
        return self._get_trials(deepcopy, states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self._get_trials()

    @property
    def _storage(self) -> Any:
        return _QuietStorage(self._study._storage)

    def _build(self) -> list[FrozenTrial]:
        finished = self._study._get_trials(
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
            outcome = t.user_attrs.get("outcome")
            if t.state == TrialState.COMPLETE and outcome == OK and t.value is not None:
                out.append(self._frozen(t.params, t))
            elif is_crash(outcome) and self._with_crashes:
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
            system_attrs={"constraints": constraints},
        )


class _QuietStorage:
    """The storage, minus the base sampler's notes about a proposal that may be replaced."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        if key.startswith("relative_params"):
            return
        self._storage.set_trial_system_attr(trial_id, key, value)
