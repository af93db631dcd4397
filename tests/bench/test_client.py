"""The client against a real HTTP server speaking SGLang's protocol (see conftest.py)."""

from __future__ import annotations

import asyncio

import pytest

from autotune._errors import BenchmarkError
from autotune._launch import Timeouts
from autotune.bench import BenchmarkClient, ClientOptions, LengthDist, WorkloadSpec, run_benchmark

from ._server import ProtocolServer

pytestmark = pytest.mark.timeout(60)

FAST = ClientOptions(progress=False, read_timeout_s=5.0, benchmark_timeout_s=30.0)


def workload(**changes: object) -> WorkloadSpec:
    values: dict[str, object] = {
        "num_prompts": 8,
        "warmup": 0,
        "concurrency": 4,
        "input_len": LengthDist(12),
        "output_len": LengthDist(10),
    }
    values.update(changes)
    return WorkloadSpec(**values)  # type: ignore[arg-type]


def test_generate_run_counts_tokens_and_acceptance(sglang_server: ProtocolServer) -> None:
    result = run_benchmark(sglang_server.url, workload(), FAST)
    assert (result.completed, result.failed) == (8, 0)
    assert result.total_output_tokens == 80
    assert result.total_input_tokens == 8 * 12
    finals = sglang_server.seen.finals
    tokens = sum(f["completion_tokens"] for f in finals)
    expected = tokens / sum(f["spec_verify_ct"] for f in finals)
    assert result.acceptance_source == "request_meta_info"
    assert result.accept_length == pytest.approx(expected)
    correct = sum(f["spec_num_correct_drafts"] for f in finals)
    proposed = sum(f["spec_num_proposed_drafts"] for f in finals)
    assert result.accept_rate == pytest.approx(correct / proposed)
    # one ITL value per token after each request's first chunk
    first_chunk = 1  # the server's first chunk carries one token
    assert sum(len(r.itls()) for r in result.records) == 8 * (10 - first_chunk)
    assert all(r.ttft is not None and r.e2e is not None and r.ttft <= r.e2e for r in result.records)


def test_warmup_is_sent_first_and_excluded(sglang_server: ProtocolServer) -> None:
    result = run_benchmark(sglang_server.url, workload(warmup=3, output_len=LengthDist(40)), FAST)
    bodies = sglang_server.seen.bodies
    assert len(bodies) == 3 + 8
    assert [b["sampling_params"]["max_new_tokens"] for b in bodies[:3]] == [32, 32, 32]
    assert result.completed == 8
    assert result.total_output_tokens == 8 * 40
    assert sum(1 for r in result.records if r.warmup) == 3


def test_openai_routes_use_usage_and_the_served_model(sglang_server: ProtocolServer) -> None:
    for api in ("completions", "chat"):
        sglang_server.reset()
        result = run_benchmark(sglang_server.url, workload(api=api), FAST)
        assert (result.completed, result.failed) == (8, 0)
        assert result.total_output_tokens == 80
        assert {b["model"] for b in sglang_server.seen.bodies} == {"test-model"}
        # no per-chunk token counts: one ITL value per gap between chunks
        assert all(len(r.itls()) == len(r.chunk_times) - 1 for r in result.records)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("500", "http_500"),
        ("drop", "disconnected"),
        ("garbage", "malformed"),
        ("error_event", "server_error"),
        ("stall", "stalled"),
    ],
)
def test_failures_are_counted_with_their_reason(
    sglang_server: ProtocolServer, mode: str, reason: str
) -> None:
    sglang_server.behaviour.decide = lambda seq, body: mode if seq % 3 == 0 else "ok"
    options = ClientOptions(progress=False, read_timeout_s=0.3, benchmark_timeout_s=20.0)
    result = run_benchmark(sglang_server.url, workload(num_prompts=9), options)
    assert result.failed == 3
    assert result.completed == 6
    assert result.errors == {reason: 3}
    assert result.total_output_tokens == 60  # failed requests' tokens are not counted
    assert all(example.startswith(reason) for example in result.error_examples)


def test_stream_without_done_but_with_finish_reason_completes(
    sglang_server: ProtocolServer,
) -> None:
    sglang_server.behaviour.decide = lambda seq, body: "no_done"
    result = run_benchmark(sglang_server.url, workload(num_prompts=2), FAST)
    assert (result.completed, result.failed) == (2, 0)


def test_deadline_cancels_running_and_unsent_requests(sglang_server: ProtocolServer) -> None:
    sglang_server.behaviour.chunk_delay_s = 0.2  # 10 tokens in ~4 chunks: ~0.8 s a request
    options = ClientOptions(progress=False, read_timeout_s=5.0, benchmark_timeout_s=1.0)
    client = BenchmarkClient(sglang_server.url, options)
    run = asyncio.run(client.collect(workload(num_prompts=12, concurrency=2)))
    reasons = [r.error for r in run.records]
    assert len(reasons) == 12
    assert "timeout" in reasons
    assert None in reasons  # the first requests finished before the deadline
    never_sent = [r for r in run.records if r.start is None]
    assert never_sent and all(r.error == "timeout" for r in never_sent)
    cut = [r for r in run.records if r.error == "timeout" and r.start is not None]
    assert all(r.e2e is not None for r in cut)


def test_deadline_also_ends_poisson_arrivals(sglang_server: ProtocolServer) -> None:
    sglang_server.behaviour.chunk_delay_s = 0.2
    options = ClientOptions(progress=False, read_timeout_s=5.0, benchmark_timeout_s=1.0)
    client = BenchmarkClient(sglang_server.url, options)
    spec = workload(num_prompts=40, concurrency=2, request_rate=20.0)
    run = asyncio.run(client.collect(spec))
    reasons = [r.error for r in run.records]
    assert len(reasons) == 40
    assert all(reason in (None, "timeout") for reason in reasons)
    # requests in flight at the deadline are cut, not waited for
    assert any(r.error == "timeout" and r.start is not None for r in run.records)
    assert any(r.error == "timeout" and r.start is None for r in run.records)


def test_request_timeout_fails_a_slow_request(sglang_server: ProtocolServer) -> None:
    sglang_server.behaviour.chunk_delay_s = 0.1
    sglang_server.behaviour.decide = lambda seq, body: "ok"
    options = ClientOptions(progress=False, request_timeout_s=0.15, benchmark_timeout_s=20.0)
    client = BenchmarkClient(sglang_server.url, options)
    run = asyncio.run(client.collect(workload(num_prompts=2, output_len=LengthDist(20))))
    assert [r.error for r in run.records] == ["request_timeout", "request_timeout"]


def test_all_requests_failing_raises(sglang_server: ProtocolServer) -> None:
    sglang_server.behaviour.decide = lambda seq, body: "500"
    with pytest.raises(BenchmarkError) as info:
        run_benchmark(sglang_server.url, workload(num_prompts=3), FAST)
    assert "all 3 requests failed" in str(info.value)
    assert sglang_server.url in str(info.value)


def test_all_warmup_failing_raises(sglang_server: ProtocolServer) -> None:
    sglang_server.behaviour.decide = lambda seq, body: "500"
    with pytest.raises(BenchmarkError) as info:
        run_benchmark(sglang_server.url, workload(warmup=2), FAST)
    assert "warm-up" in str(info.value)
    assert len(sglang_server.seen.bodies) == 2  # nothing measured after a failed warm-up


def test_unreachable_server_names_the_url(dead_url: str) -> None:
    with pytest.raises(BenchmarkError) as info:
        run_benchmark(dead_url, workload(), FAST)
    assert dead_url in str(info.value)
    assert "cannot connect" in str(info.value)


def test_bad_url_scheme() -> None:
    with pytest.raises(BenchmarkError):
        BenchmarkClient("localhost:30000")


def test_closed_loop_keeps_concurrency(sglang_server: ProtocolServer) -> None:
    sglang_server.behaviour.chunk_delay_s = 0.02
    run_benchmark(sglang_server.url, workload(num_prompts=12, concurrency=3), FAST)
    assert sglang_server.seen.max_in_flight == 3


def test_poisson_arrivals_stay_under_concurrency(sglang_server: ProtocolServer) -> None:
    sglang_server.behaviour.chunk_delay_s = 0.02
    result = run_benchmark(
        sglang_server.url, workload(num_prompts=10, concurrency=2, request_rate=500.0), FAST
    )
    assert result.completed == 10
    assert sglang_server.seen.max_in_flight <= 2


def test_server_counters_give_this_runs_acceptance(sglang_server: ProtocolServer) -> None:
    # An OpenAI route carries no meta_info; the server exposes cumulative counters.
    sglang_server.behaviour.expose_counters = True
    # Earlier traffic: one-token requests, one token per verify pass.
    run_benchmark(sglang_server.url, workload(api="completions", output_len=LengthDist(1)), FAST)
    result = run_benchmark(sglang_server.url, workload(api="completions", warmup=2), FAST)
    # Each measured request: 10 tokens in chunks of 1, 3, 2, 4 -> 4 verify passes. The warm-up
    # ran before the first snapshot, so only the measured requests count.
    assert result.acceptance_source == "server_info_diff"
    assert result.accept_length == pytest.approx(10 / 4)
    seen = sglang_server.seen
    lifetime = seen.accepted_total / seen.verify_total
    assert lifetime == pytest.approx((8 * 1 + 2 * 10 + 8 * 10) / (8 + 2 * 4 + 8 * 4))
    assert result.accept_length != pytest.approx(lifetime)


def test_lifetime_average_and_metrics_fallbacks(sglang_server: ProtocolServer) -> None:
    result = run_benchmark(sglang_server.url, workload(api="chat"), FAST)
    assert result.acceptance_source == "server_info_lifetime"
    seen = sglang_server.seen
    assert result.accept_length == pytest.approx(seen.accepted_total / seen.verify_total)
    sglang_server.behaviour.lifetime_average = False
    sglang_server.behaviour.metrics = True
    result = run_benchmark(sglang_server.url, workload(api="chat"), FAST)
    assert (result.acceptance_source, result.accept_length, result.accept_rate) == (
        "metrics_gauge",
        3.0,
        0.4,
    )
    sglang_server.behaviour.metrics = False
    result = run_benchmark(sglang_server.url, workload(api="chat"), FAST)
    assert (result.acceptance_source, result.accept_length) == ("none", None)


def test_flush_cache_is_asked_only_when_wanted(sglang_server: ProtocolServer) -> None:
    client = BenchmarkClient(sglang_server.url, FAST)
    asyncio.run(client.run(workload(num_prompts=2)))
    assert sglang_server.seen.flushes == 0
    asyncio.run(client.run(workload(num_prompts=2), flush_cache=True))
    assert sglang_server.seen.flushes == 1


def test_sync_wrapper_works_inside_a_running_loop(sglang_server: ProtocolServer) -> None:
    client = BenchmarkClient(sglang_server.url, FAST)

    async def notebook_cell() -> int:
        return client.run_sync(workload(num_prompts=2)).completed

    assert asyncio.run(notebook_cell()) == 2


def test_api_key_is_sent_as_bearer_token(sglang_server: ProtocolServer) -> None:
    options = ClientOptions.with_api_key("s3cret", progress=False, benchmark_timeout_s=30.0)
    run_benchmark(sglang_server.url, workload(num_prompts=2), options)
    assert sglang_server.seen.authorization == {"Bearer s3cret"}


def test_options_from_a_space_timeouts() -> None:
    options = ClientOptions.from_timeouts(Timeouts(benchmark_s=90.0, request_s=30.0))
    assert (options.benchmark_timeout_s, options.request_timeout_s) == (90.0, 30.0)
