"""The event-stream decoder and the per-API stream reader."""

from __future__ import annotations

import json

import pytest

from autotune.bench import SSEDecoder, StreamAccumulator, StreamFormatError, decode_json
from autotune.engines.sglang import SGLANG_API


def feed_all(chunks: list[bytes]) -> list[str]:
    decoder = SSEDecoder()
    out: list[str] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    out.extend(decoder.close())
    return out


def test_data_with_and_without_space() -> None:
    assert feed_all([b'data: {"a":1}\n\ndata:{"b":2}\n\n']) == ['{"a":1}', '{"b":2}']


def test_only_one_leading_space_is_removed() -> None:
    assert feed_all([b"data:   x\n\n"]) == ["  x"]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert feed_all([b"data: first\ndata: second\ndata:\n\n"]) == ["first\nsecond\n"]


def test_comments_and_other_fields_are_ignored() -> None:
    stream = b": keep-alive\nevent: message\nid: 7\nretry: 100\ndata: payload\n\n: bye\n\n"
    assert feed_all([stream]) == ["payload"]


def test_event_without_data_dispatches_nothing() -> None:
    assert feed_all([b"event: ping\n\n\n\n"]) == []


@pytest.mark.parametrize("newline", [b"\r\n", b"\r", b"\n"])
def test_every_line_ending(newline: bytes) -> None:
    stream = b"data: a" + newline + b"data: b" + newline + newline + b"data: c" + newline * 2
    assert feed_all([stream]) == ["a\nb", "c"]


def test_crlf_split_between_reads_is_one_line_end() -> None:
    # The CR ends one read and its LF starts the next: one line end, not a line end and a blank.
    assert feed_all([b"data: a\r", b"\ndata: b\r\n\r\n"]) == ["a\nb"]


def test_utf8_character_split_between_reads() -> None:
    encoded = 'data: {"text": "caf\u00e9 \u2603"}\n\n'.encode()
    cut = encoded.index("\u2603".encode()) + 1  # inside the three bytes of the snowman
    assert feed_all([encoded[:cut], encoded[cut:]]) == ['{"text": "caf\u00e9 \u2603"}']


def test_line_separator_inside_json_is_not_a_line_end() -> None:
    # orjson writes U+2028 raw inside strings; only CR and LF end lines.
    payload = json.dumps({"text": "a\u2028b"}, ensure_ascii=False)
    assert feed_all([f"data: {payload}\n\n".encode()]) == [payload]


def test_byte_by_byte_equals_whole() -> None:
    stream = b': comment\r\ndata: {"x": 1}\r\n\r\ndata: {"y":\r\ndata: 2}\n\ndata:[DONE]\r\r'
    whole = feed_all([stream])
    assert feed_all([stream[i : i + 1] for i in range(len(stream))]) == whole
    assert whole == ['{"x": 1}', '{"y":\n2}', "[DONE]"]


def test_close_dispatches_last_event_without_blank_line() -> None:
    assert feed_all([b"data: tail"]) == ["tail"]
    assert feed_all([b"data: tail\r"]) == ["tail"]


def test_decode_json_done_and_objects() -> None:
    assert decode_json("[DONE]") is None
    assert decode_json(' {"a": [1]} ') == {"a": [1]}


@pytest.mark.parametrize("data", ["{not json", "", "[1, 2]", '"text"', "nan"])
def test_decode_json_rejects_non_objects(data: str) -> None:
    with pytest.raises(StreamFormatError) as info:
        decode_json(data)
    assert info.value.data == data


def _events(*objs: object) -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs)


def test_generate_stream_counts_tokens_per_chunk() -> None:
    acc = StreamAccumulator("generate", SGLANG_API)
    meta = {"prompt_tokens": 5, "spec_verify_ct": 1}
    over = acc.feed(_events({"text": "a", "meta_info": {**meta, "completion_tokens": 1}}), 0.1)
    assert not over
    # a chunk that adds no token (same count) is not an output chunk
    acc.feed(_events({"text": "a", "meta_info": {**meta, "completion_tokens": 1}}), 0.15)
    acc.feed(
        _events(
            {
                "text": "abcd",
                "meta_info": {
                    **meta,
                    "completion_tokens": 4,
                    "spec_verify_ct": 2,
                    "finish_reason": {"type": "length"},
                },
            }
        ),
        0.3,
    )
    assert acc.feed(b"data: [DONE]\n\n", 0.31)
    assert acc.chunk_times == [0.1, 0.3]
    assert acc.chunk_tokens == [1, 4]
    assert acc.completion_tokens == 4
    assert acc.prompt_tokens == 5
    assert acc.spec.verify_ct == 2
    assert acc.finished and acc.done


def test_completions_stream_uses_usage_chunk() -> None:
    acc = StreamAccumulator("completions")
    acc.feed(_events({"choices": [{"text": "x", "finish_reason": None}]}), 0.1)
    acc.feed(_events({"choices": [{"text": "yz", "finish_reason": "length"}]}), 0.2)
    acc.feed(_events({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}), 0.3)
    assert acc.chunk_times == [0.1, 0.2]
    assert acc.chunk_tokens == [None, None]
    assert (acc.prompt_tokens, acc.completion_tokens) == (9, 3)
    assert acc.finished and not acc.done


def test_chat_stream_ignores_role_only_delta() -> None:
    acc = StreamAccumulator("chat")
    acc.feed(_events({"choices": [{"delta": {"role": "assistant", "content": ""}}]}), 0.05)
    acc.feed(_events({"choices": [{"delta": {"content": "hi"}}]}), 0.1)
    assert acc.chunk_times == [0.1]


def test_error_event_ends_the_stream() -> None:
    acc = StreamAccumulator("generate")
    assert acc.feed(_events({"error": {"message": "out of memory"}}), 0.1)
    assert acc.server_error == "out of memory"


def test_malformed_event_raises_for_that_request() -> None:
    acc = StreamAccumulator("generate")
    with pytest.raises(StreamFormatError):
        acc.feed(b"data: <html>\n\n", 0.1)


def test_wrong_field_types_are_ignored_not_fatal() -> None:
    acc = StreamAccumulator("generate")
    bad = _events({"text": 3, "meta_info": "nope"}, {"meta_info": {"completion_tokens": "2"}})
    acc.feed(bad, 0.1)
    assert acc.chunk_times == []
    assert acc.completion_tokens is None
