"""Response bodies of the simulated server: SGLang-native and OpenAI shapes, whole or streamed.

A request's output arrives as :class:`Piece` objects (text, token ids, and the finish reason on
the last one). :class:`ResponseFormatter` turns them into ``/generate`` bodies (cumulative
``text`` and ``output_ids`` with ``meta_info``, including the speculative counters
``spec_verify_ct``, ``spec_accept_length``, ``spec_accept_rate``, ``spec_num_correct_drafts``,
``spec_num_proposed_drafts`` and ``spec_correct_drafts_histogram``) or OpenAI completion and chat
bodies (deltas when streamed, a ``usage`` chunk on request). :class:`Reply` sends them over ASGI,
as server-sent events or as one JSON body, and notices a client that goes away.

Output tokens are pseudo-words spelled from their ids (:func:`spell`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.sim._faults import DONE, DROP
from autotune.sim._runtime import RequestState

_SYLLABLES = ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "da", "zu", "he", "bo", "ci")
_SSE = {"content-type": "text/event-stream", "cache-control": "no-cache"}
Scope = Mapping[str, Any]
ASGIReceive = Callable[[], Awaitable[dict[str, Any]]]
ASGISend = Callable[[dict[str, Any]], Awaitable[None]]


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
    #: Default number of tokens per streamed chunk (``--stream-interval``).
    stream_interval: int = 1
    #: Whose HTTP surface the server shows: ``sglang`` or ``vllm``.
    engine: str = "sglang"


@dataclass
class Piece:
    """Output a request gained at once: its text, token ids, and the finish reason at the end."""

    text: str
    ids: list[int]
    finish: dict[str, Any] | None


def spell(token_id: int) -> str:
    """The pseudo-word of a token id (one to three syllables)."""
    n = len(_SYLLABLES)
    word = _SYLLABLES[token_id % n]
    rest = token_id // n
    for _ in range(token_id % 3):
        word += _SYLLABLES[rest % n]
        rest //= n
    return word


def sse_event(data: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``data`` as JSON."""
    return b"data: " + json.dumps(data).encode() + b"\n\n"


class ResponseFormatter:
    """Turns the pieces of one request into SGLang-native or OpenAI bodies."""

    def __init__(
        self,
        api: str,
        body: dict[str, Any],
        state: RequestState,
        info: ServerInfo,
        pieces: AsyncIterator[Piece],
    ) -> None:
        self.api, self.body, self.state, self.info, self.pieces = api, body, state, info, pieces
        self.text = ""
        self.ids: list[int] = []
        # the JSON of the text (without quotes) and of the ids (without brackets) so far
        self._text_json: list[str] = []
        self._ids_json: list[str] = []
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
            yield sse_event(first)
        async for piece in self.pieces:
            self.text += piece.text
            self.ids += piece.ids
            if self.api == "generate":
                yield self._cumulative_event(piece)
                continue
            yield sse_event(self.envelope([self.choice(piece.text, piece.finish)], chunk=True))
        if self.api != "generate" and self.include_usage:
            yield sse_event({**self.envelope([], chunk=True), "usage": self.usage()})
        yield DONE

    def _cumulative_event(self, piece: Piece) -> bytes:
        """The ``/generate`` event after ``piece``: all text and ids so far, and ``meta_info``.

        The same bytes as :func:`sse_event` of that object, built from the JSON of the earlier
        events plus the new piece's, so that a long stream costs linear, not quadratic, time.
        """
        if piece.text:
            self._text_json.append(json.dumps(piece.text)[1:-1])
        if piece.ids:
            self._ids_json.append(", ".join(map(str, piece.ids)))
        text = "".join(self._text_json)
        ids = ", ".join(self._ids_json)
        meta = json.dumps(self.meta(piece.finish))
        self._text_json, self._ids_json = [text], [ids] if ids else []
        body = f'{{"text": "{text}", "output_ids": [{ids}], "meta_info": {meta}}}'
        return b"data: " + body.encode() + b"\n\n"

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


class Reply:
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
