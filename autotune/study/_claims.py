"""Which trials belong to a live tuner, and how several workers share one study's target.

Every trial a tuner runs carries that tuner's identity (host, pid, start time) in the system
attribute ``autotune:tuner``. A RUNNING trial whose tuner is gone was interrupted by a crash or a
``kill -9`` of its tuner: resuming fails it, stops its server and queues it again. A RUNNING trial
of a live tuner belongs to that tuner and is never touched by another one.

Several workers (``autotune study start`` on one machine, ``autotune study resume`` on others,
all on one PostgreSQL storage) aim together for the study's target: a trial that a live worker is
running counts as claimed. A worker asks for a new trial only while the finished and claimed
trials fall short of the target, and checks again once its trial exists; a worker that finds the
target already covered then (another worker asked at the same moment) gives its trial back
unrun, so the study ends with exactly the requested number of finished trials.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import psutil

from autotune._errors import StorageError
from autotune.engines import Timeouts
from autotune.server import ProcessIdentity, stop_identity
from autotune.study._record import INTERRUPTED, SURPLUS, SYS_PROCESS, SYS_RERUN_OF, SYS_TUNER
from autotune.study._storage import retry_locked

if TYPE_CHECKING:
    import optuna

log = logging.getLogger("autotune.study")

#: A RUNNING trial without a tuner record is a worker's trial between its creation and the
#: record (milliseconds); one that stays like that longer than this lost its tuner.
NO_RECORD_GRACE_S = 120.0


def tuner_identity() -> dict[str, Any]:
    """This tuner's record: host, pid and process start time."""
    me = psutil.Process()
    return {"host": socket.gethostname(), "pid": me.pid, "create_time": me.create_time()}


def tuner_alive(record: Any) -> bool:
    """Whether the tuner that ran a trial is still running (on this host: checked exactly)."""
    if not isinstance(record, dict):
        return False
    if record.get("host") != socket.gethostname():
        return True  # another machine's worker: it cannot be checked from here
    try:
        proc = psutil.Process(int(record["pid"]))
        return abs(proc.create_time() - float(record["create_time"])) < 0.01
    except (psutil.Error, KeyError, ValueError, TypeError):
        return False


def held_by_live_tuner(trial: optuna.trial.FrozenTrial, timeouts: Timeouts | None = None) -> bool:
    """Whether a RUNNING trial belongs to a tuner that still runs.

    A tuner on another machine cannot be checked from here: its trial counts as held, or, given
    the engine's ``timeouts``, as held while it is younger than a trial can last.
    """
    record = trial.system_attrs.get(SYS_TUNER)
    if record is None:
        return _younger_than(trial, NO_RECORD_GRACE_S)
    remote = isinstance(record, dict) and record.get("host") != socket.gethostname()
    if remote and timeouts is not None:
        return _younger_than(trial, longest_trial_s(timeouts))
    return tuner_alive(record)


def longest_trial_s(timeouts: Timeouts) -> float:
    """The longest a trial can run: start-up, benchmark, stop (TERM, then KILL), GPU release."""
    return timeouts.startup_s + timeouts.benchmark_s + 2 * timeouts.stop_s + timeouts.gpu_release_s


def _younger_than(trial: optuna.trial.FrozenTrial, seconds: float) -> bool:
    started = trial.datetime_start
    return started is not None and (datetime.now() - started).total_seconds() < seconds


@dataclass(frozen=True)
class Recovered:
    """A trial whose tuner was gone: failed, queued again, its server stopped if it still ran."""

    number: int
    role: str
    server_stopped: bool

    def line(self) -> str:
        stopped = (
            "; its server was still running and has been stopped" if self.server_stopped else ""
        )
        return (
            f"trial {self.number} [{self.role}] interrupted: its tuner stopped while it ran; "
            f"it runs again{stopped}"
        )


@dataclass(frozen=True)
class Claims:
    """Finished trials and the trials live tuners are running (other than the asking one)."""

    finished: int
    running: int

    @property
    def total(self) -> int:
        return self.finished + self.running


def count_claims(
    study: optuna.Study, timeouts: Timeouts | None = None, *, exclude: int | None = None
) -> Claims:
    """The study's finished trials and the RUNNING trials of live tuners but ``exclude``."""
    from optuna.trial import TrialState

    finished = running = 0
    for trial in study.get_trials(deepcopy=False):
        if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
            finished += 1
        elif (
            trial.state == TrialState.RUNNING
            and trial.number != exclude
            and held_by_live_tuner(trial, timeouts)
        ):
            running += 1
    return Claims(finished, running)


def claim(study: optuna.Study, trial_id: int, target: int, timeouts: Timeouts) -> bool:
    """Record a trial just asked for as this tuner's; check the target still needs it.

    False when finished trials and other live tuners' trials already cover ``target``: the
    trial is then given back unrun (see :func:`release_surplus`).
    """
    storage = study._storage
    retry_locked(lambda: storage.set_trial_system_attr(trial_id, SYS_TUNER, tuner_identity()))
    trial = storage.get_trial(trial_id)
    claims = retry_locked(lambda: count_claims(study, timeouts, exclude=trial.number), what="read")
    if claims.total < target:
        return True
    log.info("trial %d not needed: other workers run the study's last trials", trial.number)
    release_surplus(study, trial)
    return False


def recover_stale(study: optuna.Study) -> list[Recovered]:
    """Fail RUNNING trials whose tuner is gone, stop their servers, and queue them again.

    Trials of live tuners (this host: same pid and start time; another host: always) are left
    alone. A recorded server is stopped only if it is still the same process (pid and start
    time) or carries its launch's token; a process that merely reuses the pid is never touched.
    """
    from optuna.trial import TrialState

    recovered: list[Recovered] = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if held_by_live_tuner(trial):
            continue
        stopped = None
        record = trial.system_attrs.get(SYS_PROCESS)
        if isinstance(record, dict):
            try:
                identity = ProcessIdentity.from_dict(record)
                stopped = stop_identity(identity, term_timeout_s=10.0, kill_timeout_s=10.0)
            except StorageError as e:
                log.warning("trial %d: unreadable process record: %s", trial.number, e)
        if stopped is not None:
            log.warning("stopped the server left by interrupted trial %d", trial.number)
        storage = study._storage
        retry_locked(partial(storage.set_trial_user_attr, trial._trial_id, "outcome", INTERRUPTED))
        retry_locked(
            partial(
                storage.set_trial_user_attr,
                trial._trial_id,
                "failure_line",
                "the tuner stopped while this trial was running",
            )
        )
        retry_locked(partial(storage.set_trial_state_values, trial._trial_id, TrialState.FAIL))
        role = str(trial.user_attrs.get("role") or "search")
        requeue(study, configuration(trial), trial.number, role)
        recovered.append(Recovered(trial.number, role, stopped is not None))
    return recovered


def requeue(study: optuna.Study, params: dict[str, Any], number: int, role: Any) -> None:
    """Queue an interrupted trial's configuration to run again."""
    if role == "baseline":
        retry_locked(
            lambda: study.enqueue_trial({}, user_attrs={"role": "baseline", SYS_RERUN_OF: number})
        )
        return
    retry_locked(
        lambda: study.enqueue_trial(
            params, user_attrs={"role": "rerun", SYS_RERUN_OF: number}, skip_if_exists=False
        )
    )


def release_surplus(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Give back a trial that other workers' trials made unnecessary, without running it.

    It is recorded as FAIL with the outcome ``surplus``; a configuration it took from the queue
    (the baseline, an enqueued or interrupted one) goes back to the queue.
    """
    from optuna.trial import TrialState

    fixed = trial.system_attrs.get("fixed_params")
    if isinstance(fixed, dict):
        attrs = dict(trial.user_attrs)
        retry_locked(
            lambda: study.enqueue_trial(dict(fixed), user_attrs=attrs, skip_if_exists=False)
        )
    storage = study._storage
    retry_locked(partial(storage.set_trial_user_attr, trial._trial_id, "outcome", SURPLUS))
    retry_locked(
        partial(
            storage.set_trial_user_attr,
            trial._trial_id,
            "failure_line",
            "not run: the study's other workers were already running its last trials",
        )
    )
    retry_locked(partial(storage.set_trial_state_values, trial._trial_id, TrialState.FAIL))


def configuration(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The searched knobs of a trial, also when it stopped before they were all suggested."""
    fixed = trial.system_attrs.get("fixed_params")
    params = dict(fixed) if isinstance(fixed, dict) else {}
    params.update(trial.params)
    return params
