"""Requests built from workloads: synthetic, JSONL and ShareGPT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune._errors import ConfigError
from autotune.bench import LengthDist, RequestFactory, WorkloadSpec
from autotune.bench._prompts import TOKEN_ID_RANGE, WARMUP_MAX_OUTPUT

SPREAD = WorkloadSpec(
    num_prompts=12,
    warmup=3,
    input_len=LengthDist(40, "uniform", 0.5),
    output_len=LengthDist(64, "uniform", 0.5),
    temperature=0.7,
    seed=11,
)


def test_synthetic_generate_sends_input_ids_of_the_sampled_lengths() -> None:
    requests = RequestFactory(SPREAD).measured()
    lengths = SPREAD.sample_lengths()
    assert [(len(r.payload["input_ids"]), r.output_tokens) for r in requests] == lengths
    low, high = TOKEN_ID_RANGE
    assert all(low <= t < high for r in requests for t in r.payload["input_ids"])
    body = requests[0].payload
    assert body["stream"] is True
    assert body["sampling_params"] == {
        "max_new_tokens": lengths[0][1],
        "temperature": 0.7,
        "ignore_eos": True,
    }
    assert requests[0].path == "/generate" and requests[0].exact_input


def test_synthetic_prompts_are_deterministic_and_distinct() -> None:
    first = [r.payload["input_ids"] for r in RequestFactory(SPREAD).measured()]
    again = [r.payload["input_ids"] for r in RequestFactory(SPREAD).measured()]
    assert first == again
    assert len({tuple(ids[:8]) for ids in first}) == len(first)  # no shared prefixes
    other_seed = RequestFactory(SPREAD.with_changes(seed=12)).measured()
    assert [r.payload["input_ids"] for r in other_seed] != first


def test_variant_changes_contents_not_lengths() -> None:
    base = RequestFactory(SPREAD).measured()
    variant = RequestFactory(SPREAD, variant=1).measured()
    assert [len(r.payload["input_ids"]) for r in variant] == [
        len(r.payload["input_ids"]) for r in base
    ]
    pairs = zip(base, variant, strict=True)
    assert all(a.payload["input_ids"] != b.payload["input_ids"] for a, b in pairs)


def test_warmup_is_separate_capped_and_does_not_move_measured_requests() -> None:
    factory = RequestFactory(SPREAD)
    warm = factory.warmup()
    assert len(warm) == 3 and all(r.warmup for r in warm)
    assert all(r.output_tokens <= WARMUP_MAX_OUTPUT for r in warm)
    more_warmup = RequestFactory(SPREAD.with_changes(warmup=7)).measured()
    assert [r.payload for r in more_warmup] == [r.payload for r in factory.measured()]


def test_completions_text_prompt_of_about_the_sampled_length() -> None:
    workload = SPREAD.with_changes(api="completions", ignore_eos=False)
    requests = RequestFactory(workload, model="served").measured()
    for request, (n_in, n_out) in zip(requests, workload.sample_lengths(), strict=True):
        body = request.payload
        assert len(body["prompt"].split()) == n_in  # one common word per token
        assert body["max_tokens"] == n_out
        assert body["ignore_eos"] is False
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert body["model"] == "served"
        assert request.path == "/v1/completions" and not request.exact_input


def test_chat_wraps_text_as_a_user_message() -> None:
    request = RequestFactory(SPREAD.with_changes(api="chat")).measured()[0]
    messages = request.payload["messages"]
    assert [m["role"] for m in messages] == ["user"]
    assert request.path == "/v1/chat/completions"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def jsonl_workload(path: Path, **changes: object) -> WorkloadSpec:
    values = {"source": "jsonl", "path": str(path), "num_prompts": 2, "warmup": 1}
    values.update(changes)
    return WorkloadSpec(**values)  # type: ignore[arg-type]


def test_jsonl_prompts_messages_and_output_len(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "p.jsonl",
        '{"prompt": "Say hello", "output_len": 7}\n'
        "\n"
        '{"messages": [{"role": "system", "content": "Be brief"},'
        ' {"role": "user", "content": "Why?"}]}\n',
    )
    workload = jsonl_workload(path, api="chat", output_len=LengthDist(33))
    requests = RequestFactory(workload).measured()
    by_len = sorted((r.output_tokens, r.payload["messages"]) for r in requests)
    assert by_len[0] == (7, [{"role": "user", "content": "Say hello"}])
    assert by_len[1][0] == 33
    assert [m["role"] for m in by_len[1][1]] == ["system", "user"]
    warm = RequestFactory(workload).warmup()
    assert len(warm) == 1 and warm[0].output_tokens <= WARMUP_MAX_OUTPUT


def test_jsonl_text_prompts_for_generate(tmp_path: Path) -> None:
    path = write(tmp_path, "p.jsonl", '{"prompt": "one"}\n{"prompt": "two"}\n')
    requests = RequestFactory(jsonl_workload(path)).measured()
    assert sorted(r.payload["text"] for r in requests) == ["one", "two"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"text": "no prompt key"}', "needs a non-empty 'prompt'"),
        ('{"prompt": "x", "output_len": 0}', "output_len must be an integer >= 1"),
        ('{"messages": []}', "'messages' must be a non-empty list"),
        ('{"messages": [{"content": "x"}]}', "messages[0] must be an object"),
    ],
)
def test_jsonl_errors_name_the_file_and_line(tmp_path: Path, line: str, expected: str) -> None:
    path = write(tmp_path, "bad.jsonl", '{"prompt": "a"}\n\n' + line + "\n")
    with pytest.raises(ConfigError) as info:
        RequestFactory(jsonl_workload(path))
    message = str(info.value)
    assert f"{path}:line 3" in message
    assert expected in message


def test_jsonl_messages_need_the_chat_api(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", '{"messages": [{"role": "user", "content": "x"}]}\n' * 2)
    with pytest.raises(ConfigError) as info:
        RequestFactory(jsonl_workload(path, api="completions"))
    assert "line 1" in str(info.value) and info.value.hint is not None


def test_too_few_prompts_for_num_prompts(tmp_path: Path) -> None:
    path = write(tmp_path, "p.jsonl", '{"prompt": "only one"}\n')
    with pytest.raises(ConfigError) as info:
        RequestFactory(jsonl_workload(path, num_prompts=5))
    assert "1 usable prompts" in str(info.value)


def test_missing_prompt_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        RequestFactory(jsonl_workload(tmp_path / "absent.jsonl"))
    assert "absent.jsonl" in str(info.value)


def sharegpt(tmp_path: Path, data: object) -> WorkloadSpec:
    path = write(tmp_path, "sg.json", json.dumps(data))
    return WorkloadSpec(
        source="sharegpt", path=str(path), num_prompts=2, api="completions", seed=4,
        output_len=LengthDist(100, "uniform", 0.2),
    )  # fmt: skip


def test_sharegpt_first_human_turn_and_workload_output_len(tmp_path: Path) -> None:
    data = [
        {"conversations": [{"from": "human", "value": "Q1"}, {"from": "gpt", "value": "A1"},
                           {"from": "human", "value": "Q1b"}]},
        {"conversations": [{"from": "gpt", "value": "no human turn"}]},
        {"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Q2"}]},
    ]  # fmt: skip
    workload = sharegpt(tmp_path, data)
    requests = RequestFactory(workload).measured()
    assert sorted(r.payload["prompt"] for r in requests) == ["Q1", "Q2"]
    assert [r.output_tokens for r in requests] == [n for _, n in workload.sample_lengths()]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"conversations": []}, "must be a JSON list"),
        ([{"conversations": [{"from": "human", "value": "x"}]}, "oops"], "entry 1"),
        ([{"conversations": "text"}], "entry 0"),
    ],
)
def test_sharegpt_errors_are_located(tmp_path: Path, data: object, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        RequestFactory(sharegpt(tmp_path, data))
    assert expected in str(info.value)
    assert "sg.json" in str(info.value)


def test_sharegpt_not_json(tmp_path: Path) -> None:
    path = write(tmp_path, "sg.json", "[{")
    with pytest.raises(ConfigError) as info:
        RequestFactory(WorkloadSpec(source="sharegpt", path=str(path)))
    assert "not valid JSON" in str(info.value)
