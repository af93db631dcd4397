"""The serving loop: drives the model's engine in real time and hands tokens to the requests.

One asyncio task owns the engine. While the engine has work it takes a step, then sleeps until
that step's deadline, then delivers the step's tokens to the waiting requests. Deadlines follow a
monotonic schedule (each is the previous deadline plus the step's modelled duration), so sleeping
imprecisely does not add up to drift; a loop that fell behind delivers its late step at once and
schedules the next from now, so it never bursts more than one step early to catch up. Serving is
never time-scaled: a step the model times at 31 ms takes 31 ms.

The loop also prints SGLang's ``Prefill batch`` line for every prefill step and the ``Decode
batch`` line every ``--decode-log-interval`` decode steps, keeps the latency histograms behind
``/metrics``, and ends the process when a ``crash_mid_benchmark`` fault comes due.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autotune.sim._engine import ServingEngine
from autotune.sim._faults import FaultPlan, cuda_crash_lines
from autotune.sim._logging import SITE_PACKAGES, SGLangLog, WindowStats, decode_line, prefill_line
from autotune.sim._types import SimRequest, StepResult, TokenEvent

_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06,
                0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8)  # fmt: skip
_E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800)


@dataclass
class Histogram:
    """A Prometheus histogram: cumulative buckets, count and sum."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float, times: int = 1) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)
        self.counts[bisect_left(self.buckets, value)] += times
        self.total += value * times
        self.count += times

    def cumulative(self) -> list[tuple[str, int]]:
        counts = self.counts or [0] * (len(self.buckets) + 1)
        out: list[tuple[str, int]] = []
        running = 0
        for bound, n in zip((*self.buckets, None), counts, strict=True):
            running += n
            out.append(("+Inf" if bound is None else repr(float(bound)), running))
        return out


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
    ) -> None:
        self.engine = engine
        self.log = log
        self.dialect = dialect
        self.decode_log_interval = max(1, decode_log_interval)
        self.speculative = engine.config.speculative
        self.num_draft_tokens = num_draft_tokens
        self.faults = faults
        self.on_fatal = on_fatal
        self.completed = 0
        self.ttft = Histogram(_TTFT_BUCKETS)
        self.itl = Histogram(_ITL_BUCKETS)
        self.e2e = Histogram(_E2E_BUCKETS)
        self._requests: dict[str, RequestState] = {}
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()
        self._decode_steps = 0
        self._window = _Window(time.monotonic())

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
        self, prompt_tokens: int, max_new_tokens: int, temperature: float, *, counted: bool
    ) -> RequestState:
        state = RequestState(uuid.uuid4().hex, prompt_tokens, max_new_tokens, counted)
        self._requests[state.rid] = state
        self.engine.submit(SimRequest(state.rid, prompt_tokens, max_new_tokens, temperature))
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
        for state in list(self._requests.values()):
            state.aborted = True
            state.queue.put_nowait(None)
            state.done.set()
        self._requests.clear()

    # --- the loop --------------------------------------------------------------------------
    async def run(self) -> None:
        """Drive the engine until :meth:`close`."""
        deadline: float | None = None
        loop = asyncio.get_running_loop()
        while not self._closed.is_set():
            if not self.engine.has_work():
                self._wake.clear()
                await self._wake.wait()
                deadline = None
                continue
            result = self.engine.step()
            if result.kind == "idle" and not result.events:
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=0.05)
                deadline = None
                continue
            deadline = next_deadline(deadline, result.duration_s, loop.time())
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            crash = self._deliver(result)
            self._log_step(result)
            if crash:
                # let the last response reach its client, then die as a crashed scheduler does
                await asyncio.sleep(0.01)
                self.on_fatal(cuda_crash_lines(SITE_PACKAGES), 1)
                return

    def _deliver(self, result: StepResult) -> bool:
        now = time.monotonic()
        crash = False
        for ev in result.events:
            state = self._requests.get(ev.rid)
            if state is None:
                continue
            if ev.new_tokens > 0:
                if state.first_token_at is None or state.last_token_at is None:
                    state.first_token_at = now
                    self.ttft.observe(now - state.created)
                else:
                    gap = now - state.last_token_at
                    self.itl.observe(gap / ev.new_tokens, ev.new_tokens)
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
                self.e2e.observe(now - state.created)
                if state.counted:
                    self.completed += 1
                    crash = crash or self.faults.crashes_after(self.completed)
            state.queue.put_nowait(ev)
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
            elapsed_s=now - w.started,
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
        """Prometheus text exposition of SGLang's ``sglang:`` metrics."""
        s = self.engine.stats
        labels = f'engine_type="unified",model_name="{_escape(model_name)}",pp_rank="0",tp_rank="0"'
        gauges = {
            "num_running_reqs": ("The number of running requests.", s.running),
            "num_used_tokens": ("The number of used tokens.", s.used_tokens),
            "token_usage": ("The token usage.", s.token_usage),
            "gen_throughput": ("The generation throughput (token/s).", s.last_gen_throughput),
            "num_queue_reqs": ("The number of requests in the waiting queue.", s.queued),
            "cache_hit_rate": ("The prefix cache hit rate.", 0.0),
            "max_total_num_tokens": ("Maximum total number of tokens.", s.max_total_num_tokens),
            "spec_accept_length": (
                "The average acceptance length of speculative decoding.",
                s.avg_spec_accept_length if self.speculative else 0.0,
            ),
            "spec_accept_rate": (
                "The average acceptance rate of speculative decoding.",
                self._accept_rate() if self.speculative else 0.0,
            ),
        }
        out: list[str] = []
        for name, (help_text, value) in gauges.items():
            out += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} gauge"]
            out.append(f"sglang:{name}{{{labels}}} {float(value)!r}")
        counters = {
            "prompt_tokens_total": ("Number of prefill tokens processed.", s.prompt_tokens_total),
            "generation_tokens_total": (
                "Number of generation tokens processed.",
                s.generation_tokens_total,
            ),
            "num_requests_total": ("Number of requests processed.", s.num_requests_total),
        }
        for name, (help_text, value) in counters.items():
            out += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} counter"]
            out.append(f"sglang:{name}{{{labels}}} {float(value)!r}")
        histograms = {
            "time_to_first_token_seconds": ("Histogram of time to first token in seconds.",
                                            self.ttft),
            "inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.",
                                            self.itl),
            "e2e_request_latency_seconds": ("Histogram of End-to-end request latency in seconds",
                                            self.e2e),
        }  # fmt: skip
        for name, (help_text, hist) in histograms.items():
            out += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} histogram"]
            for bound, n in hist.cumulative():
                out.append(f'sglang:{name}_bucket{{{labels},le="{bound}"}} {float(n)!r}')
            out.append(f"sglang:{name}_count{{{labels}}} {float(hist.count)!r}")
            out.append(f"sglang:{name}_sum{{{labels}}} {hist.total!r}")
        return "\n".join(out) + "\n"

    def _accept_rate(self) -> float:
        s = self.engine.stats
        proposed = s.verify_ct_total * max(0, self.num_draft_tokens - 1)
        return s.accepted_drafts_total / proposed if proposed else 0.0


def next_deadline(previous: float | None, duration_s: float, now: float) -> float:
    """When a step that starts now is due: the previous deadline plus its duration.

    Without a previous deadline (the engine was idle) the step starts now; a loop that fell
    behind (the result would already be past) delivers at once and goes on from now.
    """
    return max((now if previous is None else previous) + duration_s, now)


@dataclass
class _Window:
    started: float
    generated: int = 0
    verify: int = 0
    accepted_tokens: int = 0
    accepted_drafts: int = 0


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
