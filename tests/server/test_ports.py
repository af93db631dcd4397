"""Port checks against real sockets."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from autotune._errors import ConfigError
from autotune.server import find_free_port, port_in_use, wait_port_released

HOST = "127.0.0.1"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    sock.listen()
    yield sock
    sock.close()


def test_a_listening_port_is_in_use(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    assert port_in_use(HOST, port)
    assert port_in_use("0.0.0.0", port)  # the wildcard address conflicts too
    listener.close()
    assert not port_in_use(HOST, port)


def test_a_port_left_with_a_closed_connection_is_free(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    client = socket.create_connection((HOST, port))
    conn, _ = listener.accept()
    conn.close()  # the server side closes first: its end lingers in TIME_WAIT
    client.close()
    listener.close()
    assert not port_in_use(HOST, port)


def test_find_free_port_keeps_a_free_preferred_port(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    listener.close()
    assert find_free_port(HOST, preferred=port) == port


def test_find_free_port_avoids_a_taken_preferred_port(listener: socket.socket) -> None:
    taken = listener.getsockname()[1]
    other = find_free_port(HOST, preferred=taken)
    assert other != taken
    assert not port_in_use(HOST, other)


def test_find_free_port_without_preference() -> None:
    port = find_free_port(HOST)
    assert 0 < port < 65536
    assert not port_in_use(HOST, port)


def test_find_free_port_rejects_an_impossible_port() -> None:
    with pytest.raises(ConfigError, match="70000"):
        find_free_port(HOST, preferred=70000)


def test_wait_port_released(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    assert wait_port_released(HOST, port, timeout_s=0.2) is False
    listener.close()
    assert wait_port_released(HOST, port, timeout_s=5) is True


def test_a_foreign_address_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not an address of this machine") as info:
        port_in_use("192.0.2.1", 30000)  # TEST-NET-1: never local
    assert info.value.hint


def test_an_unresolvable_host_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot resolve"):
        find_free_port("no-such-host.invalid")
