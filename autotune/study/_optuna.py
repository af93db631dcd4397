"""Every use of Optuna's private API, each a small named function.

Optuna's public API cannot do a few things autotune needs: write a system attribute or a user
attribute of a trial known only by its id (a trial of a dead worker, a trial given back unrun),
fail such a trial, take a chosen WAITING trial rather than the first one, read what
``enqueue_trial`` fixed, hand a sampler a stand-in study. Each of those reaches into Optuna's
internals here, and only here, so that an Optuna release that changes one breaks this module,
whose tests (``tests/study/test_optuna.py``) run each function against a real SQLite study.

Every function names, in its docstring, the internals it relies on. ``pyproject.toml`` keeps
Optuna to one minor release (``optuna>=5.0,<5.1``) for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage

    # the type of BaseStorage.get_all_studies' items, which optuna.study does not export
    from optuna.study._frozen import FrozenStudy as FrozenStudy
    from optuna.trial import FrozenTrial, TrialState

#: The system attribute in which ``Study.enqueue_trial`` stores a queued trial's parameters.
FIXED_PARAMS_KEY = "fixed_params"
#: The system attribute that Optuna's samplers read a trial's constraints from (a sequence).
CONSTRAINTS_KEY = "constraints"


# --- the storage behind a study -------------------------------------------------------------


def cached_storage(rdb: optuna.storages.RDBStorage) -> BaseStorage:
    """``rdb`` behind Optuna's trial cache, as ``optuna.create_study``/``load_study`` wrap it.

    Relies on ``optuna.storages._CachedStorage`` (what ``optuna.storages.get_storage`` wraps an
    ``RDBStorage`` in): a storage that is already a ``BaseStorage`` but not an ``RDBStorage`` is
    used as given, so a wrapper around the RDB storage would otherwise lose the cache.
    """
    from optuna.storages import _CachedStorage

    return _CachedStorage(rdb)


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage a study reads and writes through.

    Relies on ``Study._storage`` (set by ``Study.__init__`` from ``get_storage``).
    """
    storage: BaseStorage = study._storage
    return storage


def trial_id_of(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage's id of a trial (not its number).

    Relies on ``Trial._trial_id`` and ``FrozenTrial._trial_id``.
    """
    return int(trial._trial_id)


def get_trial(study: optuna.Study, trial_id: int) -> FrozenTrial:
    """The trial ``trial_id`` of ``study`` as stored now.

    Relies on ``Study._storage`` and ``BaseStorage.get_trial``.
    """
    return storage_of(study).get_trial(trial_id)


def set_trial_user_attr(study: optuna.Study, trial_id: int, key: str, value: Any) -> None:
    """Set a user attribute of a trial known by its id (``Trial.set_user_attr`` needs a Trial).

    Relies on ``Study._storage`` and ``BaseStorage.set_trial_user_attr``.
    """
    storage_of(study).set_trial_user_attr(trial_id, key, value)


def set_trial_system_attr(study: optuna.Study, trial_id: int, key: str, value: Any) -> None:
    """Set a system attribute of a trial (Optuna has no public way to write one).

    Relies on ``Study._storage`` and ``BaseStorage.set_trial_system_attr``; read them back with
    the public ``FrozenTrial.system_attrs``.
    """
    storage_of(study).set_trial_system_attr(trial_id, key, value)


def set_study_system_attr(study: optuna.Study, key: str, value: Any) -> None:
    """Set a system attribute of a study (Optuna has no public way to write one).

    Relies on ``Study._storage``, ``Study._study_id`` and ``BaseStorage.set_study_system_attr``.
    """
    storage_of(study).set_study_system_attr(study._study_id, key, value)


def study_system_attrs(study: optuna.Study) -> dict[str, Any]:
    """A study's system attributes as stored now (Optuna's ``Study`` no longer exposes them).

    Relies on ``Study._storage``, ``Study._study_id`` and ``BaseStorage.get_study_system_attrs``.
    """
    return dict(storage_of(study).get_study_system_attrs(study._study_id))


def fail_trial(study: optuna.Study, trial_id: int) -> None:
    """Record a trial known by its id as FAIL (a trial of another, dead tuner; a surplus one).

    Relies on ``Study._storage`` and ``BaseStorage.set_trial_state_values``.

    Raises:
        optuna.exceptions.UpdateFinishedTrialError: the trial is already finished.
    """
    from optuna.trial import TrialState

    storage_of(study).set_trial_state_values(trial_id, TrialState.FAIL)


def take_waiting_trial(study: optuna.Study, trial_id: int) -> optuna.Trial | None:
    """The WAITING trial ``trial_id``, taken (now RUNNING) as ``Study.ask`` takes the first one;
    None when another worker took it first.

    Relies on ``BaseStorage.set_trial_state_values`` answering False (or raising
    ``UpdateFinishedTrialError``) for a trial no longer WAITING, on ``Study.ask`` clearing
    ``Study._thread_local.cached_all_trials`` when it takes a trial (done here too), and on the
    ``optuna.Trial(study, trial_id)`` constructor.
    """
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    try:
        taken = storage_of(study).set_trial_state_values(trial_id, TrialState.RUNNING)
    except UpdateFinishedTrialError:
        return None
    if not taken:
        return None
    study._thread_local.cached_all_trials = None
    return optuna.Trial(study, trial_id)


# --- what Optuna keeps in system attributes -------------------------------------------------


def fixed_params(trial: FrozenTrial) -> dict[str, Any] | None:
    """The parameters ``Study.enqueue_trial`` fixed for ``trial``; None for a sampled trial.

    Relies on ``enqueue_trial`` storing them in the system attribute ``fixed_params``.
    """
    fixed = trial.system_attrs.get(FIXED_PARAMS_KEY)
    return dict(fixed) if isinstance(fixed, dict) else None


def constraint_system_attrs(values: Sequence[float]) -> dict[str, Any]:
    """The system attributes that give a trial made with ``optuna.trial.create_trial`` the
    constraint ``values`` (feasible where all are <= 0), as the samplers read them.

    Relies on ``optuna.study._constrained_optimization._CONSTRAINTS_KEY`` (``constraints``,
    the list form that ``FrozenTrial.constraints`` and the samplers read).
    """
    return {CONSTRAINTS_KEY: tuple(values)}


def is_proposal_note(key: str) -> bool:
    """Whether ``key`` is a sampler's note of its relative proposal (kept out of the storage by
    the study view, whose proposal may be replaced before the trial runs).

    Relies on the samplers' key naming. Note: Optuna 5.0 names these notes
    ``tpe:relative_params:N`` (TPE with ``constant_liar``) and ``gp:relative_params:N``
    (GPSampler), which this prefix test does not match; kept as it was (see the tests).
    """
    return key.startswith("relative_params")


# --- a stand-in study for a base sampler -----------------------------------------------------


class SamplerStudy:
    """A stand-in for an ``optuna.Study`` handed to a base sampler: what it reads of the study
    comes from :meth:`sampler_trials`, and its notes go through :meth:`keeps_note`.

    Everything else is the wrapped study's. Relies on Optuna's samplers reading trials through
    ``Study._get_trials(deepcopy, states, use_cache)`` (TPE, GP, QMC, CMA-ES, NSGA) and writing
    their notes through ``Study._storage`` (``set_trial_system_attr``; ``_study_id`` and the
    rest come from the wrapped study).
    """

    def __init__(self, study: optuna.Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def sampler_trials(self, states: Container[TrialState] | None) -> list[FrozenTrial]:
        """The trials the sampler sees (in ``states``, where given)."""
        raise NotImplementedError

    def keeps_note(self, key: str) -> bool:
        """Whether a sampler's system attribute ``key`` is written to the storage."""
        return True

    def _get_trials(
        self,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
        use_cache: bool = False,
    ) -> list[FrozenTrial]:
        return self.sampler_trials(states)

    def get_trials(
        self, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        return self.sampler_trials(states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.sampler_trials(None)

    @property
    def _storage(self) -> Any:
        return _NoteFilter(storage_of(self._study), self.keeps_note)


class _NoteFilter:
    """A study's storage, minus the sampler notes that :meth:`SamplerStudy.keeps_note` drops."""

    def __init__(self, storage: BaseStorage, keeps: Callable[[str], bool]) -> None:
        self._backend = storage
        self._keeps = keeps

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        if self._keeps(key):
            self._backend.set_trial_system_attr(trial_id, key, value)
