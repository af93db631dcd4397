"""A container stand-in with ``docker exec``'s process model, inside a real PID namespace.

Usage:
    unshare --pid --fork --mount-proc python nsbox.py serve SOCKET   # the box: its pid 1
    python nsbox.py exec SOCKET ARGV...                              # docker exec BOX ARGV...

``serve`` is the namespace's init: it reaps every orphan of the namespace and runs each command
that ``exec`` sends it, with the client's stdin, stdout and stderr (passed over the socket) and
the box's own environment, as a child of the box, not of the client. ``exec`` waits for the
command and exits with its status. Killing the client (any signal) leaves the command running,
exactly as killing the ``docker exec`` client leaves the process in the container.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}  # pid of a command -> its client's connection
    while True:
        for _key, _events in sel.select(timeout=0.1):
            conn, _addr = listener.accept()
            message, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
            argv = json.loads(message.decode())
            pid = os.fork()
            if pid == 0:
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                os.closerange(3, 65536)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                try:
                    os.execvp(argv[0], argv)
                except OSError as e:
                    os.write(2, f"nsbox: cannot run {argv[0]}: {e}\n".encode())
                    os._exit(127)
            for fd in fds:
                os.close(fd)
            waiting[pid] = conn
        while True:  # reap every finished child: commands and orphans of the namespace
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            client = waiting.pop(pid, None)
            if client is not None:
                with contextlib.suppress(OSError):  # a client gone: the command ran regardless
                    client.sendall(str(os.waitstatus_to_exitcode(status)).encode())
                client.close()


def execute(path: str, argv: list[str]) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    socket.send_fds(conn, [json.dumps(argv).encode()], [0, 1, 2])
    reply = b""
    while chunk := conn.recv(64):
        reply += chunk
    if not reply:
        return 255
    code = int(reply)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        sys.exit(execute(sys.argv[2], sys.argv[3:]))
