"""The serving loop: real engine steps, paced on the event loop, delivered to requests."""

from __future__ import annotations

import asyncio
import io
import re
import time
from collections.abc import Sequence

import pytest
from prometheus_client.parser import text_string_to_metric_families

from autotune._knobs import ServerConfig
from autotune.sim._admission import next_deadline
from autotune.sim._faults import FaultPlan
from autotune.sim._logging import SGLangLog
from autotune.sim._model import SimModel
from autotune.sim._profile import load_profile
from autotune.sim._runtime import RequestState, ServingRuntime
from autotune.sim._types import SimRequest, TokenEvent

SPEC = ServerConfig(
    speculative_algorithm="EAGLE3",
    speculative_num_steps=3,
    speculative_eagle_topk=1,
    speculative_num_draft_tokens=4,
)


class Harness:
    def __init__(
        self,
        config: ServerConfig = ServerConfig(),  # noqa: B008
        *,
        interval: int = 40,
        dialect: str = "0.5.23",
        faults: FaultPlan = FaultPlan(),  # noqa: B008
        serve_scale: float = 1.0,
    ) -> None:
        model = SimModel(load_profile("h100-llama-3.1-8b"))
        plan = model.plan_startup(config)
        assert plan.ok, plan.crash
        self.stream = io.StringIO()
        self.fatal: list[tuple[tuple[str, ...], int]] = []
        self.runtime = ServingRuntime(
            model.new_engine(config, plan),
            log=SGLangLog(self.stream),
            dialect=dialect,
            decode_log_interval=interval,
            num_draft_tokens=config.speculative_num_draft_tokens or 0,
            faults=faults,
            on_fatal=self.on_fatal,
            serve_scale=serve_scale,
        )

    def on_fatal(self, lines: Sequence[str], code: int) -> None:
        self.fatal.append((tuple(lines), code))

    def lines(self, word: str) -> list[str]:
        return [line for line in self.stream.getvalue().splitlines() if word in line]


async def collect(runtime: ServingRuntime, state: RequestState) -> list[TokenEvent] | None:
    events: list[TokenEvent] = []
    while True:
        got = await runtime.next_events(state)
        if got is None:
            return None
        events += got
        if got[-1].finished:
            return events


async def with_loop(h: Harness, body):  # type: ignore[no-untyped-def]
    task = asyncio.create_task(h.runtime.run())
    try:
        return await asyncio.wait_for(body(), timeout=30)
    finally:
        h.runtime.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_next_deadline_follows_the_schedule_and_never_bursts() -> None:
    assert next_deadline(None, 0.5, 10.0) == 10.5  # idle engine: from now
    assert next_deadline(10.5, 0.25, 10.52) == 10.75  # on time: no drift from sleeping late
    assert next_deadline(10.5, 0.25, 12.0) == 12.0  # behind: deliver now, go on from now


def test_a_request_gets_exactly_its_budget_and_one_decode_line_per_interval() -> None:
    h = Harness(interval=2)

    async def body() -> list[TokenEvent] | None:
        state = h.runtime.submit(12, 9, 0.0, counted=True)
        return await collect(h.runtime, state)

    events = asyncio.run(with_loop(h, body))
    assert events is not None
    assert sum(e.new_tokens for e in events) == 9
    assert events[-1].finished and not any(e.finished for e in events[:-1])
    # 1 token from the prefill pass, 8 decode steps of one token: 4 lines at interval 2
    assert len(h.lines("Prefill batch, #new-seq: 1, #new-token: 12,")) == 1
    decode = h.lines("Decode batch,")
    assert len(decode) == 4
    assert "accept len" not in decode[0]
    assert h.runtime.completed == 1 and h.runtime.active == 0


def test_speculative_requests_count_verify_passes_and_log_acceptance() -> None:
    h = Harness(SPEC, interval=1, dialect="0.5.3")

    async def body() -> RequestState:
        state = h.runtime.submit(40, 64, 0.0, counted=True)
        await collect(h.runtime, state)
        return state

    state = asyncio.run(with_loop(h, body))
    assert state.completion_tokens == 64
    assert 0 < state.verify_ct < 63  # speculation gains more than one token per verify pass
    assert state.accepted_drafts == state.completion_tokens - 1 - state.verify_ct
    assert sum(state.accept_histogram) == state.verify_ct
    decode = h.lines("Decode batch.")
    assert decode and all("accept len: " in line and "accept rate: " in line for line in decode)


def test_cancel_stops_a_request_and_frees_the_engine() -> None:
    h = Harness()

    async def body() -> tuple[bool, int]:
        state = h.runtime.submit(8, 1000, 0.0, counted=True)
        first = await h.runtime.next_events(state)
        assert first
        h.runtime.cancel(state)
        return h.runtime.engine.has_work(), h.runtime.active

    has_work, active = asyncio.run(with_loop(h, body))
    assert not has_work and active == 0
    assert h.runtime.completed == 0


def test_close_aborts_waiting_requests() -> None:
    h = Harness()

    async def body() -> list[TokenEvent] | None:
        state = h.runtime.submit(8, 1000, 0.0, counted=True)
        await h.runtime.next_events(state)
        h.runtime.close()
        return await h.runtime.next_events(state)

    assert asyncio.run(with_loop(h, body)) is None


def test_crash_fault_fires_after_n_counted_completions() -> None:
    h = Harness(faults=FaultPlan(crash_mid_benchmark=2))

    async def body() -> None:
        warm = h.runtime.submit(6, 4, 0.0, counted=False)
        await collect(h.runtime, warm)
        for _ in range(2):
            assert not h.fatal
            await collect(h.runtime, h.runtime.submit(6, 4, 0.0, counted=True))
        for _ in range(100):
            if h.fatal:
                return
            await asyncio.sleep(0.01)

    asyncio.run(with_loop(h, body))
    assert len(h.fatal) == 1
    lines, code = h.fatal[0]
    assert code != 0
    assert any("CUDA error: an illegal memory access was encountered" in line for line in lines)


def test_metrics_text_counts_requests_and_latencies() -> None:
    h = Harness(SPEC)

    async def body() -> None:
        states = [h.runtime.submit(10, 5, 0.0, counted=True) for _ in range(3)]
        for state in states:
            await collect(h.runtime, state)

    asyncio.run(with_loop(h, body))
    text = h.runtime.render_metrics('my "model"')
    labels = {"engine_type": "unified", "model_name": 'my "model"', "pp_rank": "0", "tp_rank": "0"}
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[s.name, tuple(sorted(s.labels.items()))] = s.value

    def value(name: str, **extra: str) -> float:
        return samples[name, tuple(sorted({**labels, **extra}.items()))]

    assert value("sglang:num_requests_total") == 3
    assert value("sglang:generation_tokens_total") == 15
    assert value("sglang:e2e_request_latency_seconds_count") == 3
    assert value("sglang:time_to_first_token_seconds_count") == 3
    assert value("sglang:inter_token_latency_seconds_bucket", le="+Inf") == 12
    assert value("sglang:spec_accept_length") > 1.0
    for gauge in ("num_running_reqs", "num_used_tokens", "token_usage", "gen_throughput",
                  "num_queue_reqs", "cache_hit_rate", "max_total_num_tokens"):  # fmt: skip
        assert value(f"sglang:{gauge}") >= 0
    assert "# TYPE sglang:time_to_first_token_seconds histogram" in text


@pytest.mark.parametrize("dialect", ["0.5.23", "0.5.3"])
def test_prefill_line_shape_per_release(dialect: str) -> None:
    h = Harness(dialect=dialect)

    async def body() -> None:
        await collect(h.runtime, h.runtime.submit(30, 2, 0.0, counted=True))

    asyncio.run(with_loop(h, body))
    sep = "." if dialect == "0.5.3" else ","
    (line,) = h.lines("Prefill batch")
    assert f"Prefill batch{sep} #new-seq: 1, #new-token: 30, #cached-token: 0," in line
    assert line.startswith("[") and "TP0] " in line


def test_serve_scale_stretches_every_step_and_reports_model_time() -> None:
    """At ``--sim-serve-scale 4`` a request takes four times its modelled time on the wall
    clock, while ``/metrics`` and the Decode batch line report the model's figures."""
    h = Harness(interval=10, serve_scale=4.0)
    twin = Harness().runtime.engine  # the same engine, stepped here in model time
    twin.submit(SimRequest("r", 20, 40))
    modelled = 0.0
    while twin.has_work():
        modelled += twin.step().duration_s
    times: list[float] = []

    async def body() -> None:
        state = h.runtime.submit(20, 40, 0.0, counted=True)
        while True:
            got = await h.runtime.next_events(state)
            times.append(time.monotonic())
            assert got is not None
            if got[-1].finished:
                return

    began = time.monotonic()
    asyncio.run(with_loop(h, body))
    wall = times[-1] - began
    assert 4.0 * modelled * 0.97 <= wall <= 4.0 * modelled + 0.5
    samples = {}
    for line in h.runtime.render_metrics("m").splitlines():
        if not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name.split("{")[0]] = float(value)
    itl = samples["sglang:inter_token_latency_seconds_sum"] / 39
    assert itl == pytest.approx(modelled / 40, rel=0.25)  # model time, not four times it
    found = (re.search(r"gen throughput \(token/s\): ([0-9.]+)", x) for x in h.lines("Decode"))
    throughputs = [float(m.group(1)) for m in found if m]
    assert throughputs and all(t > 0.75 * 40 / modelled for t in throughputs)
