"""Fixtures of the benchmark tests: a server speaking SGLang's protocol (see _server.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from ._server import ProtocolServer


@pytest.fixture(scope="session")
def _protocol_server() -> Iterator[ProtocolServer]:
    server = ProtocolServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def sglang_server(_protocol_server: ProtocolServer) -> ProtocolServer:
    """The protocol server with default behaviour and empty records."""
    _protocol_server.reset()
    return _protocol_server


@pytest.fixture
def dead_url() -> str:
    """A URL where nothing listens."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"
