"""The serving engine of the simulator: SGLang's scheduling loop over modelled step times.

Requests wait until the KV pool can hold their prompt and their whole output budget and a running
slot is free (``max_running_requests``); admitted prompts are prefilled in chunks of
``chunked_prefill_size`` tokens (decode pauses meanwhile, as in SGLang without mixed chunking);
then every step decodes all running requests at once: one forward pass per token without
speculation, one speculative cycle (draft, verify, extend) with it. A cycle gives each request
one bonus token plus its accepted drafts: the expected number at zero noise (accumulated exactly,
so a request's total is deterministic), a sampled number otherwise. Batches larger than the
largest captured CUDA graph run eagerly.

``step()`` advances one step (the real-time server paces these); ``step(max_cycles=k)`` may
advance up to ``k`` identical decode steps at once when nothing else can happen in between
(the virtual-time evaluation uses this; the arithmetic is the same). Such a step's result still
says how long each cycle took (:class:`~autotune.sim._types.CycleTimes`) and how many tokens
each request gained in each (``TokenEvent.cycle_tokens``), as the steps one at a time would.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from autotune.sim._acceptance import AcceptanceModel, DraftTree, tree_shape
from autotune.sim._profile import Learning
from autotune.sim._timing import StepTimer
from autotune.sim._types import CycleTimes, SimRequest, StepResult, TokenEvent


@dataclass
class EngineStats:
    """Counters behind ``/get_server_info``, ``/metrics`` and the Decode batch log line."""

    num_requests_total: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    verify_ct_total: int = 0
    accepted_drafts_total: int = 0
    max_total_num_tokens: int = 0
    last_gen_throughput: float = 0.0
    running: int = 0
    queued: int = 0
    used_tokens: int = 0

    @property
    def token_usage(self) -> float:
        if self.max_total_num_tokens <= 0:
            return 0.0
        return self.used_tokens / self.max_total_num_tokens

    @property
    def avg_spec_accept_length(self) -> float:
        if self.verify_ct_total == 0:
            return 0.0
        return (self.accepted_drafts_total + self.verify_ct_total) / self.verify_ct_total


@dataclass
class _Req:
    rid: str
    prompt: int
    max_new: int
    temperature: float
    prefilled: int = 0
    generated: int = 0
    frac: float = 0.5
    verify_ct: int = 0
    accepted: int = 0

    @property
    def kv(self) -> int:
        return self.prefilled + self.generated

    @property
    def reserved(self) -> int:
        return self.prompt + self.max_new


@dataclass
class _Noise:
    """Multiplicative noise on step times: a slowly varying level times per-step jitter.

    Modelling choice. The level is ``exp(x - level**2 / 2)`` (mean 1) with ``x`` a
    mean-reverting (Ornstein-Uhlenbeck) process over the engine's serving time: stationary
    standard deviation ``level``, correlation time ``period_s`` (1 s). It stands for what drifts
    on a real GPU server over seconds (clocks and temperature, neighbours on the host) and is what
    makes repeated benchmark runs differ: a run of ``T`` seconds averages it to a relative spread
    of about ``level * sqrt(2 * period_s / T)``: at ``--sim-noise 0.02`` the throughput of a 6 s
    run varies by about 0.7% from run to run (as a steady GPU benchmark does), at 0.15 by about
    5%, and the median absolute deviation a client computes over repeats estimates that spread.
    The jitter (independent per step, standard deviation ``jitter``) spreads inter-token
    latencies and averages out over a run. The sequence is reproducible from the generator's
    seed.
    """

    level: float
    jitter: float
    rng: random.Random
    period_s: float = 1.0
    x: float | None = None

    def factor(self, duration_s: float) -> float:
        if self.level <= 0:
            return 1.0
        if self.x is None:
            self.x = self.rng.gauss(0.0, self.level)
        else:
            keep = math.exp(-max(0.0, duration_s) / self.period_s)
            self.x = keep * self.x + self.level * math.sqrt(1.0 - keep * keep) * self.rng.gauss(
                0.0, 1.0
            )
        drift = math.exp(self.x - self.level * self.level / 2.0)
        return max(0.2, drift * (1.0 + self.rng.gauss(0.0, self.jitter)))


class ServingEngine:
    """SGLang's scheduler over one configuration's modelled costs. See the module docstring."""

    def __init__(
        self,
        *,
        timer: StepTimer,
        kv_tokens: int,
        max_running: int,
        max_bs: int,
        cuda_graph: bool,
        chunk: int,
        acceptance: AcceptanceModel | None,
        acceptance_for: Callable[[float], AcceptanceModel | None] | None = None,
        learning: Learning | None = None,
        noise: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.timer = timer
        self.config = timer.config
        self.kv_tokens = kv_tokens
        self.max_running = max_running
        self.max_bs = max_bs
        self.cuda_graph = cuda_graph
        self.chunk = max(1, chunk)
        self._acceptance = acceptance
        self._acceptance_for = acceptance_for
        self._by_temp: dict[float, AcceptanceModel | None] = {}
        #: How the drafter learns from the served text (an n-gram table), from this start on.
        self.learning = learning
        self._learned: dict[tuple[float, float], AcceptanceModel] = {}
        self.rng = random.Random(seed)
        self.noise = _Noise(noise, noise * 0.5, random.Random(seed + 1))
        self.waiting: deque[_Req] = deque()
        self.prefilling: list[_Req] = []
        self.running: list[_Req] = []
        self.stats = EngineStats(max_total_num_tokens=kv_tokens)
        self._reserved = 0

    # --- requests --------------------------------------------------------------------------
    def submit(self, request: SimRequest) -> None:
        req = _Req(
            request.rid,
            max(1, request.prompt_tokens),
            max(1, request.max_new_tokens),
            request.temperature,
        )
        self.waiting.append(req)
        self.stats.num_requests_total += 1
        self._refresh()

    def cancel(self, rid: str) -> None:
        for group in (self.running, self.prefilling):
            for req in group:
                if req.rid == rid:
                    group.remove(req)
                    self._reserved -= req.reserved
                    self._refresh()
                    return
        for req in list(self.waiting):
            if req.rid == rid:
                self.waiting.remove(req)
        self._refresh()

    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.running)

    def fits(self, prompt_tokens: int, max_new_tokens: int) -> bool:
        """Whether a request could ever be admitted (its whole budget fits the KV pool)."""
        return prompt_tokens + max_new_tokens <= self.kv_tokens

    # --- stepping --------------------------------------------------------------------------
    def step(self, max_cycles: int = 1) -> StepResult:
        self._admit()
        if self.prefilling:
            return self._prefill_step()
        if not self.running:
            return StepResult(0.0, "idle", running=0, queued=len(self.waiting))
        cycles = 1
        if max_cycles > 1 and self.noise.level <= 0 and not self._admittable():
            cycles = max(1, min(max_cycles, self._cycles_until_finish()))
        return self._decode_step(cycles)

    def _admittable(self) -> bool:
        if not self.waiting:
            return False
        head = self.waiting[0]
        room = self.kv_tokens - self._reserved
        slots = self.max_running - len(self.running) - len(self.prefilling)
        return slots > 0 and head.reserved <= room

    def _admit(self) -> None:
        while self._admittable():
            req = self.waiting.popleft()
            self._reserved += req.reserved
            self.prefilling.append(req)
        # a request larger than the whole pool can never run: SGLang rejects it
        while self.waiting and self.waiting[0].reserved > self.kv_tokens:
            self.waiting.popleft()

    def _prefill_step(self) -> StepResult:
        budget = self.chunk
        events: list[TokenEvent] = []
        tokens = 0
        context = 0
        done: list[_Req] = []
        for req in self.prefilling:
            if budget <= 0:
                break
            take = min(budget, req.prompt - req.prefilled)
            context += req.prefilled
            req.prefilled += take
            budget -= take
            tokens += take
            if req.prefilled >= req.prompt:
                done.append(req)
        duration = self.timer.prefill_ms(tokens, context) / 1000.0
        duration *= self.noise.factor(duration)
        decoding = len(self.running)
        for req in done:
            self.prefilling.remove(req)
            req.generated = 1  # the prefill pass samples the first token
            self.running.append(req)
            self.stats.prompt_tokens_total += req.prompt
            self.stats.generation_tokens_total += 1
            finished = req.generated >= req.max_new
            events.append(TokenEvent(req.rid, 1, finished, prefill_tokens=req.prompt))
            if finished:
                self._finish(req)
        self._refresh()
        return StepResult(duration, "prefill", events, *self._counts(decoding))

    def _model_for(self, temperature: float) -> AcceptanceModel | None:
        """The acceptance model at a request's temperature (built once per temperature), as
        far as the drafter has learned from the tokens generated since the start."""
        key = round(temperature, 2)
        if key == 0.0 or self._acceptance_for is None:
            model = self._acceptance
        else:
            if key not in self._by_temp:
                self._by_temp[key] = self._acceptance_for(key)
            model = self._by_temp[key]
        if model is None or self.learning is None:
            return model
        share = self.learning.share(self.stats.generation_tokens_total)
        learned = self._learned.get((key, share))
        if learned is None:
            learned = self._learned[(key, share)] = model.scaled(share)
        return learned

    def _tree(self, req: _Req) -> tuple[AcceptanceModel, DraftTree] | None:
        cfg = self.config
        model = self._model_for(req.temperature)
        if model is None or not cfg.speculative:
            return None
        return model, model.tree(*tree_shape(cfg))

    def _cycles_until_finish(self) -> int:
        """Decode steps (at zero noise) until the first running request reaches its budget."""
        best = None
        for req in self.running:
            remaining = req.max_new - req.generated
            pair = self._tree(req)
            rate = 0.0 if pair is None else pair[1].expected_accept_length - 1.0
            k = _cycles_to_gain(remaining, req.frac if pair is not None else 0.0, rate)
            best = k if best is None else min(best, k)
        return best or 1

    def _decode_step(self, cycles: int) -> StepResult:
        batch = len(self.running)
        graph = self.cuda_graph and batch <= self.max_bs
        context = float(sum(req.kv for req in self.running))
        events: list[TokenEvent] = []
        gained_total = 0
        per_req: list[tuple[_Req, int, int, tuple[int, ...]]] = []  # req, tokens, drafts, split
        expected_gain = 0.0
        for req in self.running:
            pair = self._tree(req)
            remaining = req.max_new - req.generated
            carry, rate = 0.0, 0.0  # accepted-draft fraction carried in, drafts per cycle
            if pair is None:
                gain, accepted = min(cycles, remaining), 0
                expected_gain += 1.0
            elif self.noise.level <= 0:
                e_acc = pair[1].expected_accept_length - 1.0
                carry, rate = req.frac, e_acc
                total = req.frac + cycles * e_acc
                accepted = math.floor(total)
                req.frac = total - accepted
                gain = min(remaining, cycles + accepted)
                accepted = max(0, gain - cycles)
                expected_gain += 1.0 + e_acc
            else:
                accepted = pair[0].sample_accepted(pair[1], self.rng)
                gain = min(remaining, 1 + accepted)
                accepted = max(0, gain - 1)
                expected_gain += 1.0 + pair[1].expected_accept_length - 1.0
            split = cycle_tokens(cycles, gain, carry, rate) if cycles > 1 else ()
            per_req.append((req, gain, accepted, split))
            gained_total += gain
        duration = self._duration(batch, context, expected_gain, cycles, graph)
        duration *= self.noise.factor(duration)
        times = None
        if cycles > 1:
            times = self._cycle_times(batch, context, expected_gain, cycles, graph)
        for req, gain, accepted, split in per_req:
            req.generated += gain
            verify = cycles if self.config.speculative else 0
            req.verify_ct += verify
            req.accepted += accepted
            self.stats.verify_ct_total += verify
            self.stats.accepted_drafts_total += accepted
            finished = req.generated >= req.max_new
            event = TokenEvent(req.rid, gain, finished, verify=verify, accepted_drafts=accepted)
            event.cycle_tokens = split
            events.append(event)
            if finished:
                self._finish(req)
        self.stats.generation_tokens_total += gained_total
        if duration > 0:
            self.stats.last_gen_throughput = gained_total / duration
        self._refresh()
        return StepResult(duration, "decode", events, *self._counts(batch), cycle_times=times)

    def _duration(self, batch: int, context: float, gain: float, cycles: int, graph: bool) -> float:
        """Seconds for ``cycles`` steps; the context grows by ``gain`` tokens per step.

        A step's time is ``a + max(b + k * context, c)`` (memory grows with the context read by
        attention, compute does not): flat while compute-bound, then linear. The sum over the
        steps is taken exactly in closed form: the flat part, then an arithmetic series.
        """
        if cycles <= 3:
            return (
                sum(self._one_ms(batch, context + gain * i, gain, graph) for i in range(cycles))
                / 1000.0
            )
        return self._cycle_times(batch, context, gain, cycles, graph).total_s

    def _cycle_times(
        self, batch: int, context: float, gain: float, cycles: int, graph: bool
    ) -> CycleTimes:
        """The duration of each of ``cycles`` steps (see :meth:`_duration`)."""

        def f(i: float) -> float:
            return self._one_ms(batch, context + gain * i, gain, graph)

        last, first = cycles - 1, f(0)
        if f(last) <= first + 1e-12:
            return CycleTimes(cycles, cycles, first / 1000.0)
        lo, hi = 0, last  # f(lo) is on the flat part, f(hi) above it
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if f(mid) <= first + 1e-12:
                lo = mid
            else:
                hi = mid
        return CycleTimes(cycles, lo + 1, first / 1000.0, f(lo + 1) / 1000.0, f(last) / 1000.0)

    def _one_ms(self, batch: int, context: float, gain: float, graph: bool) -> float:
        if self.config.speculative and self._acceptance is not None:
            return self.timer.cycle_ms(batch, context, gain, graph=graph)
        return self.timer.decode_ms(batch, context, graph=graph)

    def _finish(self, req: _Req) -> None:
        if req in self.running:
            self.running.remove(req)
        self._reserved -= req.reserved

    def _counts(self, batch: int | None = None) -> tuple[int, int, int]:
        running = len(self.running) if batch is None else batch
        return running, len(self.waiting), self.stats.used_tokens

    def _refresh(self) -> None:
        self.stats.running = len(self.running) + len(self.prefilling)
        self.stats.queued = len(self.waiting)
        self.stats.used_tokens = sum(r.kv for r in self.running) + sum(
            r.prefilled for r in self.prefilling
        )


def cycle_tokens(cycles: int, gain: int, carry: float, drafts_per_cycle: float) -> tuple[int, ...]:
    """The tokens a request gains in each of ``cycles`` fast-forwarded decode steps, ``gain`` in
    all: a bonus token each plus the accepted drafts as they accumulate from ``carry`` (the
    fraction carried in) at ``drafts_per_cycle`` (0 without speculation); the last cycles give
    fewer, or none, where the request reaches its output budget before the step ends."""
    floor = math.floor
    out: list[int] = []
    before = 0
    for j in range(1, cycles + 1):
        upto = j + floor(carry + j * drafts_per_cycle)
        if upto >= gain:  # the budget is reached: nothing more in the cycles left
            out.append(gain - before)
            out.extend([0] * (cycles - j))
            break
        out.append(upto - before)
        before = upto
    return tuple(out)


def _cycles_to_gain(tokens: int, carry: float, drafts_per_cycle: float) -> int:
    """The fewest decode steps that give ``tokens`` (the arithmetic of :func:`cycle_tokens`)."""

    def gained(j: int) -> int:
        return j + math.floor(carry + j * drafts_per_cycle)

    k = max(1, math.ceil((tokens - carry) / (1.0 + drafts_per_cycle)))
    while k > 1 and gained(k - 1) >= tokens:
        k -= 1
    while gained(k) < tokens:
        k += 1
    return k
