"""The admission window: how the serving loop batches arrivals and keeps its schedule.

These run a real :class:`ServingRuntime` on an event loop (no HTTP) with the H100 profile and
submit requests the way a closed-loop client does, late by a few milliseconds each. Spacings
are 15 ms: beyond the burst gap (10 ms) and longer than a prefill step of these prompts, so
without the windows each request would get a prefill step of its own and decode out of step;
well inside the windows' gaps (250 ms), so the outcome does not depend on how loaded the machine
is.
"""

from __future__ import annotations

import asyncio
import io
import re

from autotune._knobs import ServerConfig
from autotune.sim._admission import Admission, next_deadline
from autotune.sim._faults import FaultPlan
from autotune.sim._logging import SGLangLog
from autotune.sim._model import SimModel
from autotune.sim._profile import load_profile
from autotune.sim._runtime import RequestState, ServingRuntime

SPACING_S = 0.015


class Harness:
    """A runtime over the H100 baseline that logs every decode step."""

    def __init__(self) -> None:
        model = SimModel(load_profile("h100-llama-3.1-8b"))
        config = ServerConfig()
        self.stream = io.StringIO()
        self.runtime = ServingRuntime(
            model.new_engine(config, model.plan_startup(config)),
            log=SGLangLog(self.stream),
            dialect="0.5.23",
            decode_log_interval=1,
            num_draft_tokens=0,
            faults=FaultPlan(),
            on_fatal=lambda lines, code: None,
        )

    def prefill_batches(self) -> list[int]:
        """``#new-seq`` of every prefill step, in order."""
        return [int(n) for n in re.findall(r"Prefill batch, #new-seq: (\d+)", self.log())]

    def decode_batches(self) -> list[int]:
        """``#running-req`` of every decode step, in order."""
        return [int(n) for n in re.findall(r"Decode batch, #running-req: (\d+)", self.log())]

    def log(self) -> str:
        return self.stream.getvalue()

    async def finish(self, state: RequestState) -> None:
        while (events := await self.runtime.next_events(state)) is not None:
            if any(e.finished for e in events):
                return

    async def run(self, body) -> None:  # type: ignore[no-untyped-def]
        task = asyncio.create_task(self.runtime.run())
        try:
            await asyncio.wait_for(body(), timeout=60)
        finally:
            self.runtime.close()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def test_next_deadline_keeps_the_schedule_while_catching_up() -> None:
    assert next_deadline(None, 0.5, 3.0, max_lag_s=1.0) == 3.5  # idle engine: from now
    assert next_deadline(10.0, 0.25, 10.5, max_lag_s=1.0) == 10.25  # late: at once, on schedule
    assert next_deadline(10.0, 0.25, 12.0, max_lag_s=1.0) == 12.0  # too far behind: from now


def test_replacements_that_trickle_in_join_one_prefill_batch() -> None:
    h = Harness()

    async def body() -> None:
        first = [h.runtime.submit(100, 6, 0.0, counted=True) for _ in range(8)]
        await asyncio.gather(*(h.finish(s) for s in first))
        replacements = []
        for _ in range(8):  # a client replacing eight requests, one every 15 ms
            await asyncio.sleep(SPACING_S)
            replacements.append(h.runtime.submit(100, 6, 0.0, counted=True))
        await asyncio.gather(*(h.finish(s) for s in replacements))

    asyncio.run(h.run(body))
    assert h.prefill_batches() == [8, 8]
    assert set(h.decode_batches()) == {8}  # both batches decode in step
    assert h.runtime.completed == 16


def test_a_burst_at_an_idle_engine_decodes_in_step() -> None:
    h = Harness()

    async def body() -> None:
        states = [h.runtime.submit(100, 6, 0.0, counted=True) for _ in range(2)]
        for _ in range(4):  # the rest of the burst, slower than the burst gap
            await asyncio.sleep(SPACING_S)
            states.append(h.runtime.submit(100, 6, 0.0, counted=True))
        await asyncio.gather(*(h.finish(s) for s in states))

    asyncio.run(h.run(body))
    assert h.prefill_batches()[0] == 2
    assert sum(h.prefill_batches()) == 6
    assert set(h.decode_batches()) == {6}  # decoding waited for the whole burst


def test_windows_stop_waiting_when_the_client_stops_replacing() -> None:
    async def body() -> None:
        admission = Admission(gap_s=0.05)
        loop = asyncio.get_running_loop()
        await admission.replacements(loop.time(), 4, idle=False)  # nothing comes: 50 ms
        admission.gap_s = 600.0
        # no replacement came last time: this window does not wait at all
        await asyncio.wait_for(admission.replacements(loop.time(), 4, idle=False), timeout=30)
        admission.arrived(loop.time())
        # a request arrived: the next window waits again (here: for its gap of 600 s)
        waiting = asyncio.ensure_future(admission.replacements(loop.time(), 4, idle=False))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        admission.close()
        await asyncio.wait_for(waiting, timeout=30)

    asyncio.run(body())
