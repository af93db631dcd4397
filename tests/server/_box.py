"""A container for the tests: a real PID namespace whose ``exec`` behaves as ``docker exec``.

:class:`Box` starts ``unshare --pid --fork --mount-proc`` with ``scripts/nsbox.py`` as the
namespace's init; :attr:`Box.prefix` is the launch prefix that runs a command inside it (the
command is the box's child, not the client's, and outlives a killed client, as in a
container); :meth:`Box.processes` lists what runs inside, read from the namespace's own
``/proc`` through ``nsenter``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from ._support import SCRIPTS, wait_until

NSBOX = SCRIPTS / "nsbox.py"
_UNSHARE = ("unshare", "--pid", "--fork", "--mount-proc")

#: Lists the namespace's processes (pid, state, command line), itself excepted.
_LIST = """
import os
me = os.getpid()
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) in (1, me):
        continue
    try:
        with open(f"/proc/{name}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{name}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\\0", b" ").replace(b"\\n", b" ").decode(errors="replace")
    except OSError:
        continue
    if state != "Z":
        print(name, cmd)
"""


@functools.cache
def _why_not() -> str | None:
    for tool in ("unshare", "nsenter", "setsid"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed: no PID namespace to stand for containers"
    probe = subprocess.run([*_UNSHARE, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare cannot make a PID namespace here: {probe.stderr.strip()}"
    return None


def needs_namespaces() -> None:
    """Skip the test, with the reason, where no PID namespace can be made."""
    reason = _why_not()
    if reason is not None:
        pytest.skip(reason)


class Box:
    """One PID namespace standing for a container (see the module docstring)."""

    def __init__(self) -> None:
        needs_namespaces()
        self._dir = Path(tempfile.mkdtemp(prefix="nsbox-"))  # a short path for the socket
        self.socket = self._dir / "box.sock"
        self._unshare = subprocess.Popen(
            [*_UNSHARE, sys.executable, str(NSBOX), "serve", str(self.socket)],
            start_new_session=True,
        )
        wait_until(self.socket.exists)
        (child,) = psutil.Process(self._unshare.pid).children()
        #: The namespace's init as this host sees it.
        self.init_pid = child.pid

    @property
    def prefix(self) -> list[str]:
        """The launch prefix of the box (``docker exec BOX``)."""
        return [sys.executable, str(NSBOX), "exec", str(self.socket)]

    @property
    def nsenter(self) -> list[str]:
        """A launch prefix that enters the namespace itself (the command is its child)."""
        return ["nsenter", "-t", str(self.init_pid), "-p", "-m"]

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run a command inside (as ``nsenter`` into the namespace) to its end."""
        return subprocess.run(
            [*self.nsenter, *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def processes(self) -> list[str]:
        """``PID COMMAND`` of every live process inside but its init, listed from inside."""
        done = self.run(sys.executable, "-c", _LIST)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    def wait_processes(self, count: int, timeout_s: float = 30.0) -> list[str]:
        """Wait until at least ``count`` processes run inside; what runs then."""
        deadline = time.monotonic() + timeout_s
        while len(found := self.processes()) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{count} processes expected in the box, found {found}")
            time.sleep(0.1)
        return found

    def wait_empty(self, timeout_s: float = 10.0) -> list[str]:
        """Wait (briefly: an init reaps what a stop has ended) until nothing runs inside."""
        deadline = time.monotonic() + timeout_s
        while (found := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return found

    def close(self) -> None:
        """End the namespace: its init's death ends every process inside."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.init_pid, 9)
        try:
            self._unshare.wait(timeout=30)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
