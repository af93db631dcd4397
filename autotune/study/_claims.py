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

import contextlib
import logging
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from autotune._errors import StorageError
from autotune.engines import Timeouts
from autotune.server import ProcessIdentity, stop_identity
from autotune.study._optuna import (
    fail_trial,
    fixed_params,
    get_trial,
    set_trial_system_attr,
    set_trial_user_attr,
    trial_id_of,
)
from autotune.study._record import SYS_PROCESS, SYS_RERUN_OF, SYS_TUNER, Outcome

if TYPE_CHECKING:
    import optuna

log = logging.getLogger("autotune.study")

#: System attribute of an interrupted trial: the number of its re-run (queued before it failed).
SYS_RERUN = "autotune:rerun"

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
        if abs(proc.create_time() - float(record["create_time"])) >= 0.01:
            return False  # the pid now belongs to another process
        return proc.status() != psutil.STATUS_ZOMBIE  # killed, not yet reaped by its parent
    except (psutil.Error, KeyError, ValueError, TypeError):
        return False


def dead_here(record: Any) -> bool:
    """Whether ``record`` names a tuner of this host that is verifiably gone."""
    return (
        isinstance(record, dict)
        and record.get("host") == socket.gethostname()
        and not tuner_alive(record)
    )


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
    set_trial_system_attr(study, trial_id, SYS_TUNER, tuner_identity())
    trial = get_trial(study, trial_id)
    claims = count_claims(study, timeouts, exclude=trial.number)
    if claims.total < target:
        return True
    log.info("trial %d not needed: other workers run the study's last trials", trial.number)
    release_surplus(study, trial)
    return False


def recover_stale(
    study: optuna.Study, *, lock: Path | None = None, dead_only: bool = False
) -> list[Recovered]:
    """Stop the servers of RUNNING trials whose tuner is gone, queue them again, fail them.

    Trials of live tuners (this host: same pid and start time; another host: always) are left
    alone; with ``dead_only`` (a live worker watching the others between its trials) only trials
    whose tuner is verifiably gone on this host are taken, not those without a tuner record. A
    recorded server is stopped only if it is still the same process (pid and start time) or
    carries its launch's token; a process that merely reuses the pid is never touched.

    The order survives a kill at any instant: the server is stopped, the re-run is queued (once:
    a re-run already queued for the trial is found by its ``rerun_of``), the stale trial is marked
    with the re-run's number, and only then failed. Workers of one host take the file ``lock``
    (beside the study) while they recover, so two of them never queue one trial twice.
    """
    from optuna.trial import TrialState

    def stale() -> list[optuna.trial.FrozenTrial]:
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if dead_only:
            return [t for t in running if dead_here(t.system_attrs.get(SYS_TUNER))]
        return [t for t in running if not held_by_live_tuner(t)]

    if not stale():  # the usual case, checked without the lock
        return []
    with file_lock(lock):
        return [_recover(study, trial) for trial in stale()]  # (again: another may have been first)


def take_over_dead_run(study: optuna.Study, *, lock: Path | None = None) -> list[str]:
    """Stop every server of ``study`` that no live worker owns, and say so (one line each).

    What ``study resume`` and ``study confirm`` do first, before they read the study's space:
    a tuner killed (``kill -9``, a lost machine) left its trial RUNNING and its server holding
    the GPUs, and a resume that is then refused (the space file changed, deleted, a secret it
    needs missing, a narrower ``--space``) must not leave that server running. Only what the
    trial recorded is used (the tuner's and the server's process identity,
    :func:`recover_stale`), never the space or its secrets: each such trial is stopped, queued
    again and failed, as a resume that goes on would do; so is the server of a confirmation
    whose tuner is gone (:func:`stop_confirmation_server`).
    """
    from autotune.study._record import STUDY_CONFIRMING

    lines = [trial.line() for trial in recover_stale(study, lock=lock)]
    if not tuner_alive(study.user_attrs.get(STUDY_CONFIRMING)):
        pid = stop_confirmation_server(study)
        if pid is not None:
            lines.append(
                f"the server of an interrupted confirmation (pid {pid}) was still running "
                "and has been stopped"
            )
    return lines


def stop_confirmation_server(study: optuna.Study) -> int | None:
    """Stop the server a confirmation recorded (its tuner was killed: it outlived it) and clear
    the record; the pid of a server that still ran and was stopped, else None.

    Only for a confirmation no live worker runs (the caller checks).
    """
    from autotune.study._record import STUDY_CONFIRM_PROCESS

    record = study.user_attrs.get(STUDY_CONFIRM_PROCESS)
    if not isinstance(record, dict):
        return None
    try:
        identity: ProcessIdentity | None = ProcessIdentity.from_dict(record)
    except (StorageError, KeyError, TypeError, ValueError):
        identity = None
    stopped = None
    if identity is not None:
        stopped = stop_identity(identity, term_timeout_s=10.0, kill_timeout_s=10.0)
        if stopped is not None:
            log.warning("stopped the server of an interrupted confirmation (pid %d)", identity.pid)
    study.set_user_attr(STUDY_CONFIRM_PROCESS, None)
    return identity.pid if identity is not None and stopped is not None else None


def _recover(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> Recovered:
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
    role = rerun_then_fail(study, trial, "the tuner stopped while this trial was running")
    return Recovered(trial.number, role, stopped is not None)


def rerun_then_fail(study: optuna.Study, trial: optuna.trial.FrozenTrial, reason: str) -> str:
    """Queue ``trial``'s re-run, then record it as interrupted by ``reason`` and fail it (in that
    order: a kill between leaves the re-run queued, and :func:`requeue` never queues it twice).
    Returns the trial's role."""
    from optuna.exceptions import UpdateFinishedTrialError

    from autotune.study._hooks import pause_at

    role = str(trial.user_attrs.get("role") or "search")
    requeue(study, configuration(trial), trial.number, role, trial_id=trial_id_of(trial))
    pause_at("requeued")  # test hook: a kill here must neither lose nor double the re-run
    for key, value in (("outcome", Outcome.INTERRUPTED.value), ("failure_line", reason)):
        set_trial_user_attr(study, trial_id_of(trial), key, value)
    with contextlib.suppress(UpdateFinishedTrialError):  # another worker failed it meanwhile
        fail_trial(study, trial_id_of(trial))
    return role


def requeue(
    study: optuna.Study,
    params: dict[str, Any],
    number: int,
    role: Any,
    *,
    trial_id: int | None = None,
) -> int:
    """Queue an interrupted trial's configuration to run again (once); the re-run's number.

    A re-run already queued for trial ``number`` (a kill came after queueing it and before the
    trial was failed) is not queued again. The interrupted trial (``trial_id``) is marked with
    the re-run's number (``autotune:rerun``). A baseline re-run goes before the other waiting
    trials: the runner asks for a waiting baseline first (see :func:`waiting_baseline`).
    """
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(SYS_RERUN_OF) == number:
            rerun = t.number
            break
    else:
        baseline = role == "baseline"
        attrs: dict[str, Any] = {"role": "baseline" if baseline else "rerun", SYS_RERUN_OF: number}
        queued = {} if baseline else params
        study.enqueue_trial(queued, user_attrs=attrs, skip_if_exists=False)
        rerun = max(
            t.number
            for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get(SYS_RERUN_OF) == number
        )
    if trial_id is not None:
        set_trial_system_attr(study, trial_id, SYS_RERUN, rerun)
    return rerun


def waiting_baseline(study: optuna.Study) -> int | None:
    """The id of a WAITING baseline trial queued after other waiting trials (a re-run), if any.

    Optuna pops waiting trials in number order; a baseline re-run is queued last, and the runner
    takes it first so that the trials after it carry a speed-up.
    """
    from optuna.trial import TrialState

    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    for i, t in enumerate(waiting):
        if t.user_attrs.get("role") == "baseline":
            return trial_id_of(t) if i > 0 else None
    return None


@contextlib.contextmanager
def file_lock(path: Path | None, *, timeout_s: float = 300.0) -> Iterator[None]:
    """An exclusive lock on ``path`` among this host's tuners (the kernel releases it when its
    holder is killed); nothing for ``None`` or where locks are not available.

    Raises:
        StorageError: another tuner held it for ``timeout_s``.
    """
    if path is None:
        yield
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StorageError(
                        f"another tuner has held the study's lock {str(path)!r} for "
                        f"{timeout_s:.0f} s",
                        hint="wait for it to finish, or stop it",
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def release_surplus(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Give back a trial that other workers' trials made unnecessary, without running it.

    It is recorded as FAIL with the outcome ``surplus``; a configuration it took from the queue
    (the baseline, an enqueued or interrupted one) goes back to the queue.
    """
    fixed = fixed_params(trial)
    if fixed is not None:
        study.enqueue_trial(fixed, user_attrs=dict(trial.user_attrs), skip_if_exists=False)
    set_trial_user_attr(study, trial_id_of(trial), "outcome", Outcome.SURPLUS.value)
    set_trial_user_attr(
        study,
        trial_id_of(trial),
        "failure_line",
        "not run: the study's other workers were already running its last trials",
    )
    fail_trial(study, trial_id_of(trial))


def configuration(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The searched knobs of a trial, also when it stopped before they were all suggested."""
    params = fixed_params(trial) or {}
    params.update(trial.params)
    return params
