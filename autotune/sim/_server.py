"""The simulated server's HTTP surface: SGLang's endpoints and response shapes (Starlette).

Token counting: ``input_ids`` count exactly; text counts one token per word and per punctuation
mark (``\\w+`` or one non-space character); a chat adds 4 tokens per message and 2 for the reply
header. Output tokens are pseudo-words drawn deterministically from the seed and the prompt. The
simulated model never emits EOS: every request runs to its token budget (``max_new_tokens``,
default 128; ``max_tokens`` on the OpenAI routes, default 16 for completions and 128 for chat)
unless a stop string appears in the text.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, Router

from autotune.sim._faults import DONE, DROP, FaultPlan, inject_fault
from autotune.sim._logging import SGLangLog
from autotune.sim._runtime import RequestState, ServingRuntime

_WORD = re.compile(r"\w+|[^\w\s]")
_SYLLABLES = ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "da", "zu", "he", "bo", "ci")
_SSE = {"content-type": "text/event-stream", "cache-control": "no-cache"}
Scope = Mapping[str, Any]
ASGIReceive = Callable[[], Awaitable[dict[str, Any]]]
ASGISend = Callable[[dict[str, Any]], Awaitable[None]]


def count_text_tokens(text: str) -> int:
    """Tokens of a text: one per word and one per punctuation mark (at least one)."""
    return max(1, len(_WORD.findall(text)))


class BadRequest(ValueError):
    """A request the server answers with HTTP 400."""


@dataclass(frozen=True)
class ServerInfo:
    """What the endpoints report about the server (fixed at start-up)."""

    model_path: str
    served_model_name: str
    architecture: str
    context_length: int
    vocab_size: int
    server_args: Mapping[str, Any]
    version: str
    api_key: str | None
    enable_metrics: bool
    seed: int
    memory_usage: Mapping[str, float]
    max_running_requests: int
    num_draft_tokens: int
    speculative: bool


@dataclass
class _Piece:
    text: str
    ids: list[int]
    finish: dict[str, Any] | None


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
        if info.enable_metrics:
            routes.append(Route("/metrics", self.metrics))
        self.router = Router(routes)

    async def __call__(self, scope: Scope, receive: ASGIReceive, send: ASGISend) -> None:
        key = self.info.api_key
        path = scope.get("path", "")
        guarded = not path.startswith(("/health", "/metrics")) and scope.get("method") != "OPTIONS"
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
            "owned_by": "sglang",
            "root": self.info.model_path,
            "max_model_len": self.info.context_length,
        }
        return JSONResponse({"object": "list", "data": [card]})

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
    async def generate(self, request: Request) -> Response | _Reply:
        return await self._generation("generate", request)

    async def completions(self, request: Request) -> Response | _Reply:
        return await self._generation("completions", request)

    async def chat(self, request: Request) -> Response | _Reply:
        return await self._generation("chat", request)

    async def _generation(self, api: str, request: Request) -> Response | _Reply:
        try:
            body = await _json_body(request)
            ask = _parse_request(api, body)
            self._check_length(ask.prompt_tokens, ask.max_new_tokens)
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
            ask.prompt_tokens, ask.max_new_tokens, ask.temperature, counted=True
        )
        streaming = bool(body.get("stream"))
        pieces = self._pieces(state, ask.key, ask.stop, whole=not streaming)
        fmt = _Formatter(api, body, state, self.info, pieces)
        chunks = fmt.stream() if streaming else fmt.whole()
        if action is not None:
            chunks = inject_fault(
                action,
                chunks,
                streaming=streaming,
                cancel=lambda: self.runtime.cancel(state),
                closed=self.runtime.closed,
            )
        return _Reply(chunks, streaming=streaming, on_close=lambda: self.runtime.cancel(state))

    def _check_length(self, prompt: int, max_new: int) -> None:
        ctx = self.info.context_length
        if prompt >= ctx:
            raise BadRequest(
                f"The input ({prompt} tokens) is longer than the model's context length "
                f"({ctx} tokens)."
            )
        if prompt + max_new > ctx:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of {ctx} "
                f"tokens. You requested a total of {prompt + max_new} tokens: {prompt} tokens "
                f"from the input and {max_new} tokens for the completion."
            )
        if not self.runtime.fits(prompt, max_new):
            raise BadRequest(
                f"The request needs {prompt + max_new} tokens of KV cache; the pool holds "
                f"{self.runtime.engine.kv_tokens}."
            )

    async def _pieces(
        self, state: RequestState, key: str, stop: list[str], *, whole: bool
    ) -> AsyncIterator[_Piece]:
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
                yield _Piece("", [], {"type": "abort", "message": "server shutting down"})
                return
            n = sum(e.new_tokens for e in events)
            ids = [rng.randrange(self.info.vocab_size) for _ in range(n)]
            delta = "".join(" " + _spell(t) for t in ids)
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
            yield _Piece(delta, ids, finish)
            if finish is not None:
                return


class _Formatter:
    """Turns the pieces of one request into SGLang-native or OpenAI bodies."""

    def __init__(
        self,
        api: str,
        body: dict[str, Any],
        state: RequestState,
        info: ServerInfo,
        pieces: AsyncIterator[_Piece],
    ) -> None:
        self.api, self.body, self.state, self.info, self.pieces = api, body, state, info, pieces
        self.text = ""
        self.ids: list[int] = []
        self.oid = ("cmpl-" if api == "completions" else "chatcmpl-") + state.rid
        self.include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def meta(self, finish: dict[str, Any] | None) -> dict[str, Any]:
        s = self.state
        meta: dict[str, Any] = {
            "id": s.rid,
            "finish_reason": finish,
            "prompt_tokens": s.prompt_tokens,
            "completion_tokens": len(self.ids),
            "cached_tokens": 0,
            "e2e_latency": time.monotonic() - s.created,
        }
        if self.info.speculative:
            proposed = s.verify_ct * max(0, self.info.num_draft_tokens - 1)
            meta.update(
                spec_verify_ct=s.verify_ct,
                spec_accept_length=len(self.ids) / s.verify_ct if s.verify_ct else 0.0,
                spec_accept_rate=s.accepted_drafts / proposed if proposed else 0.0,
                spec_num_correct_drafts=s.accepted_drafts,
                spec_num_proposed_drafts=proposed,
                spec_correct_drafts_histogram=list(s.accept_histogram),
            )
        return meta

    def usage(self) -> dict[str, Any]:
        p, c = self.state.prompt_tokens, len(self.ids)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def choice(self, delta: str | None, finish: dict[str, Any] | None) -> dict[str, Any]:
        reason = None if finish is None else finish["type"]  # stop, length or abort
        matched = finish.get("matched") if finish else None
        if self.api == "completions":
            text = self.text if delta is None else delta
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                    "matched_stop": matched}  # fmt: skip
        if delta is None:
            message = {"role": "assistant", "content": self.text, "reasoning_content": None,
                       "tool_calls": None}  # fmt: skip
            return {"index": 0, "message": message, "finish_reason": reason,
                    "matched_stop": matched}  # fmt: skip
        return {"index": 0, "delta": {"content": delta}, "finish_reason": reason,
                "matched_stop": matched}  # fmt: skip

    def envelope(self, choices: list[dict[str, Any]], *, chunk: bool) -> dict[str, Any]:
        kind = "text_completion" if self.api == "completions" else "chat.completion"
        return {
            "id": self.oid,
            "object": kind + (".chunk" if chunk and self.api == "chat" else ""),
            "created": int(time.time()),
            "model": self.body.get("model") or self.info.served_model_name,
            "choices": choices,
        }

    async def stream(self) -> AsyncIterator[bytes]:
        if self.api == "chat":
            first = self.envelope([{"index": 0, "delta": {"role": "assistant", "content": ""},
                                    "finish_reason": None}], chunk=True)  # fmt: skip
            yield _event(first)
        async for piece in self.pieces:
            self.text += piece.text
            self.ids += piece.ids
            if self.api == "generate":
                yield _event({"text": self.text, "output_ids": self.ids,
                              "meta_info": self.meta(piece.finish)})  # fmt: skip
                continue
            yield _event(self.envelope([self.choice(piece.text, piece.finish)], chunk=True))
        if self.api != "generate" and self.include_usage:
            yield _event({**self.envelope([], chunk=True), "usage": self.usage()})
        yield DONE

    async def whole(self) -> AsyncIterator[bytes]:
        finish: dict[str, Any] | None = None
        async for piece in self.pieces:
            self.text += piece.text
            self.ids += piece.ids
            finish = piece.finish
        if self.api == "generate":
            body = {"text": self.text, "output_ids": self.ids, "meta_info": self.meta(finish)}
        else:
            body = {**self.envelope([self.choice(None, finish)], chunk=False),
                    "usage": self.usage()}  # fmt: skip
        yield json.dumps(body).encode()


class _Reply:
    """ASGI response that produces its body while watching for the client going away.

    A streaming body is sent chunk by chunk (server-sent events); a whole body with its length.
    An empty chunk closes the connection before the response is complete. ``on_close`` runs
    when the response ends, however it ends.
    """

    def __init__(
        self, chunks: AsyncIterator[bytes], *, streaming: bool, on_close: Callable[[], None]
    ) -> None:
        self.chunks, self.streaming, self.on_close = chunks, streaming, on_close

    async def __call__(self, scope: Scope, receive: ASGIReceive, send: ASGISend) -> None:
        pump = asyncio.ensure_future(self._pump(send))
        watch = asyncio.ensure_future(self._watch(receive))
        try:
            await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pump, watch):
                task.cancel()
            await asyncio.gather(pump, watch, return_exceptions=True)
            self.on_close()
        error = None if pump.cancelled() else pump.exception()
        if error is not None and not isinstance(error, OSError):
            raise error  # a fault of the server, not of the connection

    async def _watch(self, receive: ASGIReceive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def _pump(self, send: ASGISend) -> None:
        if self.streaming:
            headers = [(k.encode(), v.encode()) for k, v in _SSE.items()]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            async for chunk in self.chunks:
                if chunk == DROP:
                    return
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        body = await anext(self.chunks, b"")
        dropped = await anext(self.chunks, None) == DROP
        size = len(body) * 2 if dropped else len(body)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(size).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": dropped})


@dataclass(frozen=True)
class _Ask:
    prompt_tokens: int
    key: str  # what the output words are drawn from, with the seed
    max_new_tokens: int
    temperature: float
    stop: list[str]


def _parse_request(api: str, body: dict[str, Any]) -> _Ask:
    """The token counts and sampling parameters of one request of ``api``."""
    params = body.get("sampling_params") or {} if api == "generate" else body
    if not isinstance(params, dict):
        raise BadRequest("sampling_params must be an object")
    if api == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        texts = [_message_text(m) for m in messages]
        prompt, key = sum(count_text_tokens(t) + 4 for t in texts) + 2, json.dumps(texts)
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
    elif api == "completions":
        raw = body.get("prompt")
        ids = raw if isinstance(raw, list) and all(isinstance(t, int) for t in raw) else None
        prompt, key = _prompt(ids, None if ids is not None else raw, "prompt")
        limit = body.get("max_tokens", 16)
    else:
        prompt, key = _prompt(body.get("input_ids"), body.get("text"), "text")
        limit = params.get("max_new_tokens")
    return _Ask(
        prompt_tokens=prompt,
        key=key,
        max_new_tokens=_int(128 if limit is None else limit, "max_new_tokens"),
        temperature=_float(params.get("temperature", 1.0), "temperature"),
        stop=_stops(params.get("stop")),
    )


def _prompt(ids: Any, text: Any, name: str) -> tuple[int, str]:
    if ids is not None:
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
            raise BadRequest("input_ids must be a non-empty list of token ids (one request)")
        return len(ids), ",".join(map(str, ids[:64])) + f":{len(ids)}"
    if isinstance(text, str):
        return count_text_tokens(text), text
    if isinstance(text, list):
        raise BadRequest(f"batched requests are not supported: send one {name} per request")
    raise BadRequest(f"the request needs {name} (a string) or input_ids")


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _spell(token_id: int) -> str:
    n = len(_SYLLABLES)
    word = _SYLLABLES[token_id % n]
    rest = token_id // n
    for _ in range(token_id % 3):
        word += _SYLLABLES[rest % n]
        rest //= n
    return word


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the request body is not valid JSON: {e}") from e
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise BadRequest(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def _stops(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise BadRequest(f"stop must be a string or a list of strings, got {value!r}")
    return stops


def _message_text(message: Any) -> str:
    if not isinstance(message, dict) or "role" not in message:
        raise BadRequest("each message must be an object with a role and content")
    content = message.get("content") or ""
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)
