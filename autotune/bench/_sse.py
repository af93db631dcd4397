"""Server-sent events: the shared parser, what one streamed response says, and its request.

:class:`SSEDecoder` serves the three APIs the benchmark speaks (``/generate``,
``/v1/completions``, ``/v1/chat/completions``). Lines end in LF, CRLF or CR (a CR at the end of
one read is held until the next read tells which); ``data:`` with or without the one optional
space; several ``data:`` lines of one event are joined with LF; ``:`` starts a comment; a blank
line ends an event; other fields (``event:``, ``id:``, ``retry:``) are ignored. Bytes are decoded
as UTF-8 incrementally, so a character split across two reads is kept whole. A line (or one
event's data) longer than :data:`MAX_LINE_CHARS` raises :class:`StreamTooLong`: a server that
streams an endless line fails its request instead of filling memory. :func:`decode_json` turns
one event's data into a JSON object; ``[DONE]`` ends the stream; anything else raises
:class:`StreamFormatError`, which fails that request only.

:class:`StreamAccumulator` reads what each API's chunks say; :class:`RequestState` sends one
request, reads its stream and classifies how it ended.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import time
from typing import TYPE_CHECKING, Any

from autotune.bench._metrics import RequestRecord
from autotune.bench._prompts import PlannedRequest
from autotune.engines import DraftStats

if TYPE_CHECKING:
    import httpx

    from autotune.engines import ServerApi

#: The data of the event that ends a stream.
DONE = "[DONE]"
#: The longest line, and the most data of one event, the decoder holds (characters). A chunk of
#: ``/generate`` carries the whole text so far: 8 Mi characters is some two million tokens.
MAX_LINE_CHARS = 8 * 1024 * 1024
#: The most of an error response's body that is read (bytes).
MAX_ERROR_BODY = 64 * 1024


class StreamFormatError(ValueError):
    """An event whose data is not what the API sends (not JSON, not an object)."""

    def __init__(self, message: str, data: str) -> None:
        super().__init__(message)
        self.data = data

    def excerpt(self, limit: int = 80) -> str:
        text = self.data if len(self.data) <= limit else self.data[:limit] + "..."
        return repr(text)


class StreamTooLong(StreamFormatError):
    """A line or an event beyond :data:`MAX_LINE_CHARS`: the stream is refused, not buffered."""


class SSEDecoder:
    """Incremental event-stream decoder: feed it network reads, get each event's data."""

    __slots__ = ("_buffer", "_data", "_data_chars", "_has_data", "_limit", "_pending", "_text")

    def __init__(self, max_line_chars: int = MAX_LINE_CHARS) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._pending: list[str] = []  # reads of a line whose end has not come yet
        self._data: list[str] = []
        self._data_chars = 0
        self._has_data = False
        self._limit = max_line_chars

    def feed(self, chunk: bytes | str) -> list[str]:
        """Add one read; return the data of every event it completed, in order.

        Raises:
            StreamTooLong: a line or an event's data grew beyond the decoder's limit.
        """
        text = self._text.decode(chunk) if isinstance(chunk, bytes) else chunk
        if not text:
            return []
        if "\n" not in text and "\r" not in text:
            # Still inside one line: keep the piece without copying what came before.
            self._pending.append(text)
            held = len(self._buffer) + sum(len(p) for p in self._pending)
            if held > self._limit:
                self._too_long((self._buffer + "".join(self._pending[:3]))[:80], held)
            return []
        if self._pending:
            self._buffer += "".join(self._pending)
            self._pending = []
        buffer = self._buffer + text
        # A CR at the very end may be the first half of a CRLF: keep it for the next read.
        if buffer.endswith("\r"):
            self._buffer = "\r"
            buffer = buffer[:-1]
        else:
            self._buffer = ""
        if "\r" in buffer:
            buffer = buffer.replace("\r\n", "\n").replace("\r", "\n")
        lines = buffer.split("\n")
        # The last piece has no line end yet.
        self._buffer = lines.pop() + self._buffer
        if len(self._buffer) > self._limit:
            self._too_long(self._buffer[:80], len(self._buffer))
        events: list[str] = []
        for line in lines:
            if len(line) > self._limit:
                self._too_long(line[:80], len(line))
            self._line(line, events)
        return events

    def _too_long(self, start: str, size: int) -> None:
        self._buffer = ""
        self._pending = []
        raise StreamTooLong(
            f"the server sent a line of more than {self._limit:,} characters ({size:,} so far) "
            "without ending it; the request is failed rather than buffered",
            start,
        )

    def close(self) -> list[str]:
        """End of stream: complete what is pending (a last event without its blank line)."""
        tail = self._text.decode(b"", final=True)
        if self._pending:
            self._buffer += "".join(self._pending)
            self._pending = []
        events = self.feed(tail) if tail else []
        pending = self._buffer
        self._buffer = ""
        if pending.endswith("\r"):
            pending = pending[:-1]
        if pending:
            self._line(pending, events)
        if self._has_data:
            events.append("\n".join(self._data))
            self._data = []
            self._data_chars = 0
            self._has_data = False
        return events

    def _line(self, line: str, events: list[str]) -> None:
        if not line:
            if self._has_data:
                events.append("\n".join(self._data))
                self._data = []
                self._data_chars = 0
                self._has_data = False
            return
        if line[0] == ":":
            return
        name, sep, value = line.partition(":")
        if not sep:
            # A field name alone: its value is empty.
            value = ""
        elif value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_chars += len(value) + 1
            if self._data_chars > self._limit:
                self._data = []
                self._data_chars = 0
                raise StreamTooLong(
                    f"one event's data lines add up to more than {self._limit:,} characters; "
                    "the request is failed rather than buffered",
                    value[:80],
                )
            self._data.append(value)
            self._has_data = True


def decode_json(data: str) -> dict[str, Any] | None:
    """One event's data as a JSON object; ``None`` for ``[DONE]``.

    Raises:
        StreamFormatError: the data is neither ``[DONE]`` nor a JSON object.
    """
    stripped = data.strip()
    if stripped == DONE:
        return None
    try:
        value = json.loads(stripped)
    except ValueError as e:
        raise StreamFormatError(f"event data is not JSON ({e})", data) from e
    if not isinstance(value, dict):
        raise StreamFormatError(
            f"event data is JSON but not an object ({type(value).__name__})", data
        )
    return value


class StreamAccumulator:
    """What one streamed response said so far, for any of the three APIs.

    Feed it network reads with the seconds since the request was sent. It notes every chunk that
    carries output (its time and, where the server says, the cumulative output tokens), the token
    counts and speculative statistics of ``meta_info`` (``/generate``) or ``usage`` (OpenAI
    routes), whether a finish reason and ``[DONE]`` arrived, and an error event's message.

    ``/generate`` streams cumulative ``text`` and ``meta_info.completion_tokens`` (tokens so far);
    with speculative decoding one chunk can add several tokens. The OpenAI routes stream text
    deltas and, with ``stream_options.include_usage``, a last chunk with ``usage``.

    ``server_api`` reads the speculative statistics of ``meta_info`` (the engine's; ``None``:
    none are read); the latest value of each one is kept in :attr:`spec`.
    """

    __slots__ = (
        "_api",
        "_decoder",
        "_last_text",
        "_server_api",
        "chunk_times",
        "chunk_tokens",
        "completion_tokens",
        "done",
        "finished",
        "prompt_tokens",
        "server_error",
        "spec",
    )

    def __init__(self, api: str, server_api: ServerApi | None = None) -> None:
        self._api = api
        self._server_api = server_api
        self._decoder = SSEDecoder()
        self._last_text: str | None = None
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int | None] = []
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.spec = DraftStats()
        self.finished = False
        self.done = False
        self.server_error: str | None = None

    def feed(self, chunk: bytes, now: float) -> bool:
        """Take one read; return True once the stream is over (``[DONE]`` or an error event).

        Raises:
            StreamFormatError: an event that is not JSON or not an object.
        """
        for data in self._decoder.feed(chunk):
            self._event(data, now)
            if self.done:
                return True
        return False

    def close(self, now: float) -> None:
        """The connection ended: take a last event that had no blank line after it."""
        for data in self._decoder.close():
            if self.done:
                return
            self._event(data, now)

    def _event(self, data: str, now: float) -> None:
        obj = decode_json(data)
        if obj is None:
            self.done = True
            return
        error = obj.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else None
            self.server_error = str(message or error)
            self.done = True
            return
        if self._api == "generate":
            self._generate(obj, now)
        else:
            self._openai(obj, now)

    def _generate(self, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("meta_info")
        meta = meta if isinstance(meta, dict) else {}
        text = obj.get("text")
        count = _int(meta.get("completion_tokens"))
        if count is not None:
            if count > (self.completion_tokens or 0):
                self._token_chunk(now, count)
            self.completion_tokens = max(count, self.completion_tokens or 0)
        elif isinstance(text, str) and text and text != self._last_text:
            self._token_chunk(now, None)
        if isinstance(text, str):
            self._last_text = text
        prompt = _int(meta.get("prompt_tokens"))
        if prompt is not None:
            self.prompt_tokens = prompt
        if self._server_api is not None:
            self.spec = self.spec.updated(self._server_api.from_meta_info(meta))
        if meta.get("finish_reason"):
            self.finished = True

    def _openai(self, obj: dict[str, Any], now: float) -> None:
        usage = obj.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        count = _int(usage.get("completion_tokens"))
        choices = obj.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if isinstance(choice, dict):
            if self._api == "chat":
                delta = choice.get("delta")
                delta = delta if isinstance(delta, dict) else {}
                content = delta.get("content") or delta.get("reasoning_content")
            else:
                content = choice.get("text")
            if isinstance(content, str) and content:
                self._token_chunk(now, count)
            if choice.get("finish_reason"):
                self.finished = True
        if count is not None:
            self.completion_tokens = count
        prompt = _int(usage.get("prompt_tokens"))
        if prompt is not None:
            self.prompt_tokens = prompt

    def _token_chunk(self, now: float, cumulative: int | None) -> None:
        self.chunk_times.append(now)
        self.chunk_tokens.append(cumulative)


async def _read_at_most(response: httpx.Response, limit: int) -> bytes:
    """The first ``limit`` bytes of a body (an endless one is not read to its end)."""
    out = bytearray()
    async for chunk in response.aiter_bytes():
        out += chunk
        if len(out) >= limit:
            break
    return bytes(out[:limit])


def _int(raw: Any) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int):
        return None
    return raw


class RequestState:
    """One request in flight: sends it, reads its stream, and becomes a :class:`RequestRecord`.

    Times are ``time.perf_counter`` seconds; ``start`` is relative to the phase's origin.
    ``server_api`` reads the answer's speculative statistics (see :class:`StreamAccumulator`).
    """

    __slots__ = ("e2e", "error", "planned", "request_timeout_s", "start", "stream")

    def __init__(
        self,
        planned: PlannedRequest,
        request_timeout_s: float | None,
        *,
        server_api: ServerApi | None = None,
    ) -> None:
        self.planned = planned
        self.request_timeout_s = request_timeout_s
        self.stream = StreamAccumulator(planned.api, server_api)
        self.start: float | None = None
        self.e2e: float | None = None
        self.error: tuple[str, str] | None = None

    async def send(self, client: httpx.AsyncClient, origin: float) -> None:
        import httpx

        body = json.dumps(self.planned.payload).encode()
        sent = time.perf_counter()
        self.start = sent - origin
        limit = self.request_timeout_s
        try:
            async with client.stream(
                "POST",
                self.planned.path,
                content=body,
                headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
            ) as response:
                if response.status_code != 200:
                    text = (await _read_at_most(response, MAX_ERROR_BODY))[:200].decode(
                        "utf-8", "replace"
                    )
                    self._fail(f"http_{response.status_code}", text.strip() or "(empty body)")
                    return
                async for chunk in response.aiter_bytes():
                    now = time.perf_counter() - sent
                    if self.stream.done:
                        continue  # read what follows [DONE] so the connection can be reused
                    if self.stream.feed(chunk, now):
                        self.e2e = now
                    elif limit is not None and now > limit:
                        self._fail("request_timeout", f"still streaming after {limit:g} s")
                        return
                if not self.stream.done:
                    self.stream.close(time.perf_counter() - sent)
        except asyncio.CancelledError:
            self._fail("timeout", "cancelled at the benchmark deadline while running")
            raise
        except StreamTooLong as e:
            self._fail("line_too_long", f"{e}; it began {e.excerpt()}")
        except StreamFormatError as e:
            self._fail("malformed", f"{e}: {e.excerpt()}")
        except httpx.ReadTimeout:
            self._fail("stalled", f"no data for {client.timeout.read:g} s")
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            self._fail("connect", str(e) or type(e).__name__)
        except (httpx.RemoteProtocolError, httpx.ReadError) as e:
            self._fail("disconnected", str(e) or type(e).__name__)
        except httpx.PoolTimeout:
            self._fail("pool", "no free connection in time")
        except httpx.HTTPError as e:
            self._fail("http_error", f"{type(e).__name__}: {e}")
        finally:
            if self.e2e is None:
                self.e2e = time.perf_counter() - sent
        if self.error is None:
            self._judge()

    def _judge(self) -> None:
        stream = self.stream
        if stream.server_error is not None:
            self._fail("server_error", stream.server_error)
        elif not (stream.done or stream.finished):
            self._fail("incomplete", "the stream ended before a finish reason or [DONE]")
        elif not stream.chunk_times:
            self._fail("empty", "the stream carried no output")

    def _fail(self, reason: str, detail: str) -> None:
        # After [DONE] the response is complete: what happens to the connection then is not
        # this request's failure.
        if self.error is None and not (self.stream.done and self.stream.server_error is None):
            self.error = (reason, detail)

    def expire(self, origin: float) -> None:
        """Mark a request that never ran (the deadline came first) as failed."""
        if self.start is None:
            self.error = ("timeout", "not sent before the benchmark deadline")
        elif self.e2e is None:
            self.e2e = time.perf_counter() - origin - self.start
            self._fail("timeout", "cancelled at the benchmark deadline while running")

    def record(self) -> RequestRecord:
        stream, planned = self.stream, self.planned
        completion = stream.completion_tokens
        if completion is None:
            # No usage reported: the requested length, as bench_serving assumes, for a completed
            # request; the chunks seen (a lower bound) for a failed one.
            completion = len(stream.chunk_times) if self.error else planned.output_tokens
        spec = stream.spec
        return RequestRecord(
            index=planned.index,
            warmup=planned.warmup,
            start=self.start,
            ttft=stream.chunk_times[0] if stream.chunk_times else None,
            e2e=self.e2e,
            chunk_times=tuple(stream.chunk_times),
            chunk_tokens=tuple(stream.chunk_tokens),
            prompt_tokens=stream.prompt_tokens or planned.input_tokens,
            completion_tokens=completion,
            spec_verify_ct=spec.verify_ct,
            spec_accept_length=spec.accept_length,
            spec_accept_rate=spec.accept_rate,
            spec_num_correct_drafts=spec.num_correct_drafts,
            spec_num_proposed_drafts=spec.num_proposed_drafts,
            error=None if self.error is None else self.error[0],
            error_detail=None if self.error is None else self.error[1],
        )
