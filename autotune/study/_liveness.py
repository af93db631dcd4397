"""Which tuners of a study are alive: a heartbeat per worker, in the study's own storage.

Every tuner that runs a study (``study start``, ``resume``, ``confirm``) writes one study
attribute of its own, ``autotune:worker:HOST:PID:START``, when it begins and again every
:data:`HEARTBEAT_S` seconds from a thread: its host, pid and start time, the time of its last
beat, what it is doing (searching, with the trial it runs, or confirming) and, when it ends,
that it ended. One key per worker, so workers never overwrite each other's record.

A worker is *alive* when its record says it has not ended and, on this host, its process (pid
and start time) still runs; on another host, when its last beat is younger than
:data:`STALE_S`. A worker that did not end and is not alive is *dead since its last beat* (a
``kill -9``, a power cut, a lost machine). ``study status`` shows this; ``study resume`` of a
study with a live worker refuses unless ``--join`` says a second worker is meant.

The same thread watches the SQLite file under the study: a file deleted or replaced under a
running tuner (its trials would go to a file nobody can open any more) is noticed within a beat
and stops the study between trials with a message (:meth:`Heartbeat.check_storage`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._errors import StorageError

if TYPE_CHECKING:
    import optuna

log = logging.getLogger("autotune.study")

#: Study attributes of the workers' records start with this.
WORKER_PREFIX = "autotune:worker:"
#: Seconds between two beats of a running tuner.
HEARTBEAT_S = 5.0
#: A worker on another host whose last beat is older than this is taken for dead (it cannot be
#: checked by pid from here).
STALE_S = 60.0


@dataclass(frozen=True)
class Worker:
    """One tuner's record, as read from the study (see the module docstring)."""

    host: str
    pid: int
    create_time: float
    started: float
    beat: float
    #: ``search`` or ``confirming``.
    phase: str
    trial: int | None
    ended: bool
    alive: bool
    #: The most rounds of the confirmation it runs (``confirming`` only).
    max_rounds: int | None = None

    @property
    def state(self) -> str:
        """``running``, ``confirming``, ``dead`` (stopped without ending) or ``ended``."""
        if self.alive:
            return "confirming" if self.phase == "confirming" else "running"
        return "ended" if self.ended else "dead"

    def where(self) -> str:
        return f"pid {self.pid} on {self.host}"


def utc(epoch: float) -> str:
    """``2026-12-07 19:52:01 UTC``."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _alive(record: dict[str, Any], now: float) -> bool:
    from autotune.study._claims import tuner_alive

    if record.get("ended"):
        return False
    if record.get("host") == socket.gethostname():
        return tuner_alive(record)
    beat = record.get("beat")
    return isinstance(beat, (int, float)) and now - float(beat) < STALE_S


def workers(study: optuna.Study) -> list[Worker]:
    """Every worker that ever ran ``study`` with a heartbeat, oldest first."""
    now = time.time()
    out = []
    for key, record in study.user_attrs.items():
        if not key.startswith(WORKER_PREFIX) or not isinstance(record, dict):
            continue
        try:
            trial = _int_or_none(record.get("trial"))
            out.append(
                Worker(
                    host=str(record["host"]),
                    pid=int(record["pid"]),
                    create_time=float(record["create_time"]),
                    started=float(record.get("started") or record["beat"]),
                    beat=float(record["beat"]),
                    phase=str(record.get("phase") or "search"),
                    trial=trial,
                    ended=bool(record.get("ended")),
                    alive=_alive(record, now),
                    max_rounds=_int_or_none(record.get("max_rounds")),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue  # a damaged record: nothing to say about it
    return sorted(out, key=lambda w: w.started)


def live_workers(study: optuna.Study, *, exclude_me: bool = True) -> list[Worker]:
    """The workers of ``study`` alive now (this tuner left out with ``exclude_me``)."""
    me = os.getpid(), socket.gethostname()
    return [w for w in workers(study) if w.alive and not (exclude_me and (w.pid, w.host) == me)]


def refuse_if_running(study: optuna.Study, *, command: str) -> None:
    """Refuse to run ``study`` next to a live worker of it (``resume``, ``confirm`` without
    ``--join``): on one box two servers would run at once (out of memory, or measurements
    polluted by each other).

    Raises:
        StorageError: a worker of the study is alive (named, with its last beat).
    """
    live = live_workers(study)
    if not live:
        return
    w = live[0]
    doing = "confirming it" if w.state == "confirming" else "running it"
    trial = f" (trial {w.trial})" if w.trial is not None and w.state == "running" else ""
    ago = max(0.0, time.time() - w.beat)
    raise StorageError(
        f"study {study.study_name!r} is already running: its tuner ({w.where()}) is alive and "
        f"{doing}{trial}, last heartbeat {ago:.0f} s ago",
        hint=f"wait for it (`autotune study status --study-name {study.study_name}`), stop it "
        f"(Ctrl-C in its terminal, or kill {w.pid}), or add --join to `{command}` to run a "
        "second worker on purpose",
    )


class Heartbeat:
    """This tuner's record in the study, written now and then every ``interval_s`` from a
    thread; also the watch on the SQLite file under the study (``db``)."""

    def __init__(
        self, study: optuna.Study, *, db: Path | None = None, interval_s: float = HEARTBEAT_S
    ) -> None:
        import psutil

        me = psutil.Process()
        self.study = study
        self.interval_s = interval_s
        self.record: dict[str, Any] = {
            "host": socket.gethostname(),
            "pid": me.pid,
            "create_time": me.create_time(),
            "started": time.time(),
            "beat": time.time(),
            "phase": "search",
            "trial": None,
            "ended": False,
        }
        self.key = f"{WORKER_PREFIX}{self.record['host']}:{me.pid}:{me.create_time():.2f}"
        self.db = db
        self._db_id = _file_id(db) if db is not None else None
        self._storage_problem: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the record ----------------------------------------------------------------------------
    def write(self) -> None:
        """Write the record now (its beat: now)."""
        with self._lock:
            self.record["beat"] = time.time()
            record = dict(self.record)
        self.study.set_user_attr(self.key, record)

    def doing(self, phase: str, trial: int | None = None, *, max_rounds: int | None = None) -> None:
        """What this tuner does now (``search`` with its trial, or ``confirming`` with the most
        rounds of the confirmation)."""
        now = {"phase": phase, "trial": trial, "max_rounds": max_rounds}
        with self._lock:
            changed = any(self.record.get(k) != v for k, v in now.items())
            self.record.update(now)
        if changed:
            with contextlib.suppress(Exception):  # the next beat writes it
                self.write()

    # --- the thread -----------------------------------------------------------------------------
    def start(self) -> None:
        """Write the record and start beating (idempotent)."""
        if self._thread is not None:
            return
        self.write()
        self._thread = threading.Thread(target=self._beat, name="autotune-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and record that this tuner ended (a clean exit, whatever its cause)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
        with self._lock:
            self.record["ended"] = True
        if self.check_storage_quietly() is None:
            with contextlib.suppress(Exception):  # the storage is gone: nothing to mark
                self.write()

    def __enter__(self) -> Heartbeat:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.check_storage_quietly() is not None:
                continue  # nothing to write into: the main loop stops the study
            try:
                self.write()
            except Exception as e:  # a storage that failed: the main loop meets it too
                log.debug("heartbeat not written: %s", e)

    # --- the storage file -----------------------------------------------------------------------
    def check_storage_quietly(self) -> str | None:
        """What happened to the SQLite file under the study (None: it is still the one opened).
        Remembered once seen."""
        if self._storage_problem is None and self.db is not None and self._db_id is not None:
            now = _file_id(self.db)
            if now is None:
                self._storage_problem = "was deleted"
            elif now != self._db_id:
                self._storage_problem = "was replaced by another file"
        return self._storage_problem

    def check_storage(self) -> None:
        """Stop the study if its SQLite file was deleted or replaced under it.

        Raises:
            StorageError: naming the file, what happened, and that nothing was recorded since.
        """
        problem = self.check_storage_quietly()
        if problem is None:
            return
        name = self.study.study_name
        raise StorageError(
            f"the study database {str(self.db)!r} {problem} while study {name!r} ran: trials "
            "recorded since then are in no file, so the study stopped",
            hint="restore the file from a copy (or start the study again) and continue with "
            f"`autotune study resume --study-name {name}`; copy NAME.db only while no tuner runs",
        )


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


@dataclass(frozen=True)
class Liveness:
    """Whether a study runs now, as ``study status`` says it.

    ``state``: ``running``, ``confirming``, ``dead`` (its last tuner stopped without ending:
    ``kill -9``, a lost machine) or ``idle`` (no tuner runs it; the last one ended).
    """

    state: str
    lines: tuple[str, ...]
    #: The workers alive now.
    live: tuple[Worker, ...] = ()
    #: When the study's dead tuner beat last (``dead`` only), seconds since the epoch.
    dead_since: float | None = None


def liveness(study: optuna.Study) -> Liveness:
    """What ``study status`` says of the study's tuners (see :class:`Liveness`)."""
    from optuna.trial import TrialState

    from autotune.study._claims import held_by_live_tuner
    from autotune.study._record import SYS_TUNER

    now = time.time()
    every = workers(study)
    live = [w for w in every if w.alive]
    if live:
        lines = []
        for w in live:
            ago = f"last heartbeat {max(0.0, now - w.beat):.0f} s ago"
            if w.state == "confirming":
                lines.append(f"confirming {_round(study, w.max_rounds)}: {w.where()}, {ago}")
            else:
                trial = f", trial {w.trial}" if w.trial is not None else ""
                lines.append(f"running: {w.where()}{trial}, {ago}")
        state = "confirming" if all(w.state == "confirming" for w in live) else "running"
        return Liveness(state, tuple(lines), tuple(live))
    if every:
        last = max(every, key=lambda w: w.beat)
        if last.ended:
            return Liveness("idle", (f"not running: its last tuner ended at {utc(last.beat)}",))
        return Liveness(
            "dead",
            (
                f"dead since {utc(last.beat)}: its tuner ({last.where()}) stopped without "
                f"ending; `autotune study resume --study-name {study.study_name}` takes over",
            ),
            dead_since=last.beat,
        )
    # a study from before heartbeats: its running trials' tuners say what they can
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    held = [t for t in running if held_by_live_tuner(t)]
    if held:
        return Liveness("running", tuple(f"running: trial {t.number}" for t in held))
    stale = [t for t in running if isinstance(t.system_attrs.get(SYS_TUNER), dict)]
    if stale:
        return Liveness(
            "dead",
            (f"dead: the tuner of trial {stale[0].number} is gone; `study resume` takes over",),
        )
    return Liveness("idle", ("not running",))


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _round(study: optuna.Study, of: int | None) -> str:
    """``round 2 of 10`` for the confirmation in progress (from what it recorded; ``of``: its
    most rounds)."""
    from autotune.study._record import STUDY_CONFIRMATION

    state = study.user_attrs.get(STUDY_CONFIRMATION)
    if not isinstance(state, dict) or "verdict" in state:  # none yet, or the last one's
        return "round 1" if of is None else f"round 1 of {of}"
    arms = state.get("arms") if isinstance(state.get("arms"), list) else []
    rounds = [
        int(m["round"])
        for m in state.get("measurements") or []
        if isinstance(m, dict) and isinstance(m.get("round"), int)
    ]
    if not rounds:
        current = 1
    else:
        last = max(rounds)
        full = rounds.count(last) >= len(arms or [])
        current = last + (2 if full else 1)
    if isinstance(of, int):
        current = min(current, of)
        return f"round {current} of {of}"
    return f"round {current}"
