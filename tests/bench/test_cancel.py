"""A measurement that is stopped (a signal in the tuner) or that runs out of time (a hung
server): cancelled promptly, and told apart from other failures by its exception type."""

from __future__ import annotations

import threading
import time

import pytest

from autotune._errors import BenchmarkError, BenchmarkTimeout, Cancelled
from autotune.bench import BenchmarkClient, ClientOptions, LengthDist, WorkloadSpec, measure_sync

from ._server import ProtocolServer


def workload(**changes: object) -> WorkloadSpec:
    values: dict[str, object] = {
        "num_prompts": 4,
        "warmup": 0,
        "concurrency": 2,
        "input_len": LengthDist(12),
        "output_len": LengthDist(10),
    }
    values.update(changes)
    return WorkloadSpec(**values)  # type: ignore[arg-type]


def test_a_stop_cancels_the_requests_in_flight(sglang_server: ProtocolServer) -> None:
    sglang_server.behaviour.decide = lambda seq, body: "stall"  # every stream hangs 30 s
    options = ClientOptions(progress=False, read_timeout_s=120.0, benchmark_timeout_s=300.0)
    client = BenchmarkClient(sglang_server.url, options)
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        measure_sync(client, workload(), cancelled=stop.is_set)
    assert time.monotonic() - started < 20  # not the 30 s stall (slack for a loaded machine)


def test_every_request_stalled_is_a_benchmark_timeout(sglang_server: ProtocolServer) -> None:
    sglang_server.behaviour.decide = lambda seq, body: "stall"
    options = ClientOptions(progress=False, read_timeout_s=0.3, benchmark_timeout_s=60.0)
    with pytest.raises(BenchmarkTimeout) as caught:
        measure_sync(BenchmarkClient(sglang_server.url, options), workload())
    assert isinstance(caught.value, BenchmarkError)
    assert "stalled" in caught.value.message
    assert caught.value.message.count(sglang_server.url) == 1


def test_other_failures_are_not_a_timeout(sglang_server: ProtocolServer) -> None:
    sglang_server.behaviour.decide = lambda seq, body: "500"
    options = ClientOptions(progress=False, read_timeout_s=5.0, benchmark_timeout_s=60.0)
    with pytest.raises(BenchmarkError) as caught:
        measure_sync(BenchmarkClient(sglang_server.url, options), workload())
    assert not isinstance(caught.value, BenchmarkTimeout)
