"""A small server speaking SGLang's HTTP protocol, for the benchmark client's tests.

It streams ``/generate`` (cumulative text, ``meta_info`` with token counts and speculative
statistics), ``/v1/completions`` and ``/v1/chat/completions`` (deltas, a last ``usage`` chunk) as
server-sent events, and answers ``/health``, ``/get_server_info``, ``/metrics``, ``/v1/models``
and ``/flush_cache``. What it does to each generation request is decided per test by
:class:`Behaviour`: answer normally, return HTTP 500, drop the connection mid-stream, stall,
send garbage, or send an error event. It runs in uvicorn on a background thread, on a free port.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

#: Tokens each chunk carries, cycled (speculative decoding sends several tokens per chunk).
CHUNK_PATTERN = (1, 3, 2, 4)


@dataclass
class Behaviour:
    """How the server treats generation requests; ``decide(seq, body)`` picks a mode per request
    (``ok``, ``500``, ``drop``, ``stall``, ``garbage``, ``error_event``, ``no_done``)."""

    decide: Callable[[int, dict[str, Any]], str] = lambda seq, body: "ok"
    chunk_delay_s: float = 0.0
    stall_s: float = 30.0
    spec_meta: bool = True
    drafts_meta: bool = True
    expose_counters: bool = False
    lifetime_average: bool = True
    metrics: bool = False
    model: str = "test-model"


@dataclass
class Seen:
    """What the server received and sent (read by the tests after a run)."""

    bodies: list[dict[str, Any]] = field(default_factory=list)
    authorization: set[str] = field(default_factory=set)
    finals: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    accepted_total: int = 0
    verify_total: int = 0
    flushes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ProtocolServer:
    """The server and its switchable behaviour; ``url`` is its base URL."""

    def __init__(self) -> None:
        self.behaviour = Behaviour()
        self.seen = Seen()
        self.url = ""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def reset(self) -> None:
        self.behaviour = Behaviour()
        self.seen = Seen()

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(
            self.app(),
            log_level="critical",
            lifespan="off",
            timeout_graceful_shutdown=1,
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        server = self._server
        self._thread = threading.Thread(target=lambda: server.run(sockets=[sock]), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- the application ----------------------------------------------------------------------

    def app(self) -> Starlette:
        routes = [
            Route("/health", self._health),
            Route("/get_server_info", self._server_info),
            Route("/metrics", self._metrics),
            Route("/v1/models", self._models),
            Route("/flush_cache", self._flush, methods=["POST"]),
            Route("/generate", self._generate, methods=["POST"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
        ]
        return Starlette(routes=routes)

    async def _health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.behaviour.model}]})

    async def _flush(self, request: Request) -> Response:
        with self.seen.lock:
            self.seen.flushes += 1
        return Response(status_code=200)

    async def _server_info(self, request: Request) -> Response:
        b, s = self.behaviour, self.seen
        state: dict[str, Any] = {"last_gen_throughput": 1.0}
        if b.lifetime_average and s.verify_total:
            state["avg_spec_accept_length"] = s.accepted_total / s.verify_total
        if b.expose_counters:
            state["spec_total_num_accept_tokens"] = s.accepted_total
            state["spec_total_num_forward_ct"] = s.verify_total
        return JSONResponse({"model_path": "test", "internal_states": [state]})

    async def _metrics(self, request: Request) -> Response:
        if not self.behaviour.metrics:
            return PlainTextResponse("not found", status_code=404)
        text = (
            "# HELP sglang:spec_accept_length The average acceptance length.\n"
            "# TYPE sglang:spec_accept_length gauge\n"
            'sglang:spec_accept_length{model_name="m",tp_rank="0"} 2.5\n'
            'sglang:spec_accept_length{model_name="m",tp_rank="1"} 3.5\n'
            'sglang:spec_accept_rate{model_name="m",tp_rank="0"} 0.4\n'
        )
        return PlainTextResponse(text)

    async def _generate(self, request: Request) -> Response:
        return await self._serve(request, "generate")

    async def _completions(self, request: Request) -> Response:
        return await self._serve(request, "completions")

    async def _chat(self, request: Request) -> Response:
        return await self._serve(request, "chat")

    async def _serve(self, request: Request, api: str) -> Response:
        body = await request.json()
        seen = self.seen  # a request still running after a reset records into the old one
        with seen.lock:
            seen.bodies.append(body)
            seen.authorization.add(request.headers.get("authorization", ""))
            seq = len(seen.bodies)
        mode = self.behaviour.decide(seq, body)
        if mode == "500":
            return JSONResponse({"error": "internal"}, status_code=500)
        if api == "generate":
            n_out = int(body["sampling_params"]["max_new_tokens"])
            n_in = len(body["input_ids"]) if "input_ids" in body else len(body["text"].split())
        else:
            n_out = int(body["max_tokens"])
            text = body.get("prompt") or " ".join(m["content"] for m in body["messages"])
            n_in = len(text.split())
        return StreamingResponse(
            self._stream(seen, api, mode, seq, n_in, n_out, body), media_type="text/event-stream"
        )

    async def _stream(
        self, s: Seen, api: str, mode: str, seq: int, n_in: int, n_out: int, body: dict[str, Any]
    ) -> Any:
        b = self.behaviour
        with s.lock:
            s.in_flight += 1
            s.max_in_flight = max(s.max_in_flight, s.in_flight)
        try:
            if api == "chat":
                yield _event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
            done = 0
            chunks = 0
            text = ""
            while done < n_out:
                if b.chunk_delay_s:
                    await asyncio.sleep(b.chunk_delay_s)
                step = min(CHUNK_PATTERN[chunks % len(CHUNK_PATTERN)], n_out - done)
                done += step
                chunks += 1
                with s.lock:
                    s.accepted_total += step
                    s.verify_total += 1
                piece = "".join(f" t{done - step + i}" for i in range(step))
                text += piece
                last = done >= n_out
                if mode == "drop" and chunks == 2:
                    raise ConnectionAbortedError("dropping the connection mid-stream")
                if mode == "stall" and chunks == 2:
                    await asyncio.sleep(b.stall_s)
                if mode == "garbage" and chunks == 2:
                    yield b"data: {this is not json\n\n"
                if mode == "error_event" and chunks == 2:
                    yield _event({"error": {"message": "scheduler aborted the request"}})
                    return
                yield _event(self._chunk(s, api, seq, n_in, done, chunks, text, piece, last))
            if api != "generate" and body.get("stream_options", {}).get("include_usage"):
                usage = {"prompt_tokens": n_in, "completion_tokens": done}
                yield _event({"choices": [], "usage": usage})
            if mode != "no_done":
                yield b"data: [DONE]\n\n"
        finally:
            with s.lock:
                s.in_flight -= 1

    def _chunk(
        self,
        seen: Seen,
        api: str,
        seq: int,
        n_in: int,
        done: int,
        chunks: int,
        text: str,
        piece: str,
        last: bool,
    ) -> dict[str, Any]:
        b = self.behaviour
        if api == "generate":
            meta: dict[str, Any] = {
                "id": f"req-{seq}",
                "prompt_tokens": n_in,
                "completion_tokens": done,
                "cached_tokens": 0,
                "finish_reason": {"type": "length", "length": done} if last else None,
            }
            if b.spec_meta:
                meta["spec_verify_ct"] = chunks
                meta["spec_accept_length"] = done / chunks
                if b.drafts_meta:
                    meta["spec_num_correct_drafts"] = done - chunks
                    meta["spec_num_proposed_drafts"] = 3 * chunks
                else:
                    meta["spec_accept_rate"] = (done - chunks) / (3 * chunks)
            if last:
                with seen.lock:
                    seen.finals.append(dict(meta))
            return {"text": text, "meta_info": meta}
        finish = "length" if last else None
        if api == "completions":
            return {
                "object": "text_completion",
                "choices": [{"index": 0, "text": piece, "finish_reason": finish}],
            }
        return {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": finish}],
        }


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"
