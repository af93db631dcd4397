"""The live processes of one launched server, found by pid and start time, and their stop.

A process is identified by its pid *and* its start time, never by its pid alone: a pid can be
reused by an unrelated process, which must never be signalled. A server's processes are its
main process, its process group, its descendants, and processes that carry the launch's token
in their environment (workers whose parent is gone and that left the group).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psutil

#: Environment variable set in every server's environment; its value is unique per launch.
TOKEN_ENV = "AUTOTUNE_SERVER_TOKEN"

#: Start times are compared to this precision (the kernel records them in clock ticks).
SAME_START_S = 0.011


@dataclass(frozen=True)
class StopReport:
    """How a stop went: seconds taken, whether SIGKILL was needed, survivors, every pid seen."""

    elapsed_s: float
    forced: bool
    survivors: tuple[int, ...]
    pids: tuple[int, ...]


class ProcessTree:
    """The live processes of one server, each verified by pid and start time.

    ``reap`` (the parent's ``Popen.poll``) collects the main process's exit status when this
    process is its parent; it is called before every look at the tree.
    """

    def __init__(
        self,
        *,
        root_pid: int,
        root_create_time: float,
        pgid: int,
        token: str | None,
        reap: Callable[[], int | None] | None = None,
    ) -> None:
        self._root_pid = root_pid
        self._root_ct = root_create_time
        self._pgid = pgid
        self._token = token
        self._reap = reap
        self._known: dict[int, float] = {}  # pid -> start time of processes seen in the tree
        self._last_remember = float("-inf")

    def remember(self, *, min_interval_s: float = 0.0) -> None:
        """Note the current descendants (cheap; at most once per ``min_interval_s``)."""
        now = time.monotonic()
        if now - self._last_remember >= min_interval_s:
            self._last_remember = now
            self._collect(include_tokens=False)

    def members(self, *, include_tokens: bool = False) -> dict[int, psutil.Process]:
        """The server's processes alive now (zombies excluded), by pid."""
        found, _ = self._collect(include_tokens=include_tokens)
        return {pid: p for pid, p in found.items() if _alive(p)}

    def stop(
        self,
        *,
        term_timeout_s: float,
        kill_timeout_s: float,
        urgent: Callable[[], bool] | None = None,
    ) -> StopReport:
        """SIGTERM to all, wait, then SIGKILL to whatever is left, and wait again.

        SIGCONT follows SIGTERM, so that a stopped (``SIGSTOP``) process acts on it. ``urgent``
        is asked while waiting for the TERM to work: once it answers True (a second Ctrl-C) the
        SIGKILL goes out at once. Nothing cuts the stop short: it returns when every process is
        gone or, if some survive even SIGKILL (a process stuck in the kernel), after
        ``kill_timeout_s`` more.
        """
        started = time.monotonic()
        found, group_ours = self._collect(include_tokens=True)
        seen = set(found)
        alive = {pid: p for pid, p in found.items() if _alive(p)}
        if alive and not (urgent is not None and urgent()):
            self._signal(signal.SIGTERM, alive, group_ours)
            self._signal(signal.SIGCONT, alive, group_ours)
            alive = self._wait_gone(started + max(term_timeout_s, 0.0), alive, seen, urgent)
        forced = bool(alive)
        if alive:
            deadline = time.monotonic() + max(kill_timeout_s, 0.0)
            while alive:
                found, group_ours = self._collect(include_tokens=True)
                seen.update(found)
                alive = {pid: p for pid, p in found.items() if _alive(p)}
                self._signal(signal.SIGKILL, alive, group_ours)
                alive = self._wait_gone(min(deadline, time.monotonic() + 1.0), alive, seen)
                if time.monotonic() >= deadline:
                    break
        return StopReport(
            elapsed_s=time.monotonic() - started,
            forced=forced,
            survivors=tuple(sorted(alive)),
            pids=tuple(sorted(seen)),
        )

    def _wait_gone(
        self,
        deadline: float,
        alive: dict[int, psutil.Process],
        seen: set[int],
        urgent: Callable[[], bool] | None = None,
    ) -> dict[int, psutil.Process]:
        """Wait until no process of the tree is alive; what is still alive at the deadline (or
        once ``urgent`` answers True)."""
        pause = 0.005
        next_scan = time.monotonic() + 0.5
        while True:
            if self._reap is not None:
                self._reap()
            alive = {pid: p for pid, p in alive.items() if _alive(p)}
            now = time.monotonic()
            if alive and urgent is not None and urgent():
                deadline = now  # escalate: look once more, then hand over to SIGKILL
            if not alive or now >= deadline or now >= next_scan:
                # Look again for processes started meanwhile before declaring anything.
                found, _ = self._collect(include_tokens=True)
                seen.update(found)
                alive = {pid: p for pid, p in found.items() if _alive(p)}
                next_scan = now + 0.5
                if not alive or now >= deadline:
                    return alive
            time.sleep(min(pause, max(deadline - now, 0.0)))
            pause = min(pause * 2, 0.1)

    def _signal(self, sig: int, alive: Mapping[int, psutil.Process], group_ours: bool) -> None:
        if group_ours:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._pgid, sig)
        for pid, proc in alive.items():
            if group_ours and _pgid(pid) == self._pgid:
                continue  # reached through the group
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)  # psutil refuses a pid that was reused meanwhile

    def _collect(self, *, include_tokens: bool) -> tuple[dict[int, psutil.Process], bool]:
        """The tree's processes (zombies included) and whether its process group is still its.

        One pass over the process table: the main process and the processes seen before
        (verified by start time), processes with the launch's token, then the process group
        (only while a process of the tree holds the group id, so the id cannot have been
        reused), then every descendant of all of these.
        """
        if self._reap is not None:
            self._reap()
        me = os.getpid()
        table: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter(["ppid", "create_time"]):
            if proc.pid != me and proc.info.get("create_time") is not None:
                table[proc.pid] = proc
        seeds: dict[int, psutil.Process] = {}
        root = table.get(self._root_pid)
        if root is not None and _same_start(root, self._root_ct):
            seeds[root.pid] = root
        for pid, ct in list(self._known.items()):
            proc_ = table.get(pid)
            if proc_ is not None and _same_start(proc_, ct):
                seeds[pid] = proc_
            else:
                del self._known[pid]  # gone for good: a later process with this pid is another
        later = [
            p
            for p in table.values()
            if p.pid not in seeds and p.info["create_time"] >= self._root_ct - SAME_START_S
        ]
        if include_tokens and self._token is not None:
            for proc in later:
                if _carries(proc, self._token):
                    seeds[proc.pid] = proc
        group_ours = self._root_pid in seeds or any(_pgid(pid) == self._pgid for pid in seeds)
        if group_ours:
            for proc in later:
                if proc.pid not in seeds and _pgid(proc.pid) == self._pgid:
                    seeds[proc.pid] = proc
        children: dict[int, list[psutil.Process]] = defaultdict(list)
        for proc in table.values():
            children[proc.info["ppid"]].append(proc)
        found = dict(seeds)
        queue = list(seeds)
        while queue:
            for child in children.get(queue.pop(), []):
                if child.pid not in found:
                    found[child.pid] = child
                    queue.append(child.pid)
        for pid, proc in found.items():
            if pid != self._root_pid:
                self._known[pid] = proc.info["create_time"]
        return found, group_ours


def _same_start(proc: psutil.Process, create_time: float) -> bool:
    return bool(abs(proc.info["create_time"] - create_time) <= SAME_START_S)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _carries(proc: psutil.Process, token: str) -> bool:
    try:
        return proc.environ().get(TOKEN_ENV) == token
    except psutil.Error:
        return False
