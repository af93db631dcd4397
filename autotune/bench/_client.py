"""The benchmark client: streams a workload's requests to a server and records each one.

One ``httpx.AsyncClient`` per run, with explicit timeouts (connect; read: the longest silence
allowed in a stream, also before the first token; pool), as many connections as the concurrency,
and no proxy from the environment. Requests run closed-loop at a fixed concurrency, or arrive as
a Poisson process at ``request_rate`` (still at most ``concurrency`` in flight). Warm-up requests
go first and are left out of every figure. A deadline bounds the run: requests running then are
cancelled and, like those not yet sent, counted as failed (``timeout``). A failure of one request
(stall, dropped connection, HTTP error, garbage) is recorded with its reason and never stops the
others. Routes: requests go to the workload's API (the user's choice); the served model is
asked of ``/v1/models``, OpenAI's route that every engine serves; the cache flush and the
statistics read around the run for acceptance are the engine's :class:`~autotune.engines.ServerApi`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import random
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from autotune._errors import BenchmarkError, BenchmarkTimeout
from autotune._slo import RequestLimits
from autotune._workload import WorkloadSpec
from autotune.bench._metrics import BenchmarkResult, RequestRecord, compute_result
from autotune.bench._prompts import PlannedRequest, RequestFactory
from autotune.bench._sse import RequestState
from autotune.engines import Acceptance, ServerApi, server_api_for

if TYPE_CHECKING:
    import httpx

    from autotune._launch import Timeouts

T = TypeVar("T")

_Bodies = dict[str, str | None]
#: Request errors that say the server ran out of time (silent, too slow, or cut at the deadline).
TIMEOUT_ERRORS = frozenset({"timeout", "stalled", "request_timeout", "pool"})


@dataclass(frozen=True)
class ClientOptions:
    """How the client talks to the server. Seconds throughout.

    ``read_timeout_s`` is the longest a stream may stay silent (it fails that request as
    ``stalled``); ``request_timeout_s`` bounds one streaming request (``request_timeout``; checked
    as chunks arrive, a silent stream is ended by the read timeout); ``benchmark_timeout_s``
    bounds the whole run, warm-up included. ``progress`` ``None`` shows a
    progress bar only when stderr is a terminal and ``AUTOTUNE_NO_PROGRESS`` is unset.
    """

    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0
    pool_timeout_s: float = 60.0
    request_timeout_s: float | None = None
    benchmark_timeout_s: float = 1800.0
    server_stats: bool = True
    progress: bool | None = None
    model: str | None = None
    #: Sent with every request (the API key's ``Authorization``): never shown in ``repr``.
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: The engine's HTTP API (``Engine.server_api()``); None: SGLang's, as the simulator's.
    server_api: ServerApi | None = field(default=None, repr=False)
    #: Per-request limits the run's goodput counts against (None: no goodput).
    limits: RequestLimits | None = None
    #: Wall seconds per second of the box the server stands for (``Engine.serve_time_scale``:
    #: below 1 for a simulator on a faster clock): every time measured is divided by it, and a
    #: request rate multiplied, so the figures are that box's. Timeouts stay wall seconds.
    time_scale: float = 1.0

    @classmethod
    def from_timeouts(cls, timeouts: Timeouts, **changes: Any) -> ClientOptions:
        """Options bounded by a space's timeouts: the whole measurement and one request."""
        return cls(
            benchmark_timeout_s=timeouts.benchmark_s,
            request_timeout_s=timeouts.request_s,
            **changes,
        )

    @classmethod
    def with_api_key(cls, api_key: str | None, **changes: Any) -> ClientOptions:
        """Options that authenticate as SGLang's ``--api-key`` expects (a bearer token)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return cls(headers=headers, **changes)


@dataclass(frozen=True)
class RunRecords:
    """Everything one run collected, before figures are computed."""

    url: str
    api: str
    records: tuple[RequestRecord, ...]
    server_acceptance: Acceptance | None
    #: CPU seconds this process spent while the measured requests ran (``time.process_time``).
    client_cpu_s: float = 0.0
    #: How the requests' statistics read as acceptance (``None``: SGLang's API).
    server_api: ServerApi | None = field(default=None, repr=False)
    #: Per-request limits of the run's goodput (None: no goodput).
    limits: RequestLimits | None = None
    #: Wall seconds per second of the box the records' times are read in (see
    #: :attr:`ClientOptions.time_scale`); the records themselves keep wall seconds.
    time_scale: float = 1.0

    def result(self) -> BenchmarkResult:
        """The figures (see :func:`compute_result`); raises BenchmarkError if all failed
        (:class:`BenchmarkTimeout` when every one of them ran out of time)."""
        try:
            return compute_result(
                self.records
                if self.time_scale == 1.0
                else tuple(r.in_time(self.time_scale) for r in self.records),
                url=self.url,
                api=self.api,
                acceptance=self.server_acceptance,
                server_api=self.server_api,
                limits=self.limits,
            )
        except BenchmarkError as e:
            measured = [r for r in self.records if not r.warmup]
            if measured and all(r.error in TIMEOUT_ERRORS for r in measured):
                timed_out = _timed_out(e.message, None)  # the message names the URL already
                timed_out.url = e.url
                raise timed_out from e
            raise


class BenchmarkClient:
    """Runs workloads against one server at ``url`` (``http://host:port``)."""

    def __init__(self, url: str, options: ClientOptions | None = None) -> None:
        url = url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise BenchmarkError(
                f"the server URL {url!r} is not an http:// or https:// URL",
                hint="pass the server's address, e.g. --url http://127.0.0.1:30000",
            )
        self.url = url
        self.options = options or ClientOptions()
        self.server_api = self.options.server_api or server_api_for()

    def run_sync(self, workload: WorkloadSpec, *, variant: int = 0) -> BenchmarkResult:
        """:meth:`run` for callers that are not async (see :func:`run_sync`)."""
        return run_sync(lambda: self.run(workload, variant=variant))

    async def run(
        self, workload: WorkloadSpec, *, variant: int = 0, flush_cache: bool = False
    ) -> BenchmarkResult:
        """Run ``workload`` once and compute its figures.

        ``variant`` selects other synthetic prompt contents (see :class:`RequestFactory`);
        ``flush_cache`` asks the server to drop its prefix cache after the warm-up
        (``POST`` to the engine's ``flush_cache_path``, SGLang's ``/flush_cache``; a server
        without it is left as it is).

        Raises:
            BenchmarkError: the server cannot be reached, every warm-up or measured request
                failed, or the URL is not usable.
            ConfigError: the workload's prompt file is unusable.
        """
        records = await self.collect(workload, variant=variant, flush_cache=flush_cache)
        return records.result()

    async def collect(
        self, workload: WorkloadSpec, *, variant: int = 0, flush_cache: bool = False
    ) -> RunRecords:
        """Run ``workload`` once and return its raw records (no figures; failed requests are
        recorded, not raised)."""
        import httpx

        opts = self.options
        timeout = httpx.Timeout(
            connect=opts.connect_timeout_s,
            read=opts.read_timeout_s,
            write=opts.connect_timeout_s,
            pool=opts.pool_timeout_s,
        )
        slots = workload.concurrency + 4
        limits = httpx.Limits(max_connections=slots, max_keepalive_connections=slots)
        async with httpx.AsyncClient(
            base_url=self.url,
            timeout=timeout,
            limits=limits,
            headers=dict(opts.headers),
            trust_env=False,
        ) as client:
            served = await self._served_model(client)
            model = opts.model or served or "default"
            factory = RequestFactory(workload, model=model, variant=variant)
            deadline = time.monotonic() + opts.benchmark_timeout_s
            warm = await self._phase(client, factory.warmup(), workload, deadline, "warm-up")
            if warm and not any(s.error is None for s in warm):
                first = warm[0].record()
                if all(s.record().error in TIMEOUT_ERRORS for s in warm):
                    raise _timed_out(
                        f"all {len(warm)} warm-up requests ran out of time; first: "
                        f"{first.error}: {first.error_detail}",
                        self.url,
                    )
                raise BenchmarkError(
                    f"all {len(warm)} warm-up requests failed; first: "
                    f"{first.error}: {first.error_detail}",
                    url=self.url,
                    hint="check the workload's api and the server log",
                )
            server_api = self.server_api
            if flush_cache and server_api.flush_cache_path:
                await self._fetch(client, "POST", server_api.flush_cache_path)
            stats = opts.server_stats
            before = await self._stats(client, server_api.stats_before) if stats else {}
            planned = factory.measured()
            cpu0 = time.process_time()
            measured = await self._phase(client, planned, workload, deadline, "")
            cpu = time.process_time() - cpu0
            acceptance: Acceptance | None = None
            # a server that answered nothing is not asked for its statistics (it may hang)
            if stats and any(s.error is None for s in measured):
                after = await self._stats(client, server_api.stats_after)
                acceptance = server_api.from_server(before, after)
        records = tuple(s.record() for s in warm) + tuple(s.record() for s in measured)
        return RunRecords(
            self.url,
            workload.api,
            records,
            acceptance,
            cpu,
            server_api,
            self.options.limits,
            self.options.time_scale,
        )

    # -- phases -----------------------------------------------------------------------------

    async def _phase(
        self,
        client: httpx.AsyncClient,
        planned: list[PlannedRequest],
        workload: WorkloadSpec,
        deadline: float,
        label: str,
    ) -> list[RequestState]:
        timeout = self.options.request_timeout_s
        states = [RequestState(p, timeout, server_api=self.server_api) for p in planned]
        if not states:
            return states
        concurrency = min(workload.concurrency, len(states))
        rate = None if label else workload.request_rate
        if rate is not None:
            rate /= self.options.time_scale  # arrivals on the box's clock
        origin = time.perf_counter()
        with _Progress(self.options.progress, label or "benchmark", len(states)) as progress:

            async def send(state: RequestState) -> None:
                await state.send(client, origin)
                progress.advance()

            if rate is None:
                runner = _closed_loop(states, concurrency, send)
            else:
                runner = _poisson(states, concurrency, rate, workload.seed, send)
            remaining = max(0.0, deadline - time.monotonic())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(runner, timeout=remaining)
        for state in states:
            state.expire(origin)
        return states

    async def _served_model(self, client: httpx.AsyncClient) -> str | None:
        """Ask ``/v1/models`` (cheap, no generation): proves the server is reachable and names
        its model. Raises BenchmarkError when nothing answers at the URL."""
        import httpx

        try:
            response = await client.get("/v1/models", timeout=self.options.connect_timeout_s)
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            raise BenchmarkError(
                f"cannot connect to the server: {e or type(e).__name__}",
                url=self.url,
                hint="start the server, or check --url (scheme, host and port)",
            ) from e
        except httpx.HTTPError:
            return None  # it is there but slow or odd: the requests will tell
        data = _json_object(response.text).get("data") if response.status_code == 200 else None
        if isinstance(data, list) and data and isinstance(data[0], dict):
            model = data[0].get("id")
            return model if isinstance(model, str) else None
        return None

    async def _stats(self, client: httpx.AsyncClient, paths: Sequence[str]) -> _Bodies:
        """The bodies of the engine's statistics routes ``paths`` (None: no answer)."""
        return {path: await self._fetch(client, "GET", path) for path in paths}

    async def _fetch(self, client: httpx.AsyncClient, method: str, path: str) -> str | None:
        """A server statistic or control call; None when it fails or is not there."""
        import httpx

        try:
            response = await client.request(
                method, path, timeout=self.options.connect_timeout_s + 20.0
            )
        except httpx.HTTPError:
            return None
        return response.text if response.status_code == 200 else None


def _timed_out(message: str, url: str | None) -> BenchmarkTimeout:
    return BenchmarkTimeout(
        message,
        url=url,
        hint="the server stopped answering (hung, or far too slow); check the server log, "
        "or raise engine.timeouts.request_s / benchmark_s if it is merely slow",
    )


def run_sync(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine ``make()`` to its end from synchronous code.

    Where this thread already runs an event loop (a notebook), it runs on a fresh loop in a
    worker thread, so the caller's loop is left alone.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def run_benchmark(
    url: str, workload: WorkloadSpec, options: ClientOptions | None = None
) -> BenchmarkResult:
    """Run ``workload`` once against ``url`` and return its figures (synchronous)."""
    return BenchmarkClient(url, options).run_sync(workload)


async def _closed_loop(
    states: list[RequestState], concurrency: int, send: Callable[[RequestState], Any]
) -> None:
    pending = iter(states)

    async def worker() -> None:
        for state in pending:
            await send(state)

    tasks = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*tasks)
    finally:
        await _cancel_all(tasks)


async def _poisson(
    states: list[RequestState],
    concurrency: int,
    rate: float,
    seed: int,
    send: Callable[[RequestState], Any],
) -> None:
    rng = random.Random(f"{seed}:arrivals")
    slots = asyncio.Semaphore(concurrency)
    tasks: list[asyncio.Future[None]] = []

    async def one(state: RequestState) -> None:
        async with slots:
            await send(state)

    try:
        for i, state in enumerate(states):
            tasks.append(asyncio.ensure_future(one(state)))
            if i + 1 < len(states):
                await asyncio.sleep(rng.expovariate(rate))
        await asyncio.gather(*tasks)
    finally:
        await _cancel_all(tasks)


async def _cancel_all(tasks: Sequence[asyncio.Future[None]]) -> None:
    """Cancel what still runs (the deadline came, or a task failed) and wait for it to end."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class _Progress:
    """A rich progress bar on stderr, or nothing (see :class:`ClientOptions`)."""

    def __init__(self, enabled: bool | None, label: str, total: int) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty() and not os.environ.get("AUTOTUNE_NO_PROGRESS")
        self._bar: Any = None
        self._task: Any = None
        if enabled:
            from rich.console import Console
            from rich.progress import Progress

            self._bar = Progress(console=Console(stderr=True), transient=True)
            self._task = self._bar.add_task(label, total=total)

    def __enter__(self) -> _Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)
