"""SGLang's ``--stream-interval``: fewer, larger chunks per streamed request.

SGLang (``output_streamer.py``) sends the first token at once, then whenever at least
``stream_interval`` tokens are unsent (a speculative step can add several), and the end; a
``/generate`` request's ``sampling_params.stream_interval`` overrides the server's value.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from autotune.sim._runtime import RequestState
from autotune.sim._types import TokenEvent

from ._procs import SimLauncher


def handed_over(state: RequestState) -> list[int]:
    """Tokens of each event queued for the response so far (and empty the queue)."""
    out = []
    while not state.queue.empty():
        event = state.queue.get_nowait()
        assert event is not None
        out.append(event.new_tokens)
    return out


def test_hand_over_follows_sglangs_rule() -> None:
    async def body() -> list[list[int]]:
        state = RequestState("r", 10, 12, counted=True, stream_interval=4)
        steps = []
        for tokens, finished in [(1, False), (1, False), (3, False), (1, False), (2, False),
                                 (1, False), (2, False), (1, True)]:  # fmt: skip
            state.completion_tokens += tokens
            state.hand_over(TokenEvent("r", tokens, finished))
            steps.append(handed_over(state))
        return steps

    steps = asyncio.run(body())
    # the first token at once; then 1+3 unsent; then 1+2+1; then 2; the end with what is left
    assert steps == [[1], [], [1, 3], [], [], [1, 2, 1], [], [2, 1]]


def test_every_step_streams_at_the_default_interval() -> None:
    async def body() -> list[list[int]]:
        state = RequestState("r", 10, 3, counted=True)
        steps = []
        for tokens, finished in [(1, False), (2, False), (1, True)]:
            state.completion_tokens += tokens
            state.hand_over(TokenEvent("r", tokens, finished))
            steps.append(handed_over(state))
        return steps

    assert asyncio.run(body()) == [[1], [2], [1]]


def chunks(client: httpx.Client, sampling: dict[str, Any]) -> list[dict[str, Any]]:
    body = {"text": "hello there", "sampling_params": sampling, "stream": True}
    with client.stream("POST", "/generate", json=body) as response:
        assert response.status_code == 200
        return [
            json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")
        ]


def test_the_server_streams_at_its_interval_and_the_requests(sim: SimLauncher) -> None:
    server = sim.start("--stream-interval", "4")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/get_server_info").json()["stream_interval"] == 4
        at_server = chunks(client, {"max_new_tokens": 16, "temperature": 0})
        at_request = chunks(client, {"max_new_tokens": 16, "stream_interval": 8})
    # at most 1 + ceil(15 / interval) chunks (fewer when the response fell behind the engine)
    for got, most in ((at_server, 5), (at_request, 3)):
        assert 1 <= len(got) <= most
        assert got[-1]["meta_info"]["completion_tokens"] == 16
        assert len(got[-1]["output_ids"]) == 16
        assert got[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 16}
