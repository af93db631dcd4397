"""A server stand-in that ignores SIGTERM and starts a tree of processes that ignore it too.

Usage: tree_child.py PIDFILE [--main-exits]

Starts three descendants, all ignoring SIGTERM: a grandchild in the process group, a grandchild
that calls setsid() to leave the group, and a daemon (double fork + setsid) whose intermediate
parent exits so that it is no longer a descendant. Their pids, one per line (main first), are
written to PIDFILE once all run. With --main-exits the main process exits after that.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def idle() -> None:
    while True:
        time.sleep(3600)


def spawn(*, setsid: bool, daemon: bool) -> int:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        if setsid:
            os.setsid()
        if daemon:
            inner = os.fork()
            if inner:
                os.write(write_end, f"{inner}\n".encode())
                os._exit(0)
        else:
            os.write(write_end, f"{os.getpid()}\n".encode())
        os.close(write_end)
        idle()
    os.close(write_end)
    with os.fdopen(read_end) as f:
        child = int(f.readline())
    if daemon:
        os.waitpid(pid, 0)  # the intermediate parent: the daemon is now an orphan
    return child


def main() -> None:
    pidfile = sys.argv[1]
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pids = [
        os.getpid(),
        spawn(setsid=False, daemon=False),
        spawn(setsid=True, daemon=False),
        spawn(setsid=True, daemon=True),
    ]
    tmp = pidfile + ".tmp"
    with open(tmp, "w") as f:
        f.write("".join(f"{p}\n" for p in pids))
    os.replace(tmp, pidfile)
    print("tree started", flush=True)
    if "--main-exits" in sys.argv:
        return
    idle()


if __name__ == "__main__":
    main()
