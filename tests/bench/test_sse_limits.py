"""A server that streams a line without end: the decoder refuses it at a bound instead of
buffering it, and the request fails with a message that says so (not a memory error)."""

from __future__ import annotations

import asyncio
import socket
import threading
import tracemalloc
from collections.abc import Iterator

import httpx
import pytest

from autotune.bench._prompts import PlannedRequest
from autotune.bench._sse import MAX_LINE_CHARS, RequestState, SSEDecoder, StreamTooLong


def test_an_endless_line_is_refused_at_the_bound() -> None:
    decoder = SSEDecoder(max_line_chars=1000)
    assert decoder.feed(b'data: {"a": 1}\n\n') == ['{"a": 1}']
    decoder.feed(b"data: ")
    with pytest.raises(StreamTooLong, match="more than 1,000 characters"):
        for _ in range(100):
            decoder.feed(b"x" * 64)


def test_a_long_line_in_one_read_is_refused() -> None:
    decoder = SSEDecoder(max_line_chars=1000)
    with pytest.raises(StreamTooLong):
        decoder.feed(b"data: " + b"x" * 2000 + b"\n\n")
    decoder = SSEDecoder(max_line_chars=1000)
    with pytest.raises(StreamTooLong):
        decoder.feed(b"data: 1\ndata: " + b"x" * 2000)


def test_many_data_lines_of_one_event_are_bounded() -> None:
    decoder = SSEDecoder(max_line_chars=1000)
    with pytest.raises(StreamTooLong, match="one event's data lines"):
        for _ in range(100):
            decoder.feed(b"data: " + b"x" * 50 + b"\n")


def test_lines_below_the_bound_split_over_many_reads_are_whole() -> None:
    decoder = SSEDecoder(max_line_chars=1000)
    events: list[str] = []
    for piece in (b"da", b"ta: ", b"x" * 300, b"y" * 300, b"\r", b"\n", b"\r\n"):
        events += decoder.feed(piece)
    assert events == ["x" * 300 + "y" * 300]
    for piece in (b"data: ", b"z" * 500):
        events += decoder.feed(piece)
    assert decoder.close() == ["z" * 500]


@pytest.fixture
def endless_server() -> Iterator[str]:
    """A raw HTTP server: 200 and an event stream whose second line never ends."""
    stop = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                piece = b"x" * 65536
                chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
                conn.sendall(b"6\r\ndata: \r\n")
                try:
                    while not stop.is_set():
                        conn.sendall(chunk)
                except OSError:
                    pass  # the client went away

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        thread.join(10)
        listener.close()


def test_the_request_fails_and_memory_stays_bounded(endless_server: str) -> None:
    planned = PlannedRequest(
        index=0,
        api="generate",
        path="/generate",
        payload={"text": "hi", "stream": True},
        input_tokens=1,
        output_tokens=1,
        exact_input=False,
    )
    state = RequestState(planned, request_timeout_s=60.0)

    async def go() -> None:
        async with httpx.AsyncClient(base_url=endless_server, timeout=30.0) as client:
            await state.send(client, 0.0)

    tracemalloc.start()
    try:
        asyncio.run(go())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    record = state.record()
    assert record.error == "line_too_long", record
    assert record.error_detail is not None and "without ending it" in record.error_detail
    # the decoder holds the line up to its bound, plus one join of it: nowhere near gigabytes
    assert peak < 8 * MAX_LINE_CHARS, peak
