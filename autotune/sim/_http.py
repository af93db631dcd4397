"""What one generation request asks of the simulated server: SGLang's request bodies, read.

Three APIs: SGLang's native ``/generate`` (``text`` or ``input_ids`` and ``sampling_params``),
OpenAI ``/v1/completions`` (``prompt``: text or token ids) and ``/v1/chat/completions``
(``messages``).

Token counting: ``input_ids`` count exactly; text counts one token per word and per punctuation
mark (``\\w+`` or one non-space character); a chat adds 4 tokens per message and 2 for the reply
header. The token budget is ``max_new_tokens`` (default 128) on ``/generate`` and ``max_tokens``
on the OpenAI routes (default 16 for completions and 128 for chat; ``max_completion_tokens``
wins on chat); ``/generate`` also reads ``sampling_params.stream_interval``. A body the server
cannot serve raises :class:`BadRequest` (HTTP 400).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

_WORD = re.compile(r"\w+|[^\w\s]")


class BadRequest(ValueError):
    """A request the server answers with HTTP 400."""


def count_text_tokens(text: str) -> int:
    """Tokens of a text: one per word and one per punctuation mark (at least one)."""
    return max(1, len(_WORD.findall(text)))


@dataclass(frozen=True)
class GenerationAsk:
    """The token counts and sampling parameters of one generation request."""

    prompt_tokens: int
    #: What the output words are drawn from, together with the server's seed.
    key: str
    max_new_tokens: int
    temperature: float
    stop: tuple[str, ...]
    stream: bool
    #: ``sampling_params.stream_interval`` of ``/generate`` (None: the server's).
    stream_interval: int | None = None

    @classmethod
    def parse(cls, api: str, body: dict[str, Any]) -> GenerationAsk:
        """Read a request body of ``api`` (``generate``, ``completions`` or ``chat``).

        Raises:
            BadRequest: a missing prompt, batched prompts, or a parameter of the wrong type.
        """
        params = body.get("sampling_params") or {} if api == "generate" else body
        if not isinstance(params, dict):
            raise BadRequest("sampling_params must be an object")
        interval = params.get("stream_interval") if api == "generate" else None
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
        return cls(
            prompt_tokens=prompt,
            key=key,
            max_new_tokens=_int(128 if limit is None else limit, "max_new_tokens"),
            temperature=_float(params.get("temperature", 1.0), "temperature"),
            stop=_stops(params.get("stop")),
            stream=bool(body.get("stream")),
            stream_interval=None if interval is None else _int(interval, "stream_interval"),
        )


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object.

    Raises:
        BadRequest: the body is not JSON, or not a JSON object.
    """
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the request body is not valid JSON: {e}") from e
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def check_length(prompt: int, max_new: int, *, context_length: int, kv_tokens: int) -> None:
    """Refuse a request that cannot fit the model's context or the server's KV pool.

    Raises:
        BadRequest: with the message SGLang's OpenAI layer gives (or the pool's size).
    """
    ctx = context_length
    if prompt >= ctx:
        raise BadRequest(
            f"The input ({prompt} tokens) is longer than the model's context length ({ctx} tokens)."
        )
    if prompt + max_new > ctx:
        raise BadRequest(
            f"Requested token count exceeds the model's maximum context length of {ctx} "
            f"tokens. You requested a total of {prompt + max_new} tokens: {prompt} tokens "
            f"from the input and {max_new} tokens for the completion."
        )
    if prompt + max_new > kv_tokens:
        raise BadRequest(
            f"The request needs {prompt + max_new} tokens of KV cache; the pool holds {kv_tokens}."
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


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise BadRequest(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise BadRequest(f"stop must be a string or a list of strings, got {value!r}")
    return tuple(stops)


def _message_text(message: Any) -> str:
    if not isinstance(message, dict) or "role" not in message:
        raise BadRequest("each message must be an object with a role and content")
    content = message.get("content") or ""
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)
