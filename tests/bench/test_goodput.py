"""Goodput (DistServe): completed requests per second within every per-request limit, from the
request records of a run against the simulated SGLang server, counted here by hand."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from autotune._slo import RequestLimits
from autotune.bench import LengthDist, WorkloadSpec, compute_result

from .test_agreement import EAGLE3, sim_server

pytestmark = pytest.mark.timeout(120)

WORKLOAD = WorkloadSpec(
    num_prompts=12,
    warmup=0,
    concurrency=4,
    input_len=LengthDist(64, "uniform", 0.9),
    output_len=LengthDist(24, "uniform", 0.8, minimum=2),
    seed=5,
)


def test_goodput_counts_the_requests_within_every_limit(tmp_path: Path) -> None:
    with sim_server(EAGLE3, WORKLOAD, tmp_path, noise=0.05, seed=1) as client:
        result = client.run_sync(WORKLOAD)
    done = [r for r in result.records if r.ok and not r.warmup]
    assert len(done) == WORKLOAD.num_prompts
    # by hand: each request's TTFT and TPOT from its own timings, the run's duration from the
    # first send to the last end
    ttft = {r.index: r.ttft for r in done}
    tpot = {
        r.index: (r.e2e - r.ttft) / (r.completion_tokens - 1)  # type: ignore[operator]
        for r in done
    }
    duration = max(r.start + r.e2e for r in done) - min(r.start for r in done)  # type: ignore[operator]
    limits = RequestLimits(
        ttft_ms=1000 * statistics.median(ttft.values()),
        tpot_ms=1000 * statistics.median(tpot.values()),
    )
    good = [
        i for i in ttft if ttft[i] <= limits.ttft_ms / 1000 and tpot[i] <= limits.tpot_ms / 1000
    ]  # type: ignore[operator]
    assert 0 < len(good) < len(done), "the limits should pass some requests and fail others"

    measured = compute_result(result.records, url=result.url, api=result.api, limits=limits)

    assert measured.goodput == pytest.approx(len(good) / duration, rel=1e-9)
    assert measured.goodput < measured.request_throughput
    assert measured.metrics()["goodput"] == measured.goodput
    # no limits: no goodput; limits nobody misses: every completed request counts
    assert result.goodput is None and "goodput" not in result.metrics()
    loose = compute_result(
        result.records, url=result.url, api=result.api, limits=RequestLimits(e2e_ms=1e9)
    )
    assert loose.goodput == pytest.approx(loose.request_throughput)


def test_a_tpot_limit_does_not_judge_a_one_token_request() -> None:
    limits = RequestLimits(ttft_ms=100, tpot_ms=10)
    assert limits.met(0.05, None, 0.05)
    assert not limits.met(0.15, None, 0.15)
    assert not limits.met(0.05, 0.011, 0.5)
    assert not RequestLimits(ttft_ms=100).met(None, 0.001, 0.1)
    assert limits.goodput([(0.05, 0.001, 0.1), (0.2, 0.001, 0.3)], 2.0) == 0.5
