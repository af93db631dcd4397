"""A benchmark client against the serving engine in virtual time: what ``sim eval`` measures.

:class:`VirtualRun` sends a workload's requests to a :class:`~autotune.sim._engine.ServingEngine`
as the benchmark client does (``concurrency`` requests in flight, or Poisson arrivals at
``request_rate``), from the first send to the last completion, and computes the figures of
:mod:`autotune.bench._metrics` from the chunks a simulated server would stream: one chunk per
decode step (or speculative cycle) of every running request, as SGLang streams at
``--stream-interval 1``, the first one with the token of the prefill pass.

- TTFT: send to the first chunk (the end of the request's last prefill step).
- ITL: gaps between consecutive chunks. ``/generate`` chunks say how many tokens they add, so a
  gap is spread evenly over them, one value per token (``completions`` and ``chat`` chunks do
  not: one value per gap). A gap is the cycle's own duration while the request decodes, and
  spans the prefill steps that paused decoding meanwhile.
- TPOT: ``(e2e - ttft) / (output_tokens - 1)`` for requests with more than one output token;
  E2E: send to the last chunk.
- Every completed request's own TTFT, TPOT and E2E (``Verdict.requests``), so that goodput can
  be counted against per-request limits (:class:`autotune._slo.RequestLimits`).

When nothing can be admitted the engine fast-forwards many identical decode cycles in one
step (:meth:`~autotune.sim._engine.ServingEngine.step` with ``max_cycles``); its result still
says how long each cycle took and what each request gained in it, and every cycle counts as
the chunk it would have been. Latency samples are kept as values with counts
(:class:`LatencySamples`), so a run of a million tokens does not hold a million floats; their
percentiles are those of the expanded list (:func:`autotune._stats.weighted_percentile`).
"""

from __future__ import annotations

import math
import random
from collections import Counter

from autotune._knobs import ServerConfig
from autotune._stats import weighted_percentile
from autotune._workload import WorkloadSpec
from autotune.sim._engine import ServingEngine
from autotune.sim._types import SimRequest, StartupPlan, StepResult, TokenEvent, Verdict

#: The latency families and statistics of a verdict (``<family>_<stat>_ms``), as the client's.
FAMILIES = ("ttft", "itl", "tpot", "e2e")
STATS = ("mean", "median", "p90", "p99")
_QUANTILES = {"median": 50.0, "p90": 90.0, "p99": 99.0}


class LatencySamples:
    """Latency values (seconds), each with the number of times it was observed."""

    def __init__(self) -> None:
        self._counts: dict[float, int] = {}
        self._total = 0
        self._weighted_sum: list[float] = []

    def add(self, value: float, count: int = 1) -> None:
        if count <= 0:
            return
        self._counts[value] = self._counts.get(value, 0) + count
        self._total += count
        self._weighted_sum.append(value * count)
        if len(self._weighted_sum) > 4096:  # keep the partial sums short, exactly
            self._weighted_sum = [math.fsum(self._weighted_sum)]

    def __len__(self) -> int:
        return self._total

    def summary(self) -> dict[str, float | None]:
        """Mean, median, p90 and p99 in milliseconds (all ``None`` when empty)."""
        if not self._total:
            return dict.fromkeys(STATS)
        items = list(self._counts.items())
        out: dict[str, float | None] = {
            "mean": 1000.0 * math.fsum(self._weighted_sum) / self._total
        }
        for stat, q in _QUANTILES.items():
            out[stat] = 1000.0 * weighted_percentile(items, q)
        return out


class VirtualRun:
    """One benchmark of ``workload`` against ``engine``, in virtual time (module docstring)."""

    def __init__(
        self,
        engine: ServingEngine,
        workload: WorkloadSpec,
        config: ServerConfig,
        *,
        max_cycles: int = 1_000_000,
    ) -> None:
        #: Most decode cycles one engine step may fast-forward (1: step as the server does).
        self.max_cycles = max(1, max_cycles)
        self.engine = engine
        self.workload = workload
        self.config = config
        self.lengths = workload.sample_lengths()
        #: One ITL value per token (``/generate``), else one per chunk.
        self.per_token = workload.api == "generate"
        self.now = 0.0
        self.start: dict[int, float] = {}
        self.first: dict[int, float] = {}
        self.last_chunk: dict[int, float] = {}
        self.finish: dict[int, float] = {}
        self.itl = LatencySamples()
        self.in_flight: dict[str, int] = {}
        self.completion = 0
        self.verify_ct = 0
        self.accepted_total = 0
        self.busy_time = 0.0
        self.running_area = 0.0

    def run(self, plan: StartupPlan) -> Verdict:
        wl, engine = self.workload, self.engine
        rng = random.Random(f"{wl.seed}:arrivals")
        pending = list(range(len(self.lengths)))
        pending.reverse()
        next_arrival = 0.0

        def top_up(at: float) -> None:
            nonlocal next_arrival
            if wl.request_rate is None:
                while pending and len(self.in_flight) < wl.concurrency:
                    self._send(pending.pop(), at)
                return
            while pending and next_arrival <= at + 1e-12 and len(self.in_flight) < wl.concurrency:
                self._send(pending.pop(), max(at, next_arrival))
                next_arrival += rng.expovariate(wl.request_rate)

        top_up(self.now)
        guard = 0
        while self.in_flight or pending:
            guard += 1
            if guard > 10_000_000:
                break
            if not engine.has_work():
                if not pending:
                    break
                self.now = max(self.now, next_arrival)
                top_up(self.now)
                if not engine.has_work():
                    break
                continue
            max_cycles = self.max_cycles
            if wl.request_rate is not None and pending:
                max_cycles = 1  # arrivals may come between steps
            result = engine.step(max_cycles=max_cycles)
            if result.kind == "idle":
                if wl.request_rate is not None and pending:
                    self.now = max(self.now, next_arrival)
                    top_up(self.now)
                    continue
                break
            self._take(result)
            top_up(self.now)
        return self._verdict(plan)

    def _send(self, index: int, at: float) -> None:
        prompt, out = self.lengths[index]
        rid = f"r{index}"
        self.in_flight[rid] = index
        self.start[index] = at
        self.engine.submit(SimRequest(rid, prompt, out, self.workload.temperature))

    def _take(self, result: StepResult) -> None:
        """Advance the clock over one engine step and record the chunks it streamed."""
        began = self.now
        self.now += result.duration_s
        self.busy_time += result.duration_s
        self.running_area += result.running * result.duration_s
        cycles = result.cycles
        durations = list(cycles.durations()) if cycles.count > 1 else [result.duration_s]
        # requests that gained the same tokens in every cycle stream the same gaps after the
        # first cycle: counted once per pattern
        patterns: Counter[tuple[int, ...]] = Counter()
        for ev in result.events:
            index = self.in_flight.get(ev.rid)
            if index is None:
                continue
            self._count(ev)
            if ev.new_tokens > 0:
                tokens = ev.tokens_by_cycle()
                self._first_cycle(index, tokens[0], began + durations[0])
                if len(tokens) > 1:
                    patterns[tokens] += 1
                    self.last_chunk[index] = began + self._last_end(tokens, durations, began)
            if ev.finished:
                self.finish[index] = self.now
                del self.in_flight[ev.rid]
        for tokens, requests in patterns.items():
            for j in range(1, len(tokens)):
                if tokens[j] <= 0:
                    break
                self._gap(durations[j], tokens[j], requests)

    def _first_cycle(self, index: int, tokens: int, at: float) -> None:
        if tokens <= 0:
            return
        if index not in self.first:
            self.first[index] = at
        else:
            self._gap(at - self.last_chunk[index], tokens, 1)
        self.last_chunk[index] = at

    def _gap(self, gap: float, tokens: int, requests: int) -> None:
        if self.per_token:
            self.itl.add(gap / tokens, tokens * requests)
        else:
            self.itl.add(gap, requests)

    def _last_end(self, tokens: tuple[int, ...], durations: list[float], began: float) -> float:
        """Seconds from the step's start to the request's last chunk in it."""
        if tokens[-1] > 0:
            return self.now - began
        last = max(j for j, n in enumerate(tokens) if n > 0)
        return math.fsum(durations[: last + 1])

    def _count(self, ev: TokenEvent) -> None:
        self.completion += ev.new_tokens
        self.verify_ct += ev.verify
        self.accepted_total += ev.accepted_drafts

    def _verdict(self, plan: StartupPlan) -> Verdict:
        kv_tokens = None if plan.memory is None else plan.memory.kv_tokens
        done = sorted(self.finish)
        if not done:
            return Verdict(
                status="ok",
                output_tok_s=0.0,
                accept_length=None,
                accept_rate=None,
                startup_s=plan.duration_s,
                benchmark_s=0.0,
                failure_line=None,
                kv_tokens=kv_tokens,
                max_running_requests=plan.max_running_requests,
                mean_running=0.0,
            )
        t0 = min(self.start[i] for i in done)
        t1 = max(self.finish[i] for i in done)
        duration = max(1e-9, t1 - t0)
        out_tokens = sum(self.lengths[i][1] for i in done)
        in_tokens = sum(self.lengths[i][0] for i in done)
        n_draft = self.config.speculative_num_draft_tokens or 0
        proposed = self.verify_ct * max(0, n_draft - 1)
        latency = self._latency(done)
        return Verdict(
            requests=tuple(self._request(i) for i in done),
            status="ok",
            output_tok_s=out_tokens / duration,
            accept_length=self.completion / self.verify_ct if self.verify_ct else None,
            accept_rate=self.accepted_total / proposed if proposed else None,
            startup_s=plan.duration_s,
            benchmark_s=duration,
            failure_line=None,
            kv_tokens=kv_tokens,
            max_running_requests=plan.max_running_requests,
            mean_running=self.running_area / self.busy_time if self.busy_time > 0 else 0.0,
            total_tok_s=(out_tokens + in_tokens) / duration,
            request_throughput=len(done) / duration,
            details={
                "completed": float(len(done)),
                "kv_pool_gib": plan.memory.kv_pool_gib if plan.memory else 0.0,
                "mem_fraction_static": plan.memory.mem_fraction_static if plan.memory else 0.0,
            },
            **latency,
        )

    def _request(self, i: int) -> tuple[float, float | None, float]:
        """Request ``i``'s ``(ttft_s, tpot_s, e2e_s)``, as the client measures them."""
        first = self.first[i] - self.start[i]
        last = self.last_chunk[i] - self.start[i]
        out = self.lengths[i][1]
        return first, (last - first) / (out - 1) if out > 1 else None, last

    def _latency(self, done: list[int]) -> dict[str, float | None]:
        """The ``<family>_<stat>_ms`` figures of the completed requests."""
        ttft, tpot, e2e = LatencySamples(), LatencySamples(), LatencySamples()
        for i in done:
            first = self.first[i] - self.start[i]
            last = self.last_chunk[i] - self.start[i]
            ttft.add(first)
            e2e.add(last)
            out = self.lengths[i][1]
            if out > 1:
                tpot.add((last - first) / (out - 1))
        families = {"ttft": ttft, "itl": self.itl, "tpot": tpot, "e2e": e2e}
        return {
            f"{family}_{stat}_ms": value
            for family, samples in families.items()
            for stat, value in samples.summary().items()
        }
