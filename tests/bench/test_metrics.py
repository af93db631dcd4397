"""Benchmark figures from hand-built request records."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from autotune._errors import BenchmarkError
from autotune.bench import (
    Acceptance,
    RequestRecord,
    acceptance_from_records,
    compute_result,
    percentile,
)

URL = "http://127.0.0.1:1"


def records() -> list[RequestRecord]:
    return [
        # warm-up: ignored by every figure
        RequestRecord(index=0, warmup=True, start=0.0, ttft=5.0, e2e=9.0, chunk_times=(5.0,),
                      chunk_tokens=(1,), prompt_tokens=99, completion_tokens=1),
        # speculative chunks: 1 token, then 3, then 1
        RequestRecord(index=0, start=0.0, ttft=0.1, e2e=1.0, chunk_times=(0.1, 0.4, 1.0),
                      chunk_tokens=(1, 4, 5), prompt_tokens=10, completion_tokens=5),
        # no per-chunk counts (an OpenAI route): one ITL value per gap
        RequestRecord(index=1, start=0.5, ttft=0.2, e2e=0.8, chunk_times=(0.2, 0.5, 0.8),
                      chunk_tokens=(None, None, None), prompt_tokens=20, completion_tokens=3),
        RequestRecord(index=2, start=0.2, e2e=2.0, chunk_times=(0.3,), chunk_tokens=(1,),
                      completion_tokens=1, error="stalled", error_detail="no data for 1 s"),
    ]  # fmt: skip


def test_percentile_matches_numpy_linear() -> None:
    rng = random.Random(3)
    for n in (1, 2, 3, 10, 57):
        values = [rng.uniform(0, 100) for _ in range(n)]
        for q in (0, 25, 50, 90, 99, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_throughputs_and_duration() -> None:
    result = compute_result(records(), url=URL, api="generate")
    # first send 0.0, last end 0.2 + 2.0 (the failed request)
    assert result.duration_s == pytest.approx(2.2)
    assert (result.completed, result.failed) == (2, 1)
    assert result.total_output_tokens == 8
    assert result.total_input_tokens == 30
    assert result.output_tok_s == pytest.approx(8 / 2.2)
    assert result.total_tok_s == pytest.approx(38 / 2.2)
    assert result.request_throughput == pytest.approx(2 / 2.2)
    assert result.concurrency == pytest.approx(1.8 / 2.2)
    assert result.errors == {"stalled": 1}
    assert result.error_examples == ("stalled: no data for 1 s",)
    assert result.warmup_failed == 0


def test_latency_statistics() -> None:
    result = compute_result(records(), url=URL, api="generate")
    # TTFT 0.1 and 0.2 s
    assert result.ttft_mean_ms == pytest.approx(150)
    assert result.ttft_median_ms == pytest.approx(150)
    assert result.ttft_p90_ms == pytest.approx(190)
    assert result.ttft_p99_ms == pytest.approx(199)
    # TPOT (1.0 - 0.1) / 4 and (0.8 - 0.2) / 2
    assert result.tpot_mean_ms == pytest.approx((225 + 300) / 2)
    # ITL: 0.3 s over 3 tokens, 0.6 s over 1, then two plain gaps of 0.3 s
    itls = [0.1, 0.1, 0.1, 0.6, 0.3, 0.3]
    assert result.itl_mean_ms == pytest.approx(1000 * sum(itls) / 6)
    assert result.itl_median_ms == pytest.approx(200)
    assert result.itl_p99_ms == pytest.approx(1000 * float(np.percentile(itls, 99)))
    assert result.e2e_mean_ms == pytest.approx(900)
    assert result.e2e_p90_ms == pytest.approx(980)


def test_single_token_requests_have_no_tpot_or_itl() -> None:
    one = RequestRecord(index=0, start=0.0, ttft=0.05, e2e=0.05, chunk_times=(0.05,),
                        chunk_tokens=(1,), prompt_tokens=4, completion_tokens=1)  # fmt: skip
    result = compute_result([one], url=URL, api="generate")
    assert result.tpot_mean_ms is None and result.itl_p99_ms is None
    assert result.ttft_mean_ms == pytest.approx(50)


def test_all_failed_raises_with_first_errors_and_url() -> None:
    failed = [
        RequestRecord(index=i, start=0.0, e2e=0.1, error="http_500", error_detail="boom")
        for i in range(3)
    ]
    with pytest.raises(BenchmarkError) as info:
        compute_result(failed, url=URL, api="generate")
    message = str(info.value)
    assert "all 3 requests failed" in message
    assert "http_500: boom" in message
    assert URL in message


def test_all_connect_failures_hint_at_the_server() -> None:
    failed = [RequestRecord(index=0, start=0.0, e2e=0.0, error="connect", error_detail="refused")]
    with pytest.raises(BenchmarkError) as info:
        compute_result(failed, url=URL, api="generate")
    assert info.value.hint is not None and "running" in info.value.hint


def test_acceptance_from_meta_info() -> None:
    recs = [
        RequestRecord(index=0, completion_tokens=10, spec_verify_ct=4,
                      spec_num_correct_drafts=6, spec_num_proposed_drafts=12),
        RequestRecord(index=1, completion_tokens=20, spec_verify_ct=6,
                      spec_num_correct_drafts=14, spec_num_proposed_drafts=18),
        RequestRecord(index=2, completion_tokens=50, spec_verify_ct=5, error="stalled"),
    ]  # fmt: skip
    acc = acceptance_from_records(recs)
    assert acc is not None
    assert acc.source == "request_meta_info"
    assert acc.accept_length == pytest.approx(30 / 10)  # failed request left out
    assert acc.accept_rate == pytest.approx(20 / 30)


def test_accept_rate_weighted_by_verify_passes_without_draft_counts() -> None:
    recs = [
        RequestRecord(index=0, completion_tokens=8, spec_verify_ct=2, spec_accept_rate=0.5),
        RequestRecord(index=1, completion_tokens=8, spec_verify_ct=6, spec_accept_rate=0.1),
    ]
    acc = acceptance_from_records(recs)
    assert acc is not None
    assert acc.accept_rate == pytest.approx((0.5 * 2 + 0.1 * 6) / 8)


def test_no_speculation_means_no_request_acceptance() -> None:
    assert acceptance_from_records([RequestRecord(index=0, completion_tokens=5)]) is None


def test_result_prefers_request_acceptance_over_server() -> None:
    recs = [RequestRecord(index=0, start=0.0, ttft=0.1, e2e=0.2, chunk_times=(0.1,),
                          completion_tokens=6, spec_verify_ct=3)]  # fmt: skip
    server = Acceptance(9.0, None, "server_info_lifetime")
    result = compute_result(recs, url=URL, api="generate", acceptance=server)
    assert (result.accept_length, result.acceptance_source) == (2.0, "request_meta_info")
    plain = [RequestRecord(index=0, start=0.0, ttft=0.1, e2e=0.2, chunk_times=(0.1,))]
    result = compute_result(plain, url=URL, api="chat", acceptance=server)
    assert (result.accept_length, result.acceptance_source) == (9.0, "server_info_lifetime")


def test_to_dict_is_json_with_the_metric_names() -> None:
    result = compute_result(records(), url=URL, api="generate")
    data = json.loads(json.dumps(result.to_dict(requests=True)))
    for name in ("output_tok_s", "total_tok_s", "request_throughput", "ttft_p99_ms",
                 "tpot_median_ms", "itl_p90_ms", "e2e_mean_ms", "accept_length", "accept_rate",
                 "acceptance_source", "completed", "failed", "duration_s"):  # fmt: skip
        assert name in data
    assert len(data["requests"]) == 4
    assert "requests" not in result.to_dict()
    assert result.metrics()["completed"] == 2.0
    assert "accept_length" not in result.metrics()  # not measured
