"""TCP ports for servers: is one free, find a free one, wait until a stopped server let go."""

from __future__ import annotations

import errno
import socket
import time
from typing import Any

from autotune._errors import ConfigError, ServerError


def port_in_use(host: str, port: int, *, source: str = "engine.host") -> bool:
    """Whether ``port`` on ``host`` is taken, judged by trying to bind it as a server would.

    A socket bound or listening on the port (on ``host`` or on the wildcard address) makes it
    taken; connections left in TIME_WAIT do not (servers bind with ``SO_REUSEADDR``).
    ``source`` names where ``host`` came from in an error (the space's ``engine.host``, or an
    option such as the dashboard's ``--host``).

    Raises:
        ConfigError: ``host`` is not an address of this machine, or cannot be resolved.
        ServerError: the port cannot be bound for another reason (a privileged port).
    """
    family, address = _resolve(host, port, source)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return True
            if e.errno == errno.EADDRNOTAVAIL:
                raise ConfigError(
                    f"host {host!r} is not an address of this machine",
                    source=source,
                    hint="use 127.0.0.1, 0.0.0.0 or one of this machine's addresses",
                ) from e
            raise ServerError(
                f"cannot bind port {port} on {host}: {e.strerror or e}",
                hint="choose a port above 1023 that this user may bind",
            ) from e
    return False


def find_free_port(host: str, preferred: int | None = None) -> int:
    """``preferred`` if it is free on ``host``, otherwise a free port the system picks.

    The port is free when this returns; nothing holds it for the caller, so launch promptly.

    Raises:
        ConfigError: ``host`` is not an address of this machine, or cannot be resolved.
    """
    if preferred is not None:
        if not 0 < preferred < 65536:
            raise ConfigError(
                f"port {preferred} is out of range",
                hint="choose a port between 1024 and 65535",
            )
        try:
            if not port_in_use(host, preferred):
                return preferred
        except ServerError:
            pass  # a privileged port: take another one
    family, address = _resolve(host, 0)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(address)
        except OSError as e:
            raise ConfigError(
                f"cannot bind any port on server host {host!r}: {e.strerror or e}",
                hint="use 127.0.0.1, 0.0.0.0 or one of this machine's addresses",
            ) from e
        port: int = sock.getsockname()[1]
    return port


def wait_port_released(
    host: str, port: int, timeout_s: float, *, poll_interval_s: float = 0.05
) -> bool:
    """Wait until ``port`` can be bound again on ``host``; False if it is still taken at the end."""
    deadline = time.monotonic() + max(timeout_s, 0.0)
    while True:
        if not port_in_use(host, port):
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(poll_interval_s, remaining))


def _resolve(
    host: str, port: int, source: str = "engine.host"
) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (socket.gaierror, UnicodeError) as e:
        raise ConfigError(
            f"cannot resolve host {host!r}: {getattr(e, 'strerror', None) or e}",
            source=source,
            hint="use an IP address such as 127.0.0.1 or 0.0.0.0, or a name this machine resolves",
        ) from e
    family, _type, _proto, _name, sockaddr = infos[0]
    return family, tuple(sockaddr)
