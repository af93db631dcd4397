"""How fast this benchmark client can stream: its token rate and CPU cost at high concurrency.

The client must never be what limits a measurement. This benchmark starts the simulated SGLang
server (launched by its engine adapter, as a study launches it) with a time scale small enough
that the server streams faster than a real one, drives it closed-loop at a high concurrency for
a fixed time through :class:`BenchmarkClient`, and reports the token rate the client sustained
and the CPU time this process spent while the requests ran (``time.process_time``; the server is
another process) per 1000 streamed tokens. When the client's CPU share comes close to one core,
the figures say so: the rate is then the client's ceiling, not the server's. It can also be
pointed at a running server (``url``) instead.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._errors import ServerError
from autotune._workload import LengthDist, WorkloadSpec
from autotune.bench._client import BenchmarkClient, ClientOptions, run_sync

if TYPE_CHECKING:
    from autotune.engines import ServerApi

#: The simulated server the benchmark starts (model and profile of the calibration set).
SIM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SIM_PROFILE = "h100-llama-3.1-8b"
SIM_TIME_SCALE = 0.001


@dataclass(frozen=True)
class CapacityResult:
    """What the client sustained. Tokens count every streamed output token, also those of
    requests the time limit cut short."""

    url: str
    concurrency: int
    seconds: float
    duration_s: float
    requests_completed: int
    requests_cut: int
    requests_failed: int
    requests_unsent: int
    streamed_tokens: int
    streamed_chunks: int
    token_rate: float
    chunk_rate: float
    cpu_s: float
    cpu_ms_per_1k_tokens: float
    cpu_share: float
    server_command: str | None = None

    @property
    def client_bound(self) -> bool:
        """Whether the client used most of a core (its rate is then its own ceiling)."""
        return self.cpu_share >= 0.9

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["client_bound"] = self.client_bound
        return out


class _ExitOnly:
    """A start-up judge that knows no crash lines: only an exit before ready is a failure."""

    @dataclass(frozen=True)
    class _Verdict:
        category: str
        evidence: str | None
        is_crash: bool

    def feed(self, line: str) -> _Verdict | None:
        return None

    def finish(self, exit_code: int | None = None) -> _Verdict:
        return self._Verdict("other_crash", None, True)


def capacity_workload(
    concurrency: int, output_len: int = 512, input_len: int = 128
) -> WorkloadSpec:
    """Closed-loop ``/generate`` streams, enough of them to keep every slot busy to the end."""
    return WorkloadSpec(
        name="client-capacity",
        api="generate",
        num_prompts=concurrency * 64,
        warmup=0,
        concurrency=concurrency,
        input_len=LengthDist(input_len),
        output_len=LengthDist(output_len),
        ignore_eos=True,
    )


def run_client_capacity(
    concurrency: int = 256,
    seconds: float = 20.0,
    *,
    url: str | None = None,
    output_len: int = 512,
    startup_timeout_s: float = 120.0,
    python: str | None = None,
    log_dir: Path | None = None,
) -> CapacityResult:
    """Measure the client (see the module docstring); starts the simulated server unless ``url``.

    Raises:
        ServerError: the simulated server did not start (the message names its log).
        BenchmarkError: the server at ``url`` cannot be reached.
    """
    if url is not None:
        return _drive(url, concurrency, seconds, output_len, None)
    from autotune._knobs import ServerConfig
    from autotune.engines import EngineSpec, SimOptions, create_engine
    from autotune.server import ServerProcess, find_free_port, wait_for_startup

    host = "127.0.0.1"
    port = find_free_port(host)
    engine = create_engine(
        EngineSpec(
            kind="sim",
            model_path=SIM_MODEL,
            host=host,
            port=port,
            python=python,
            sim=SimOptions(profile=SIM_PROFILE, time_scale=SIM_TIME_SCALE, noise=0.0),
        )
    )
    launch = engine.build_launch(ServerConfig(max_running_requests=concurrency), port=port)
    argv = list(launch.argv)
    with tempfile.TemporaryDirectory(prefix="autotune-capacity-") as tmp:
        log_path = (log_dir or Path(tmp)) / "sim-server.log"
        with ServerProcess.launch(launch, log_path=log_path, term_timeout_s=10.0) as proc:
            startup = wait_for_startup(
                proc,
                classifier=_ExitOnly(),
                readiness=engine.readiness(),
                url=launch.url,
                timeout_s=startup_timeout_s,
            )
            if not startup.ready:
                raise ServerError(
                    f"the simulated server did not start: {startup.detail}"
                    + (f" (last line: {startup.failure_line})" if startup.failure_line else ""),
                    command=argv,
                    exit_code=startup.exit_code,
                    log_path=log_path if log_dir is not None else None,
                    hint="run the command by hand to see its output: " + launch.display(),
                )
            return _drive(
                launch.url,
                concurrency,
                seconds,
                output_len,
                launch.display(),
                engine.server_api(),
            )


def _drive(
    url: str,
    concurrency: int,
    seconds: float,
    output_len: int,
    command: str | None,
    server_api: ServerApi | None = None,
) -> CapacityResult:
    options = ClientOptions(
        benchmark_timeout_s=seconds,
        server_stats=False,
        read_timeout_s=60.0,
        server_api=server_api,
    )
    client = BenchmarkClient(url, options)
    workload = capacity_workload(concurrency, output_len)
    run = run_sync(lambda: client.collect(workload))
    cpu = run.client_cpu_s
    measured = [r for r in run.records if not r.warmup]
    starts = [r.start for r in measured if r.start is not None]
    ends = [e for e in (r.end for r in measured) if e is not None]
    duration = max(ends) - min(starts) if starts and ends else 0.0
    tokens = sum(r.completion_tokens for r in measured)
    chunks = sum(len(r.chunk_times) for r in measured)
    cut = sum(1 for r in measured if r.error == "timeout" and r.start is not None)
    failed = sum(1 for r in measured if r.error not in (None, "timeout"))
    span = duration if duration > 0 else float("nan")
    return CapacityResult(
        url=url,
        concurrency=concurrency,
        seconds=seconds,
        duration_s=duration,
        requests_completed=sum(1 for r in measured if r.ok),
        requests_cut=cut,
        requests_failed=failed,
        requests_unsent=sum(1 for r in measured if r.start is None),
        streamed_tokens=tokens,
        streamed_chunks=chunks,
        token_rate=tokens / span,
        chunk_rate=chunks / span,
        cpu_s=cpu,
        cpu_ms_per_1k_tokens=1e6 * cpu / tokens if tokens else float("nan"),
        cpu_share=cpu / span,
        server_command=command,
    )
