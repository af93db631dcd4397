"""The HTTP surface of the simulated server, against a real process over real HTTP."""

from __future__ import annotations

import itertools
import json
import re
import time
from typing import Any

import httpx
import pytest

from ._procs import SimLauncher, SimServer

SPEC_FLAGS = (
    "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
)  # fmt: skip


@pytest.fixture(scope="module")
def server(module_sim: SimLauncher) -> SimServer:
    return module_sim.start(*SPEC_FLAGS, "--enable-metrics", "--served-model-name", "llama")


@pytest.fixture
def client(server: SimServer) -> httpx.Client:
    with httpx.Client(base_url=server.url, timeout=20) as c:
        yield c


def sse(response: httpx.Response) -> list[Any]:
    """The events of a stream: JSON objects, and the string [DONE] at the end."""
    events: list[Any] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_health_and_model_info(client: httpx.Client, server: SimServer) -> None:
    assert client.get("/health").status_code == 200
    assert client.get("/health_generate").status_code == 200
    for path in ("/get_model_info", "/model_info"):
        info = client.get(path).json()
        assert info["model_path"] == "meta-llama/Llama-3.1-8B-Instruct"
        assert info["tokenizer_path"] == info["model_path"]
        assert info["is_generation"] is True


def test_server_info_has_args_and_internal_states(client: httpx.Client) -> None:
    client.post("/generate", json={"text": "warm", "sampling_params": {"max_new_tokens": 8}})
    for path in ("/get_server_info", "/server_info"):
        info = client.get(path).json()
        assert info["speculative_algorithm"] == "EAGLE3"
        assert info["speculative_num_draft_tokens"] == 4
        assert info["max_running_requests"] == 48  # SGLang's reset, flag unset
        assert 0 < info["mem_fraction_static"] < 1  # the automatic fraction, resolved
        assert info["tp_size"] == 1 and info["decode_log_interval"] == 40
        assert info["version"] == "0.5.23"
        (state,) = info["internal_states"]
        assert state["avg_spec_accept_length"] > 1.0
        assert state["memory_usage"]["token_capacity"] == info["max_total_num_tokens"] > 0
        assert {"weight", "kvcache", "graph"} <= set(state["memory_usage"])
        assert "last_gen_throughput" in state


def test_generate_counts_tokens_and_reports_speculation(client: httpx.Client) -> None:
    body = {"input_ids": list(range(37)), "sampling_params": {"max_new_tokens": 20}}
    out = client.post("/generate", json=body).json()
    meta = out["meta_info"]
    assert meta["prompt_tokens"] == 37
    assert meta["completion_tokens"] == len(out["output_ids"]) == 20
    assert len(out["text"].split()) == 20
    assert meta["finish_reason"] == {"type": "length", "length": 20}
    assert meta["cached_tokens"] == 0 and meta["e2e_latency"] > 0
    verify = meta["spec_verify_ct"]
    assert 0 < verify < 20
    assert meta["spec_accept_length"] == pytest.approx(20 / verify)
    assert meta["spec_num_proposed_drafts"] == verify * 3
    assert meta["spec_accept_rate"] == pytest.approx(
        meta["spec_num_correct_drafts"] / meta["spec_num_proposed_drafts"]
    )
    assert sum(meta["spec_correct_drafts_histogram"]) == verify
    text = client.post("/generate", json={"text": "Hello, world! How are you?"}).json()
    assert text["meta_info"]["prompt_tokens"] == 8  # words and punctuation marks
    assert text["meta_info"]["completion_tokens"] == 128  # the default budget


def test_generate_output_is_deterministic_for_a_prompt(client: httpx.Client) -> None:
    body = {"text": "same prompt", "sampling_params": {"max_new_tokens": 6}}
    first = client.post("/generate", json=body).json()
    again = client.post("/generate", json=body).json()
    other = client.post("/generate", json={**body, "text": "another prompt"}).json()
    assert first["output_ids"] == again["output_ids"] and first["text"] == again["text"]
    assert first["output_ids"] != other["output_ids"]


def test_generate_streams_cumulative_chunks(client: httpx.Client) -> None:
    body = {"text": "a b c", "sampling_params": {"max_new_tokens": 12}, "stream": True}
    with client.stream("POST", "/generate", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse(response)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) >= 2
    for before, after in itertools.pairwise(chunks):
        assert after["text"].startswith(before["text"])
        assert after["output_ids"][: len(before["output_ids"])] == before["output_ids"]
        assert before["meta_info"]["finish_reason"] is None
    last = chunks[-1]
    assert last["meta_info"]["completion_tokens"] == len(last["output_ids"]) == 12
    assert last["meta_info"]["finish_reason"]["type"] == "length"
    assert len({c["meta_info"]["id"] for c in chunks}) == 1


def test_stop_string_ends_generation(client: httpx.Client) -> None:
    probe = client.post("/generate", json={"text": "q", "sampling_params": {"max_new_tokens": 30}})
    words = probe.json()["text"].split()
    stop = words[4]
    body = {"text": "q", "sampling_params": {"max_new_tokens": 30, "stop": [stop]}}
    out = client.post("/generate", json=body).json()
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert stop not in out["text"]
    assert len(out["text"].split()) <= 4


def test_openai_completions(client: httpx.Client) -> None:
    out = client.post("/v1/completions", json={"model": "llama", "prompt": "one two"}).json()
    assert out["object"] == "text_completion"
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": 2, "completion_tokens": 16, "total_tokens": 18}
    body = {"prompt": [1, 2, 3], "max_tokens": 10, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    with client.stream("POST", "/v1/completions", json=body) as response:
        events = sse(response)
    assert events[-1] == "[DONE]"
    usage = events[-2]
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13}
    texts = [e["choices"][0]["text"] for e in events[:-2]]
    assert len("".join(texts).split()) == 10
    assert events[-3]["choices"][0]["finish_reason"] == "length"


def test_openai_chat(client: httpx.Client) -> None:
    messages = [{"role": "user", "content": "Hi there"}]
    out = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 7}).json()
    assert out["object"] == "chat.completion"
    message = out["choices"][0]["message"]
    assert message["role"] == "assistant" and len(message["content"].split()) == 7
    assert out["usage"]["completion_tokens"] == 7
    assert out["usage"]["prompt_tokens"] == 2 + 4 + 2  # two words, one message, reply header
    body = {"messages": messages, "max_tokens": 5, "stream": True}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        events = sse(response)
    assert events[-1] == "[DONE]"
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert len(content.split()) == 5
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert all("usage" not in e for e in events[:-1])


def test_models_lists_the_served_name(client: httpx.Client) -> None:
    data = client.get("/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["llama"]
    assert data[0]["root"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_flush_cache_refuses_while_requests_run(client: httpx.Client, server: SimServer) -> None:
    assert client.post("/flush_cache").status_code == 200
    body = {"text": "x", "sampling_params": {"max_new_tokens": 20_000}, "stream": True}
    with client.stream("POST", "/generate", json=body) as response:
        assert response.status_code == 200
        lines = response.iter_lines()  # kept: dropping it closes the connection
        next(lines)  # the request is running now
        assert client.get("/flush_cache").status_code == 400
    assert server.wait_for("Cache not flushed because there are pending requests")


def test_client_disconnect_cancels_the_request(server: SimServer) -> None:
    body = {"text": "long", "sampling_params": {"max_new_tokens": 20_000}, "stream": True}
    with httpx.Client(base_url=server.url, timeout=20) as c:
        with c.stream("POST", "/generate", json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()  # kept: dropping it closes the connection
            next(lines)
            assert c.get("/flush_cache").status_code == 400  # running
        # the connection is closed; the engine drops the request (flush_cache: none running)
        deadline = time.monotonic() + 10
        while c.get("/flush_cache").status_code != 200:
            assert time.monotonic() < deadline, "the request kept running after the disconnect"
            time.sleep(0.02)
        assert c.get("/get_server_info").json()["internal_states"][0]["#running-req"] == 0


def test_metrics(client: httpx.Client) -> None:
    client.post("/generate", json={"text": "m", "sampling_params": {"max_new_tokens": 4}})
    text = client.get("/metrics").text
    for name in ("num_running_reqs", "num_used_tokens", "token_usage", "gen_throughput",
                 "num_queue_reqs", "cache_hit_rate", "max_total_num_tokens",
                 "spec_accept_length", "spec_accept_rate", "prompt_tokens_total",
                 "generation_tokens_total", "num_requests_total"):  # fmt: skip
        assert re.search(rf'^sglang:{name}{{.*model_name="llama".*}} [0-9.e+-]+$', text, re.M)
    for name in ("time_to_first_token_seconds", "inter_token_latency_seconds",
                 "e2e_request_latency_seconds"):  # fmt: skip
        assert f"# TYPE sglang:{name} histogram" in text
        assert re.search(rf'^sglang:{name}_bucket{{.*le="\+Inf".*}} [1-9]', text, re.M)


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/generate", {"sampling_params": {}}, "needs text"),
        ("/generate", {"text": ["a", "b"]}, "batched requests"),
        ("/generate", {"text": "a", "sampling_params": {"max_new_tokens": 0}}, "max_new_tokens"),
        ("/generate", {"input_ids": [1] * 200_000}, "context length"),
        ("/v1/chat/completions", {"messages": []}, "messages"),
        ("/v1/completions", {"prompt": "a", "stop": 3}, "stop"),
    ],
)
def test_bad_requests_get_400_with_a_message(
    client: httpx.Client, path: str, body: dict[str, Any], fragment: str
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 400
    assert fragment in response.text


def test_invalid_json_is_a_400(client: httpx.Client) -> None:
    response = client.post("/generate", content=b"{not json")
    assert response.status_code == 400
    assert "not valid JSON" in response.text


def test_without_metrics_flag_there_is_no_metrics_route_and_api_key_guards(
    sim: SimLauncher,
) -> None:
    server = sim.start("--api-key", "sekret")
    with httpx.Client(base_url=server.url, timeout=20) as c:
        assert c.get("/metrics").status_code == 404
        assert c.get("/health").status_code == 200  # health stays open, as in SGLang
        assert c.get("/get_model_info").status_code == 401
        headers = {"Authorization": "Bearer sekret"}
        assert c.get("/get_model_info", headers=headers).status_code == 200
        info = c.get("/get_server_info", headers=headers).json()
        assert info["api_key"] != "sekret"
        (state,) = info["internal_states"]
        assert "avg_spec_accept_length" not in state  # no speculation
