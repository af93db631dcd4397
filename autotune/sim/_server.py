"""The simulated server's HTTP surface: SGLang's endpoints over a :class:`ServingRuntime`.

Routes: ``/health`` and ``/health_generate`` (503 until ready), ``/get_model_info``,
``/get_server_info`` (and their newer names without ``get_``), ``/generate``,
``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``, ``/flush_cache``, and ``/metrics``
with ``--enable-metrics``; ``--api-key`` guards every route but health and metrics. Request
bodies are read by :mod:`autotune.sim._http`, responses shaped by :mod:`autotune.sim._responses`.

Output tokens are pseudo-words drawn deterministically from the seed and the prompt. The
simulated model never emits EOS: every request runs to its token budget unless a stop string
appears in the text.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, Router

from autotune.sim._faults import FaultPlan, inject_fault
from autotune.sim._http import BadRequest, GenerationAsk, check_length, json_body
from autotune.sim._logging import SGLangLog
from autotune.sim._responses import (
    ASGIReceive,
    ASGISend,
    Piece,
    Reply,
    ResponseFormatter,
    Scope,
    ServerInfo,
    spell,
)
from autotune.sim._runtime import RequestState, ServingRuntime


class SimServer:
    """The ASGI application: SGLang's routes over a :class:`ServingRuntime`."""

    def __init__(
        self, info: ServerInfo, runtime: ServingRuntime, *, faults: FaultPlan, log: SGLangLog
    ) -> None:
        self.info = info
        self.runtime = runtime
        self.faults = faults
        self.log = log
        self.ready = False
        self.created = int(time.time())
        self._count = 0
        self.router = Router(self._routes())

    def _routes(self) -> list[Route]:
        if self.info.engine == "vllm":
            return [
                Route("/health", self.health),
                Route("/version", self.version),
                Route("/v1/models", self.models),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/metrics", self.metrics),
            ]
        routes = [
            Route("/health", self.health),
            Route("/health_generate", self.health_generate),
            Route("/get_model_info", self.model_info),
            Route("/model_info", self.model_info),
            Route("/get_server_info", self.server_info),
            Route("/server_info", self.server_info),
            Route("/generate", self.generate, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/models", self.models),
            Route("/flush_cache", self.flush_cache, methods=["GET", "POST"]),
        ]
        if self.info.enable_metrics:
            routes.append(Route("/metrics", self.metrics))
        return routes

    async def __call__(self, scope: Scope, receive: ASGIReceive, send: ASGISend) -> None:
        key = self.info.api_key
        path = scope.get("path", "")
        if self.info.engine == "vllm":  # vLLM's key guards its /v1 routes
            guarded = path.startswith("/v1") and scope.get("method") != "OPTIONS"
        else:
            open_path = path.startswith(("/health", "/metrics"))
            guarded = not open_path and scope.get("method") != "OPTIONS"
        if scope["type"] == "http" and key and guarded:
            auth = dict(scope["headers"]).get(b"authorization", b"")
            if auth != f"Bearer {key}".encode():
                deny = JSONResponse({"error": "Unauthorized"}, status_code=401)
                await deny(scope, receive, send)  # type: ignore[arg-type]
                return
        await self.router(scope, receive, send)  # type: ignore[arg-type]

    # --- status ----------------------------------------------------------------------------
    def _serving(self) -> bool:
        return self.ready and not self.runtime.closed.is_set()

    async def health(self, request: Request) -> Response:
        return Response(status_code=200 if self._serving() else 503)

    async def health_generate(self, request: Request) -> Response:
        if not self._serving():
            return Response(status_code=503)
        state = self.runtime.submit(1, 1, 0.0, counted=False)
        try:
            done = await asyncio.wait_for(self._finished(state), timeout=20)
        except asyncio.TimeoutError:
            done = False
        self.runtime.cancel(state)
        return Response(status_code=200 if done else 503)

    async def _finished(self, state: RequestState) -> bool:
        while (events := await self.runtime.next_events(state)) is not None:
            if any(e.finished for e in events):
                return True
        return False

    async def model_info(self, request: Request) -> Response:
        i = self.info
        return JSONResponse(
            {
                "model_path": i.model_path,
                "tokenizer_path": i.server_args.get("tokenizer_path") or i.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": None,
                "architectures": [i.architecture],
            }
        )

    async def server_info(self, request: Request) -> Response:
        i, s = self.info, self.runtime.engine.stats
        state: dict[str, Any] = {
            "last_gen_throughput": s.last_gen_throughput,
            "memory_usage": dict(i.memory_usage),
            "effective_max_running_requests_per_dp": i.max_running_requests,
            "#running-req": s.running,
            "#queue-req": s.queued,
        }
        if i.speculative and s.verify_ct_total > 0:
            state["avg_spec_accept_length"] = s.avg_spec_accept_length
        args = {k: ("***" if k == "api_key" and v else v) for k, v in i.server_args.items()}
        return JSONResponse(
            {
                **args,
                "max_total_num_tokens": s.max_total_num_tokens,
                "internal_states": [state],
                "version": i.version,
            }
        )

    async def models(self, request: Request) -> Response:
        card = {
            "id": self.info.served_model_name,
            "object": "model",
            "created": self.created,
            "owned_by": self.info.engine,
            "root": self.info.model_path,
            "max_model_len": self.info.context_length,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": self.info.version})

    async def flush_cache(self, request: Request) -> Response:
        s = self.runtime.engine.stats
        ok = self.runtime.active == 0
        if ok:
            self.log.rank("Cache flushed successfully!")
        else:
            self.log.rank(
                "Cache not flushed because there are pending requests. "
                f"#queue-req: {s.queued}, #running-req: {s.running}"
            )
        return PlainTextResponse(
            "Cache flushed.\nPlease check backend logs for more details. (When there are running "
            "or waiting requests, the operation will not be performed.)\n",
            status_code=200 if ok else 400,
        )

    async def metrics(self, request: Request) -> Response:
        text = self.runtime.render_metrics(self.info.served_model_name)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    # --- generation ------------------------------------------------------------------------
    async def generate(self, request: Request) -> Response | Reply:
        return await self._generation("generate", request)

    async def completions(self, request: Request) -> Response | Reply:
        return await self._generation("completions", request)

    async def chat(self, request: Request) -> Response | Reply:
        return await self._generation("chat", request)

    async def _generation(self, api: str, request: Request) -> Response | Reply:
        try:
            body = await json_body(request)
            ask = GenerationAsk.parse(api, body)
            check_length(
                ask.prompt_tokens,
                ask.max_new_tokens,
                context_length=self.info.context_length,
                kv_tokens=self.runtime.engine.kv_tokens,
            )
        except BadRequest as e:
            if api == "generate":
                return JSONResponse({"error": {"message": str(e)}}, status_code=400)
            return JSONResponse(
                {"object": "error", "message": str(e), "type": "BadRequestError", "param": None,
                 "code": 400},
                status_code=400,
            )  # fmt: skip
        self._count += 1
        action = self.faults.action_for(self._count)
        if action == "http_500":
            return JSONResponse(
                {"object": "error", "message": "Internal server error", "type": "InternalError",
                 "param": None, "code": 500},
                status_code=500,
            )  # fmt: skip
        state = self.runtime.submit(
            ask.prompt_tokens,
            ask.max_new_tokens,
            ask.temperature,
            counted=True,
            stream_interval=ask.stream_interval or self.info.stream_interval,
        )
        streaming = ask.stream
        pieces = self._pieces(state, ask.key, ask.stop, whole=not streaming)
        fmt = ResponseFormatter(api, body, state, self.info, pieces)
        chunks = fmt.stream() if streaming else fmt.whole()
        if action is not None:
            chunks = inject_fault(
                action,
                chunks,
                streaming=streaming,
                cancel=lambda: self.runtime.cancel(state),
                closed=self.runtime.closed,
            )
        return Reply(chunks, streaming=streaming, on_close=lambda: self.runtime.cancel(state))

    async def _pieces(
        self, state: RequestState, key: str, stop: tuple[str, ...], *, whole: bool
    ) -> AsyncIterator[Piece]:
        """The text and token ids of a request as its tokens arrive.

        A whole (non-streamed) response without stop strings waits for the end of the request
        and takes all its tokens at once, instead of waking up at every step.
        """
        seed = f"{self.info.seed}:{hashlib.blake2b(key.encode(), digest_size=16).hexdigest()}"
        rng = random.Random(seed)
        text = ""
        while True:
            if whole and not stop:
                await state.done.wait()
            events = None if state.aborted else await self.runtime.next_events(state)
            if events is None:
                yield Piece("", [], {"type": "abort", "message": "server shutting down"})
                return
            n = sum(e.new_tokens for e in events)
            ids = [rng.randrange(self.info.vocab_size) for _ in range(n)]
            delta = "".join(" " + spell(t) for t in ids)
            finish: dict[str, Any] | None = None
            if any(e.finished for e in events):
                finish = {"type": "length", "length": state.completion_tokens}
            for s in stop:
                at = (text + delta).find(s, max(0, len(text) - len(s) + 1))
                if at >= 0:
                    delta = (text + delta)[len(text) : at]
                    finish = {"type": "stop", "matched": s}
                    self.runtime.cancel(state)
                    break
            text += delta
            yield Piece(delta, ids, finish)
            if finish is not None:
                return
