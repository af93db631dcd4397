"""Benchmarking an SGLang-compatible server: workloads, the streaming client, metrics, repeats.

Typical use::

    from autotune.bench import BenchmarkClient, ClientOptions, WorkloadSpec, measure_sync

    client = BenchmarkClient("http://127.0.0.1:30000", ClientOptions(benchmark_timeout_s=600))
    measurement = measure_sync(client, WorkloadSpec(concurrency=16, num_prompts=128), repeats=3)
    measurement.score("output_tok_s", kind="conservative")

Figures follow SGLang's bench_serving definitions (see :mod:`autotune.bench._metrics`). What
differs between engines' HTTP APIs (the cache-flush and statistics routes, how answers report
speculative acceptance) is the engine's :class:`~autotune.engines.ServerApi`
(``ClientOptions.server_api``; SGLang's when none is given).
"""

from __future__ import annotations

from autotune._stats import percentile
from autotune._workload import APIS, SOURCES, LengthDist, WorkloadSpec
from autotune.bench._capacity import CapacityResult, run_client_capacity
from autotune.bench._client import (
    BenchmarkClient,
    ClientOptions,
    RunRecords,
    run_benchmark,
    run_sync,
)
from autotune.bench._metrics import (
    BenchmarkResult,
    RequestRecord,
    acceptance_from_records,
    compute_result,
)
from autotune.bench._prompts import API_PATHS, PlannedRequest, RequestFactory
from autotune.bench._repeats import (
    NOISE_THRESHOLD,
    EarlyStop,
    Measurement,
    lower_is_better,
    measure,
    measure_sync,
)
from autotune.bench._sse import (
    RequestState,
    SSEDecoder,
    StreamAccumulator,
    StreamFormatError,
    decode_json,
)
from autotune.engines import ACCEPTANCE_SOURCES, Acceptance

__all__ = [
    "ACCEPTANCE_SOURCES",
    "APIS",
    "API_PATHS",
    "NOISE_THRESHOLD",
    "SOURCES",
    "Acceptance",
    "BenchmarkClient",
    "BenchmarkResult",
    "CapacityResult",
    "ClientOptions",
    "EarlyStop",
    "LengthDist",
    "Measurement",
    "PlannedRequest",
    "RequestFactory",
    "RequestRecord",
    "RequestState",
    "RunRecords",
    "SSEDecoder",
    "StreamAccumulator",
    "StreamFormatError",
    "WorkloadSpec",
    "acceptance_from_records",
    "compute_result",
    "decode_json",
    "lower_is_better",
    "measure",
    "measure_sync",
    "percentile",
    "run_benchmark",
    "run_client_capacity",
    "run_sync",
]
