"""The requests a workload sends: prompts, lengths and the JSON body for each API.

Sources:

- ``synthetic``: lengths from :meth:`WorkloadSpec.sample_lengths`. For ``api: generate`` the
  prompt is ``input_ids`` of exactly the sampled length (token ids drawn uniformly from
  ``[1000, 30000)``, inside the vocabulary of every current model family and clear of the low ids
  where tokenizers keep special and byte tokens). For ``completions`` and ``chat`` the prompt is
  text: common English words that most BPE tokenizers encode as one token each (with their leading
  space), as many as the sampled length. The server's tokenizer decides the exact count (typically
  within a few percent; a chat template adds its own tokens), and the server's reported
  ``prompt_tokens`` are what the metrics use.
- ``jsonl``: one JSON object per line with ``prompt`` (text) or ``messages`` (chat turns) and an
  optional ``output_len``; blank lines are skipped.
- ``sharegpt``: a JSON list of ``{"conversations": [{"from": ..., "value": ...}, ...]}``; the first
  human turn is the prompt. Entries without one are skipped.

For files, prompts are shuffled under the workload seed and the first ``num_prompts`` are sent;
output lengths come from the line's ``output_len`` or else from the workload's ``output_len``.
Everything is deterministic under the seed; warm-up requests come from their own random stream and
ask for at most :data:`WARMUP_MAX_OUTPUT` tokens, as SGLang's bench_serving does.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune._errors import ConfigError
from autotune._workload import WorkloadSpec

#: Endpoint of each API.
API_PATHS: Mapping[str, str] = {
    "generate": "/generate",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}

#: Warm-up requests generate at most this many tokens.
WARMUP_MAX_OUTPUT = 32

#: Synthetic token ids are drawn from this half-open range.
TOKEN_ID_RANGE = (1000, 30000)

#: Characters per token assumed when a text prompt's token count must be estimated.
CHARS_PER_TOKEN = 4.0

#: Words most BPE tokenizers encode as one token each (with their leading space).
_VOCABULARY = (
    " the of and to in is that for it as was with be by on not he this are or his from at"
    " which but have an had they you were their one all we can her has there been if more"
    " when will would who so no time people year way day man world life hand part place"
    " case week point number water room money story fact month book eye job word business"
    " side kind head house service friend power hour game line end city name team idea body"
    " family school country problem state group company system program question government"
    " night home area market music light voice table river paper history letter field"
    " summer plan road window"
)


@dataclass(frozen=True)
class PlannedRequest:
    """One request, ready to send: the endpoint, the JSON body and the lengths it asks for.

    ``input_tokens`` is exact when ``exact_input`` (token ids), else an estimate; the server's own
    count, when it reports one, replaces it in the request's record.
    """

    index: int
    api: str
    path: str
    payload: Mapping[str, Any]
    input_tokens: int
    output_tokens: int
    exact_input: bool
    warmup: bool = False


@dataclass(frozen=True)
class _Prompt:
    text: str | None = None
    messages: tuple[Mapping[str, Any], ...] | None = None
    output_len: int | None = None
    location: str = ""


class RequestFactory:
    """Builds the measured and warm-up requests of one workload.

    ``model`` is the ``model`` field of OpenAI-style bodies (SGLang serves one model and accepts
    its served name; ``default`` works when the name is unknown). ``variant`` > 0 draws other
    synthetic prompt contents of the same lengths (repeats on one server then share no prefix
    with each other, so the prefix cache cannot favour a later repeat); file prompts are the
    same in every variant.

    Raises (at construction):
        ConfigError: an unreadable or malformed prompt file (naming the file and line or entry),
            or too few usable prompts for ``num_prompts``.
    """

    def __init__(self, workload: WorkloadSpec, *, model: str = "default", variant: int = 0) -> None:
        self.workload = workload
        self.model = model
        self.variant = variant
        self._words = tuple(_VOCABULARY.split())
        self._ids = range(*TOKEN_ID_RANGE)
        self._salt = f"{workload.seed}" if variant == 0 else f"{workload.seed}:{variant}"
        self._pool: list[_Prompt] = []
        if workload.source != "synthetic":
            self._pool = self._load_file()

    def measured(self) -> list[PlannedRequest]:
        """The ``num_prompts`` requests whose results are measured."""
        w = self.workload
        lengths = w.sample_lengths()
        if w.source == "synthetic":
            return [
                self._synthetic(i, n_in, n_out, random.Random(f"{self._salt}:prompt:{i}"), False)
                for i, (n_in, n_out) in enumerate(lengths)
            ]
        order = list(range(len(self._pool)))
        random.Random(f"{w.seed}:prompts").shuffle(order)
        return [
            self._from_prompt(i, self._pool[order[i]], lengths[i][1], False)
            for i in range(w.num_prompts)
        ]

    def warmup(self) -> list[PlannedRequest]:
        """The ``warmup`` requests sent first and left out of every figure."""
        w = self.workload
        rng = random.Random(f"{self._salt}:warmup")
        out: list[PlannedRequest] = []
        for i in range(w.warmup):
            n_out = min(w.output_len.sample(rng), WARMUP_MAX_OUTPUT)
            if w.source == "synthetic":
                n_in = w.input_len.sample(rng)
                out.append(self._synthetic(i, n_in, n_out, rng, True))
            else:
                prompt = self._pool[rng.randrange(len(self._pool))]
                out.append(self._from_prompt(i, prompt, n_out, True, cap=WARMUP_MAX_OUTPUT))
        return out

    # -- building ---------------------------------------------------------------------------

    def _synthetic(
        self, index: int, n_in: int, n_out: int, rng: random.Random, warmup: bool
    ) -> PlannedRequest:
        api = self.workload.api
        if api == "generate":
            ids = rng.choices(self._ids, k=n_in)
            return self._planned(index, {"input_ids": ids}, n_in, n_out, True, warmup)
        words = self._words
        text = " ".join(rng.choice(words) for _ in range(n_in))
        prompt = _Prompt(text=text)
        return self._planned(index, self._prompt_body(prompt), n_in, n_out, False, warmup)

    def _from_prompt(
        self, index: int, prompt: _Prompt, default_out: int, warmup: bool, cap: int | None = None
    ) -> PlannedRequest:
        n_out = prompt.output_len if prompt.output_len is not None else default_out
        if cap is not None:
            n_out = min(n_out, cap)
        if prompt.messages is not None:
            chars = sum(len(str(m.get("content", ""))) for m in prompt.messages)
        else:
            chars = len(prompt.text or "")
        n_in = max(1, round(chars / CHARS_PER_TOKEN))
        return self._planned(index, self._prompt_body(prompt), n_in, n_out, False, warmup)

    def _prompt_body(self, prompt: _Prompt) -> dict[str, Any]:
        api = self.workload.api
        if api == "generate":
            return {"text": prompt.text}
        if api == "completions":
            return {"model": self.model, "prompt": prompt.text}
        if prompt.messages is not None:
            messages = [dict(m) for m in prompt.messages]
        else:
            messages = [{"role": "user", "content": prompt.text}]
        return {"model": self.model, "messages": messages}

    def _planned(
        self,
        index: int,
        body: dict[str, Any],
        n_in: int,
        n_out: int,
        exact: bool,
        warmup: bool,
    ) -> PlannedRequest:
        w = self.workload
        if w.api == "generate":
            body["sampling_params"] = {
                "max_new_tokens": n_out,
                "temperature": w.temperature,
                "ignore_eos": w.ignore_eos,
            }
            body["stream"] = True
        else:
            body["max_tokens"] = n_out
            body["temperature"] = w.temperature
            # SGLang accepts ignore_eos on its OpenAI-compatible routes too.
            body["ignore_eos"] = w.ignore_eos
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return PlannedRequest(
            index=index,
            api=w.api,
            path=API_PATHS[w.api],
            payload=body,
            input_tokens=n_in,
            output_tokens=n_out,
            exact_input=exact,
            warmup=warmup,
        )

    # -- files ------------------------------------------------------------------------------

    def _load_file(self) -> list[_Prompt]:
        w = self.workload
        if w.path is None:
            raise ConfigError(
                f"source {w.source!r} needs a path to the prompt file", location="workload.path"
            )
        path = Path(w.path).expanduser()
        try:
            raw = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(
                f"cannot read the prompt file: {e}",
                source=path,
                hint="check workload.path points to a readable UTF-8 file",
            ) from e
        pool = _read_jsonl(raw, path) if w.source == "jsonl" else _read_sharegpt(raw, path)
        for prompt in pool:
            if prompt.messages is not None and w.api != "chat":
                raise ConfigError(
                    f"a 'messages' prompt needs api 'chat', the workload uses {w.api!r}",
                    source=path,
                    location=prompt.location,
                    hint="set api: chat, or give a 'prompt' text instead",
                )
        if len(pool) < w.num_prompts:
            raise ConfigError(
                f"the prompt file has {len(pool)} usable prompts, the workload asks for "
                f"num_prompts={w.num_prompts}",
                source=path,
                hint=f"lower num_prompts to {len(pool)} or less, or add prompts",
            )
        return pool


def _read_jsonl(raw: str, path: Path) -> list[_Prompt]:
    pool: list[_Prompt] = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            item = json.loads(line)
        except ValueError as e:
            raise ConfigError(
                f"not valid JSON ({e})",
                source=path,
                location=where,
                hint="each line must be one JSON object",
            ) from e
        if not isinstance(item, dict):
            raise ConfigError(
                f"expected a JSON object, got {type(item).__name__}", source=path, location=where
            )
        output_len = item.get("output_len")
        if output_len is not None and (
            isinstance(output_len, bool) or not isinstance(output_len, int) or output_len < 1
        ):
            raise ConfigError(
                f"output_len must be an integer >= 1, got {output_len!r}",
                source=path,
                location=where,
            )
        if "messages" in item:
            messages = _messages(item["messages"], path, where)
            pool.append(_Prompt(messages=messages, output_len=output_len, location=where))
        elif isinstance(item.get("prompt"), str) and item["prompt"]:
            pool.append(_Prompt(text=item["prompt"], output_len=output_len, location=where))
        else:
            raise ConfigError(
                "needs a non-empty 'prompt' string or a 'messages' list",
                source=path,
                location=where,
                hint='e.g. {"prompt": "Explain ...", "output_len": 256}',
            )
    return pool


def _messages(raw: Any, path: Path, where: str) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError("'messages' must be a non-empty list", source=path, location=where)
    for i, message in enumerate(raw):
        if (
            not isinstance(message, dict)
            or not isinstance(message.get("role"), str)
            or "content" not in message
        ):
            raise ConfigError(
                f"messages[{i}] must be an object with 'role' and 'content'",
                source=path,
                location=where,
            )
    return tuple(raw)


def _read_sharegpt(raw: str, path: Path) -> list[_Prompt]:
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise ConfigError(
            f"not valid JSON ({e})", source=path, hint="a ShareGPT file is one JSON list"
        ) from e
    if not isinstance(data, list):
        raise ConfigError(
            f"a ShareGPT file must be a JSON list, got {type(data).__name__}", source=path
        )
    pool: list[_Prompt] = []
    for number, entry in enumerate(data):
        where = f"entry {number}"
        conversations = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(conversations, Sequence) or isinstance(conversations, str):
            raise ConfigError(
                "expected an object with a 'conversations' list", source=path, location=where
            )
        text = _first_human_turn(conversations)
        if text:
            pool.append(_Prompt(text=text, location=where))
    return pool


def _first_human_turn(conversations: Sequence[Any]) -> str | None:
    for turn in conversations:
        if not isinstance(turn, dict):
            continue
        if turn.get("from") in ("human", "user") and isinstance(turn.get("value"), str):
            value: str = turn["value"]
            return value or None
    return None
