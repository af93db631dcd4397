"""The serving loop: drives the model's engine in real time and hands tokens to the requests.

One asyncio task owns the engine. While the engine has work it takes a step, then sleeps until
that step's deadline, then delivers the step's tokens to the waiting requests. Deadlines follow a
schedule (each is the previous deadline plus the step's modelled duration), so sleeping
imprecisely does not add up to drift. Which requests a step admits, when it begins, and how a
loop that fell behind catches up is decided by :mod:`autotune.sim._admission`: a step begins at
the end of the previous one (or at the arrival that ended an idle spell); requests that arrive
shortly after that boundary, such as a closed-loop client's replacements for the requests that
just finished, still join it; late steps are delivered at once until the loop is back on
schedule. A step the model times at 31 ms takes 31 ms, unless the server runs with
``--sim-serve-scale K``: then every step takes ``K`` times its modelled duration (124 ms at
``K = 4``), so that what a client measures, divided by ``K`` (throughputs multiplied by ``K``),
is the model's, and the host's own timing (scheduling jitter of a few milliseconds on a busy
machine, a client's time to read a chunk) weighs ``K`` times less next to it. The admission
windows stay as they are: they wait for the client, whose timing does not scale. The server's
own reports are in the model's time: the ``Decode batch`` line's throughput and the latency
histograms of ``/metrics`` (wall-clock seconds divided by ``K``).

Tokens reach a request's response every step, or as SGLang's ``--stream-interval`` (and a
``/generate`` request's ``sampling_params.stream_interval``) says. The loop also prints SGLang's
``Prefill batch`` line for every prefill step and the ``Decode batch`` line every
``--decode-log-interval`` decode steps, keeps the latency histograms behind ``/metrics``, and
ends the process when a ``crash_mid_benchmark`` fault comes due.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autotune.sim._admission import Admission
from autotune.sim._engine import ServingEngine
from autotune.sim._exposition import ServerMetrics
from autotune.sim._faults import FaultPlan, cuda_crash_lines
from autotune.sim._logging import SITE_PACKAGES, SGLangLog, WindowStats, decode_line, prefill_line
from autotune.sim._types import SimRequest, StepResult, TokenEvent


@dataclass
class RequestState:
    """One request in flight: its queue of token events and what it has received so far."""

    rid: str
    prompt_tokens: int
    max_new_tokens: int
    counted: bool
    queue: asyncio.Queue[TokenEvent | None] = field(default_factory=asyncio.Queue)
    created: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    last_token_at: float | None = None
    completion_tokens: int = 0
    verify_ct: int = 0
    accepted_drafts: int = 0
    #: Number of verify passes that accepted 0, 1, 2, ... drafts.
    accept_histogram: list[int] = field(default_factory=list)
    finished: bool = False
    aborted: bool = False
    #: Set when the request ends (finished, cancelled or aborted).
    done: asyncio.Event = field(default_factory=asyncio.Event)
    #: Tokens are handed over when this many are unsent (SGLang's ``stream_interval``).
    stream_interval: int = 1
    #: Events not handed over yet, and their tokens.
    held: list[TokenEvent] = field(default_factory=list)
    unsent: int = 0

    def hand_over(self, event: TokenEvent) -> None:
        """Queue ``event`` for the response, as SGLang streams: every step at interval 1, else
        the first token at once, then whenever ``stream_interval`` tokens are unsent, and the
        end."""
        first = self.completion_tokens == event.new_tokens and not self.held
        self.held.append(event)
        self.unsent += event.new_tokens
        if self.stream_interval > 1 and not (
            first or event.finished or self.unsent >= self.stream_interval
        ):
            return
        for held in self.held:
            self.queue.put_nowait(held)
        self.held.clear()
        self.unsent = 0


class ServingRuntime:
    """Paces one :class:`ServingEngine` in real time (see the module docstring)."""

    def __init__(
        self,
        engine: ServingEngine,
        *,
        log: SGLangLog,
        dialect: str,
        decode_log_interval: int,
        num_draft_tokens: int,
        faults: FaultPlan,
        on_fatal: Callable[[Sequence[str], int], None],
        admission: Admission | None = None,
        serve_scale: float = 1.0,
    ) -> None:
        self.engine = engine
        #: Wall-clock seconds per modelled second of serving (``--sim-serve-scale``).
        self.serve_scale = serve_scale if serve_scale > 0 else 1.0
        self.log = log
        self.dialect = dialect
        self.decode_log_interval = max(1, decode_log_interval)
        self.speculative = engine.config.speculative
        self.num_draft_tokens = num_draft_tokens
        self.faults = faults
        self.on_fatal = on_fatal
        self.completed = 0
        self.metrics = self.new_metrics()
        self.admission = admission or Admission()
        self._requests: dict[str, RequestState] = {}
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()
        self._decode_steps = 0
        self._window = _Window(time.monotonic())

    def crash_lines(self) -> tuple[str, ...]:
        """What the imitated server's scheduler prints when a CUDA error kills it while serving
        (the ``crash_mid_benchmark`` fault)."""
        return cuda_crash_lines(SITE_PACKAGES)

    def new_metrics(self) -> ServerMetrics:
        """The metrics behind ``/metrics`` (SGLang's names)."""
        return ServerMetrics(speculative=self.speculative, num_draft_tokens=self.num_draft_tokens)

    # --- requests --------------------------------------------------------------------------
    @property
    def active(self) -> int:
        """Requests submitted and not yet finished or cancelled."""
        return len(self._requests)

    @property
    def closed(self) -> asyncio.Event:
        return self._closed

    def fits(self, prompt_tokens: int, max_new_tokens: int) -> bool:
        return self.engine.fits(prompt_tokens, max_new_tokens)

    def submit(
        self,
        prompt_tokens: int,
        max_new_tokens: int,
        temperature: float,
        *,
        counted: bool,
        stream_interval: int = 1,
    ) -> RequestState:
        state = RequestState(uuid.uuid4().hex, prompt_tokens, max_new_tokens, counted)
        state.stream_interval = max(1, stream_interval)
        self._requests[state.rid] = state
        self.engine.submit(SimRequest(state.rid, prompt_tokens, max_new_tokens, temperature))
        self.admission.arrived(asyncio.get_running_loop().time())
        self._wake.set()
        return state

    def cancel(self, state: RequestState) -> None:
        """Stop a request (client gone, stop string found); a finished one is left alone."""
        if self._requests.pop(state.rid, None) is not None:
            state.aborted = not state.finished
            state.done.set()
            self.engine.cancel(state.rid)
            self._wake.set()

    async def next_events(self, state: RequestState) -> list[TokenEvent] | None:
        """Wait for the request's next tokens; every event already queued comes at once.

        Returns None when the server is shutting down (the request is aborted).
        """
        first = await state.queue.get()
        events: list[TokenEvent | None] = [first]
        while not state.queue.empty():
            events.append(state.queue.get_nowait())
        if any(e is None for e in events):
            return None
        return [e for e in events if e is not None]

    def close(self) -> None:
        """Abort every request and stop the loop (server shutdown)."""
        self._closed.set()
        self._wake.set()
        self.admission.close()
        for state in list(self._requests.values()):
            state.aborted = True
            state.queue.put_nowait(None)
            state.done.set()
        self._requests.clear()

    # --- the loop --------------------------------------------------------------------------
    async def run(self) -> None:
        """Drive the engine until :meth:`close`."""
        loop = asyncio.get_running_loop()
        begin: float | None = None  # when the next step begins; None: now
        burst: tuple[float, int] | None = None  # start of a burst, arrivals before it
        while not self._closed.is_set():
            if not self.engine.has_work():
                before = self.admission.arrivals
                begin = await self._until_work()
                if begin is None:
                    continue
                burst = (begin, before)
                await self.admission.burst(begin)
            if burst is not None and not (self.engine.waiting or self.engine.prefilling):
                if self.admission.arrivals - burst[1] > 1:
                    # a client's burst decodes in step: its first decode waits for the rest
                    await self.admission.burst(burst[0], decoding=True)
                burst = None
                continue
            result = self.engine.step()
            if result.kind == "idle" and not result.events:
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=0.05)
                begin = None
                continue
            wall_s = result.duration_s * self.serve_scale
            deadline = self.admission.deadline(begin, wall_s, loop.time())
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            delivered_at = loop.time()
            crash = self._deliver(result)
            self._log_step(result)
            if crash:
                # let the last response reach its client, then die as a crashed scheduler does
                await asyncio.sleep(0.01)
                self.on_fatal(self.crash_lines(), 1)
                return
            begin = deadline
            finished = sum(1 for ev in result.events if ev.finished)
            idle = not self.engine.running  # waiting for replacements holds no decoding up
            if finished > 1 or (finished and not idle):
                await self.admission.replacements(delivered_at, finished, idle=idle)

    async def _until_work(self) -> float | None:
        """Wait until the idle engine gets work; when its first request arrived (None: the
        server is closing, or the wake-up brought no work)."""
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        self._wake.clear()
        await self._wake.wait()
        if self._closed.is_set() or not self.engine.has_work():
            return None
        arrival = self.admission.last_arrival
        return arrival if arrival >= idle_since else loop.time()

    def _deliver(self, result: StepResult) -> bool:
        now = time.monotonic()
        scale = self.serve_scale
        crash = False
        for ev in result.events:
            state = self._requests.get(ev.rid)
            if state is None:
                continue
            if ev.new_tokens > 0:
                if state.first_token_at is None or state.last_token_at is None:
                    state.first_token_at = now
                    self.metrics.ttft.observe((now - state.created) / scale)
                else:
                    gap = (now - state.last_token_at) / scale
                    self.metrics.itl.observe(gap / ev.new_tokens, ev.new_tokens)
                state.last_token_at = now
            state.completion_tokens += ev.new_tokens
            if ev.verify:
                state.verify_ct += ev.verify
                state.accepted_drafts += ev.accepted_drafts
                slot = min(ev.accepted_drafts, max(0, self.num_draft_tokens - 1))
                if len(state.accept_histogram) <= slot:
                    state.accept_histogram.extend([0] * (slot + 1 - len(state.accept_histogram)))
                state.accept_histogram[slot] += ev.verify
            if ev.finished:
                state.finished = True
                state.done.set()
                self._requests.pop(state.rid, None)
                self.metrics.e2e.observe((now - state.created) / scale)
                if state.counted:
                    self.completed += 1
                    crash = crash or self.faults.crashes_after(self.completed)
            state.hand_over(ev)
        return crash

    def _log_step(self, result: StepResult) -> None:
        stats = self.engine.stats
        if result.kind == "prefill":
            new = [ev for ev in result.events if ev.prefill_tokens > 0]
            tokens = sum(ev.prefill_tokens for ev in new)
            self.log.rank(
                prefill_line(
                    self.dialect,
                    new_seq=len(new),
                    new_tokens=tokens,
                    token_usage=stats.token_usage,
                    running=max(0, result.running - len(new)),
                    queued=result.queued,
                    input_throughput=tokens / result.duration_s if result.duration_s > 0 else 0.0,
                )
            )
            return
        if result.kind != "decode":
            return
        w = self._window
        for ev in result.events:
            w.generated += ev.new_tokens
            if ev.verify:
                w.verify += ev.verify
                w.accepted_tokens += ev.new_tokens
                w.accepted_drafts += ev.accepted_drafts
        self._decode_steps += 1
        if self._decode_steps % self.decode_log_interval:
            return
        now = time.monotonic()
        window = WindowStats(
            running=len(result.events),
            used_tokens=result.used_tokens,
            token_usage=stats.token_usage,
            queued=result.queued,
            generated_tokens=w.generated,
            elapsed_s=(now - w.started) / self.serve_scale,
            verify_ct=w.verify,
            accepted_tokens=w.accepted_tokens,
            accepted_drafts=w.accepted_drafts,
            cuda_graph=self.engine.cuda_graph and len(result.events) <= self.engine.max_bs,
        )
        self.log.rank(
            decode_line(
                self.dialect,
                window,
                speculative=self.speculative,
                num_draft_tokens=self.num_draft_tokens,
            )
        )
        self._window = _Window(now)

    # --- metrics ---------------------------------------------------------------------------
    def render_metrics(self, model_name: str) -> str:
        """The Prometheus text of ``/metrics`` (SGLang's ``sglang:`` metrics here)."""
        return self.metrics.render(self.engine.stats, model_name)


@dataclass
class _Window:
    started: float
    generated: int = 0
    verify: int = 0
    accepted_tokens: int = 0
    accepted_drafts: int = 0
