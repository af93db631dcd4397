"""A server started through a launch prefix (``docker exec BOX``, ``podman exec BOX``, ``srun``).

Stopping the prefix's own process does not stop a server inside a container: ``docker exec``
and ``podman exec`` do not pass signals on, and the server is no descendant of the client on
this host (it may not even run on this host). So the command run through the prefix is a small
POSIX-shell launcher: it starts the server in a session of its own (the server leads a new
process group), writes the server's pid, its start time (clock ticks since boot, from
``/proc/PID/stat``) and the launch's token to a pid file *inside* the prefix, passes on the
TERM, INT and HUP it receives to that group, and exits with the server's status.

The stop runs a second small script through the same prefix: it reads the pid file, refuses
to act unless the token is this launch's and the pid still belongs to a process with the
recorded start time (a reused pid is never signalled; a process group id cannot be reused
while any member of the group lives), then sends TERM (and CONT) to the group, waits, sends
KILL to whatever is left, waits again, and says how it went. Processes that left the group
(a daemon that called ``setsid``) are found by the launch's token in their environment, and
are signalled only while their start time is still the one first seen. Only this launch's pid
file is read, so a stop sent to the wrong container or node finds nothing and touches nothing.

What the prefix must do: run its arguments as a command (``sh`` and ``setsid`` present there)
and reach the same machine or container every time (``docker exec NAME``, ``podman exec NAME``,
``srun --jobid=J --overlap -N1 -n1 -w NODE``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from autotune._errors import ServerError
from autotune.server._tree import TOKEN_ENV

#: Where the pid file lives inside the prefix (a path of the container's or node's own).
PID_DIR = "/tmp"

_START_OF = r"""
start_of() {  # the start time (field 22 of /proc/PID/stat), or nothing
    { read -r line < "/proc/$1/stat"; } 2>/dev/null || return 0
    set -- ${line##*) }
    echo "${20}"
}
"""

#: sh -c LAUNCHER autotune-launcher PIDFILE TOKEN ARGV...
LAUNCHER = (
    _START_OF
    + r"""
f=$1 t=$2
shift 2
if ! command -v setsid >/dev/null 2>&1; then
    echo "autotune: 'setsid' is not installed where the launch prefix runs the server" >&2
    exit 127
fi
if ! (: > "$f.tmp") 2>/dev/null; then
    echo "autotune: cannot write the server's pid file $f where the launch prefix runs" >&2
    exit 126
fi
setsid "$@" </dev/null &
p=$!
s=$(start_of "$p")
printf '%s %s %s\n' "$p" "${s:-0}" "$t" > "$f.tmp" && mv -f "$f.tmp" "$f"
for sig in TERM INT HUP; do
    trap "kill -$sig -$p 2>/dev/null; kill -$sig $p 2>/dev/null" "$sig"
done
while :; do
    wait "$p"
    c=$?
    kill -0 "$p" 2>/dev/null || break
done
exit "$c"
"""
)

#: sh -c STOPPER autotune-stop PIDFILE TOKEN TERM_TENTHS KILL_TENTHS
#: prints one word: none, other, gone, stopped, killed or survived.
STOPPER = (
    _START_OF
    + r"""
f=$1 t=$2 term=$3 kill=$4
[ -r "$f" ] || { echo none; exit 0; }
read -r p s tok < "$f"
[ "$tok" = "$t" ] || { echo other; exit 0; }
now=$(start_of "$p")
if [ -n "$now" ] && [ "$now" != "$s" ]; then
    rm -f "$f"; echo gone; exit 0  # the pid was reused: the group cannot still exist
fi
carriers=""  # pid:start of processes that carry the launch's token (left the group)
holders() {  # the /proc/PID/environ files that hold the token (one grep where it knows -z)
    if printf 'x\0' | grep -qxz x 2>/dev/null; then
        grep -lsxzF "TOKEN_ENV=$t" /proc/[0-9]*/environ 2>/dev/null
        return 0
    fi
    for d in /proc/[0-9]*; do
        if { tr '\0' '\n' < "$d/environ"; } 2>/dev/null | grep -qxF "TOKEN_ENV=$t"; then
            echo "$d/environ"
        fi
    done
}
scan() {
    for e in $(holders); do
        q=${e#/proc/}; q=${q%/environ}
        case " $carriers " in *" $q:"*) continue ;; esac
        carriers="$carriers $q:$(start_of "$q")"
    done
}
alive() {  # a live (not zombie) process of the launch
    for d in /proc/[0-9]*; do
        { read -r line < "$d/stat"; } 2>/dev/null || continue
        set -- ${line##*) }
        [ "$1" != Z ] || continue
        [ "$3" = "$p" ] && return 0
        q=${d#/proc/}
        [ "$q" = "$p" ] && [ "${20}" = "$s" ] && return 0
        case " $carriers " in *" $q:${20} "*) return 0 ;; esac
    done
    return 1
}
signal_all() {  # once each: the group (else its leader, same start), the token's others
    kill -"$1" "-$p" 2>/dev/null ||
        { [ "$(start_of "$p")" = "$s" ] && kill -"$1" "$p" 2>/dev/null; }
    for c in $carriers; do
        { read -r line < "/proc/${c%%:*}/stat"; } 2>/dev/null || continue
        set -- "$1" ${line##*) }
        [ "${21}" = "${c#*:}" ] && [ "$4" != "$p" ] && kill -"$1" "${c%%:*}" 2>/dev/null
    done
}
await() {  # wait up to $1 tenths of a second for every process of the launch to end
    i=0
    while alive; do
        [ "$i" -ge "$1" ] && return 1
        sleep 0.1; i=$((i + 1))
    done
}
scan
alive || { rm -f "$f"; echo gone; exit 0; }
signal_all TERM; signal_all CONT
if await "$term"; then rm -f "$f"; echo stopped; exit 0; fi
scan
signal_all KILL
if await "$kill"; then rm -f "$f"; echo killed; exit 0; fi
echo survived
""".replace("TOKEN_ENV", TOKEN_ENV)
)

#: Seconds a call through the prefix may take beyond its own waits (``docker exec`` start-up).
PREFIX_SLACK_S = 30.0


@dataclass(frozen=True)
class PrefixStop:
    """What the stop through the prefix found: ``none`` (no pid file), ``other`` (not this
    launch's), ``gone``, ``stopped``, ``killed``, ``survived``, or ``unreachable`` (the prefix
    itself failed: its message in ``detail``)."""

    result: str
    elapsed_s: float
    detail: str = ""

    @property
    def forced(self) -> bool:
        return self.result in ("killed", "survived")

    @property
    def ran(self) -> bool:
        """Whether a server of this launch was running through the prefix when the stop came."""
        return self.result in ("stopped", "killed", "survived")


class PrefixLauncher:
    """The launcher and the stop of one server started through ``prefix`` (see the module
    docstring); ``token`` names the launch and its pid file."""

    def __init__(self, prefix: Sequence[str], token: str, pid_file: str | None = None) -> None:
        self.prefix = tuple(prefix)
        self.token = token
        self.pid_file = pid_file or f"{PID_DIR}/autotune-server-{token}.pid"

    @classmethod
    def around(
        cls,
        args: tuple[str, ...],
        prefix: tuple[str, ...],
        env: Mapping[str, str],
        secret_env: frozenset[str],
        token: str,
    ) -> tuple[PrefixLauncher, tuple[str, ...]]:
        """The launcher of a command whose first elements are ``prefix``, and the argv to run:
        the server gets ``env`` but its ``secret_env`` names, ``PYTHONUNBUFFERED`` and the token.

        Raises:
            ServerError: nothing follows the prefix in the command.
        """
        from autotune._redact import redact_argv

        if args[: len(prefix)] != prefix or len(args) == len(prefix):
            raise ServerError(
                "cannot start the server: the command does not go on after its launch prefix "
                f"{shlex.join(redact_argv(prefix))}: {shlex.join(redact_argv(args))}",
                command=redact_argv(args),
                hint="the engine built a command without its launch prefix; report this",
            )
        inside = {k: v for k, v in env.items() if k not in secret_env}
        inside.setdefault("PYTHONUNBUFFERED", "1")
        inside[TOKEN_ENV] = token
        launcher = cls(prefix, token)
        return launcher, tuple(launcher.wrap(args[len(prefix) :], inside))

    def wrap(self, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """The argv to start: the prefix, then the launcher running ``env NAME=VALUE... command``
        (a container does not see the tuner's environment: the launch's own additions go in)."""
        pairs = [f"{k}={v}" for k, v in sorted(env.items())]
        inner = ["env", *pairs, *command] if pairs else list(command)
        return [
            *self.prefix,
            "sh",
            "-c",
            LAUNCHER,
            "autotune-launcher",
            self.pid_file,
            self.token,
            *inner,
        ]

    def stop(
        self,
        term_timeout_s: float,
        kill_timeout_s: float,
        *,
        urgent: Callable[[], bool] | None = None,
        launching: Callable[[], bool] | None = None,
    ) -> PrefixStop:
        """TERM, then KILL, the server's group through the prefix.

        ``launching`` (whether the launch's client still runs) covers a stop that comes before
        the launcher has written its pid file: the stop looks again until the file is there or
        the client is gone, for up to ``term_timeout_s``. ``urgent`` (a second Ctrl-C) turns a
        stop that is waiting out the TERM into a KILL at once.
        """
        started = time.monotonic()
        deadline = started + max(term_timeout_s, 0.0)
        while True:
            hurry = urgent is not None and urgent()
            term = 0.0 if hurry else max(deadline - time.monotonic(), 0.0)
            result, detail = self._run_stopper(
                term, kill_timeout_s, urgent=None if hurry else urgent
            )
            if result == "interrupted":  # urgent while the TERM was being waited out
                continue
            if result != "none" or launching is None or not launching():
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        return PrefixStop(result, time.monotonic() - started, detail)

    def _run_stopper(
        self, term_s: float, kill_s: float, *, urgent: Callable[[], bool] | None
    ) -> tuple[str, str]:
        tenths = [str(max(round(term_s * 10), 0)), str(max(round(kill_s * 10), 1))]
        argv = [*self.prefix, "sh", "-c", STOPPER, "autotune-stop", self.pid_file, self.token]
        try:
            proc = subprocess.Popen(
                [*argv, *tenths],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            return "unreachable", f"cannot run {self.prefix[0]!r}: {e.strerror or e}"
        limit = time.monotonic() + term_s + kill_s + PREFIX_SLACK_S
        try:
            while True:
                try:
                    out, err = proc.communicate(timeout=0.05)
                    break
                except subprocess.TimeoutExpired:
                    if urgent is not None and urgent():
                        return "interrupted", ""
                    if time.monotonic() > limit:
                        return "unreachable", f"{self.prefix[0]} did not answer in time"
        finally:
            if proc.poll() is None:  # (the returns above, or a signal handler that raised)
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its session: the call and its children
                proc.wait()
                for pipe in (proc.stdout, proc.stderr):  # what it started may hold them open
                    if pipe is not None:
                        pipe.close()
        words = out.decode(errors="replace").split()
        if proc.returncode == 0 and words:
            return words[-1], err.decode(errors="replace").strip()
        why = err.decode(errors="replace").strip()
        return "unreachable", why or f"{self.prefix[0]} exited with {proc.returncode}"
