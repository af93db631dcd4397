"""Repeats: robust aggregate, noise flag, scores, early stop; and repeats on a real server."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from pathlib import Path

import pytest

from autotune._errors import ConfigError
from autotune.bench import (
    BenchmarkClient,
    BenchmarkResult,
    ClientOptions,
    LengthDist,
    Measurement,
    RequestRecord,
    WorkloadSpec,
    compute_result,
    measure_sync,
)

from ._server import ProtocolServer

BASE = compute_result(
    [RequestRecord(index=0, start=0.0, ttft=0.1, e2e=1.0, chunk_times=(0.1,), completion_tokens=5)],
    url="http://127.0.0.1:1",
    api="generate",
)


def result(tok_s: float, ttft_p99: float = 100.0) -> BenchmarkResult:
    return dataclasses.replace(BASE, output_tok_s=tok_s, ttft_p99_ms=ttft_p99)


def reference_mad(values: Sequence[float]) -> float:
    centre = statistics.median(values)
    return statistics.median([abs(v - centre) for v in values])


def test_medians_and_mads() -> None:
    values = [100.0, 104.0, 97.0, 250.0, 101.0]
    m = Measurement.from_results([result(v) for v in values])
    assert m.medians["output_tok_s"] == statistics.median(values)
    assert m.mads["output_tok_s"] == reference_mad(values)
    assert m.repeats == 5


def test_steady_measurement_is_not_noisy() -> None:
    m = Measurement.from_results([result(v) for v in (1000.0, 1005.0, 998.0)])
    assert not m.noisy
    assert m.relative_spread("output_tok_s") == pytest.approx(2 / 1000)


def test_spread_above_threshold_is_noisy() -> None:
    m = Measurement.from_results([result(v) for v in (1000.0, 1100.0, 900.0)])
    assert m.noisy and m.noisy_metrics == ("output_tok_s",)
    relaxed = Measurement.from_results(
        [result(v) for v in (1000.0, 1100.0, 900.0)], noise_threshold=0.2
    )
    assert not relaxed.noisy


def test_one_repeat_cannot_be_judged_noisy() -> None:
    assert not Measurement.from_results([result(5.0)]).noisy


def test_scores_are_conservative_in_the_right_direction() -> None:
    m = Measurement.from_results(
        [result(v, ttft) for v, ttft in ((1000.0, 50.0), (1100.0, 70.0), (900.0, 60.0))]
    )
    assert m.score("output_tok_s") == 1000.0
    assert m.score("output_tok_s", kind="conservative", mad_k=2.0) == 1000.0 - 2 * 100.0
    # less is better for latencies: the conservative value is the higher one
    assert m.score("ttft_p99_ms", kind="conservative") == 60.0 + 10.0


def test_score_rejects_unknown_metric_and_kind() -> None:
    m = Measurement.from_results([result(1.0)])
    with pytest.raises(ConfigError) as info:
        m.score("accept_length")  # not measured
    assert info.value.hint is not None and "output_tok_s" in info.value.hint
    with pytest.raises(ConfigError):
        m.score("output_tok_s", kind="optimistic")


def test_to_dict_carries_aggregate_and_repeats() -> None:
    m = Measurement.from_results([result(v) for v in (10.0, 12.0)], requested_repeats=3)
    data = m.to_dict()
    assert data["repeats"] == 2 and data["requested_repeats"] == 3
    assert data["medians"]["output_tok_s"] == 11.0
    assert len(data["results"]) == 2


OPTIONS = ClientOptions(progress=False, read_timeout_s=5.0, benchmark_timeout_s=30.0)


def small(**changes: object) -> WorkloadSpec:
    values: dict[str, object] = {
        "num_prompts": 4,
        "warmup": 1,
        "concurrency": 2,
        "input_len": LengthDist(8),
        "output_len": LengthDist(6),
    }
    values.update(changes)
    return WorkloadSpec(**values)  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_repeats_on_a_server_use_fresh_prompts(sglang_server: ProtocolServer) -> None:
    client = BenchmarkClient(sglang_server.url, OPTIONS)
    m = measure_sync(client, small(repeats=3))
    assert m.repeats == 3 and not m.stopped_early
    assert all(r.completed == 4 for r in m.results)
    assert m.medians["total_output_tokens"] == 24
    measured = [b["input_ids"] for b in sglang_server.seen.bodies if "input_ids" in b]
    assert len(measured) == 3 * (4 + 1)
    assert len({tuple(ids) for ids in measured}) == len(measured)  # no prompt sent twice
    assert sglang_server.seen.flushes == 0  # synthetic prompts need no flush


@pytest.mark.timeout(60)
def test_early_stop_hook_ends_repeats(sglang_server: ProtocolServer) -> None:
    calls: list[int] = []

    def stop_after_two(results: Sequence[BenchmarkResult]) -> bool:
        calls.append(len(results))
        return len(results) >= 2

    client = BenchmarkClient(sglang_server.url, OPTIONS)
    m = measure_sync(client, small(), repeats=5, early_stop=stop_after_two)
    assert calls == [1, 2]
    assert m.repeats == 2 and m.requested_repeats == 5 and m.stopped_early


@pytest.mark.timeout(60)
def test_file_prompts_flush_the_cache_between_repeats(
    sglang_server: ProtocolServer, tmp_path: Path
) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text("".join(f'{{"prompt": "question {i}"}}\n' for i in range(4)))
    client = BenchmarkClient(sglang_server.url, OPTIONS)
    m = measure_sync(client, small(source="jsonl", path=str(path)), repeats=3)
    assert m.repeats == 3
    assert sglang_server.seen.flushes == 2


def test_repeats_must_be_positive(sglang_server: ProtocolServer) -> None:
    with pytest.raises(ConfigError):
        measure_sync(BenchmarkClient(sglang_server.url, OPTIONS), small(), repeats=0)
