"""Value types shared by the simulator's model, its serving engine and its server."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StartupPhase:
    """One start-up phase: how long it takes on the profiled hardware and what it prints.

    ``duration_s`` is real (unscaled) seconds; the server multiplies by its time scale. ``lines``
    are printed, in order, when the phase ends (SGLang's own wording, see the facts file). Each
    string is one log record: the server prints its log prefix (``[time TP0] ``) before it; a
    record may span several physical lines (a traceback), which then appear without prefix,
    as Python's logging prints multi-line messages.
    """

    name: str
    duration_s: float
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Crash:
    """A start-up crash: the category, SGLang's lines (traceback and message) and exit code.

    The crash happens at the end of phase ``after_phase`` (the phases before it and that one
    are printed first, then ``lines``: log records as in :class:`StartupPhase`).
    ``failure_line`` is the physical line a classifier decides on (the exception line).
    """

    category: str
    failure_line: str
    lines: tuple[str, ...]
    after_phase: str
    exit_code: int = 1


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory, GiB, as SGLang would account it at start-up."""

    total_gib: float
    mem_fraction_static: float
    fraction_was_auto: bool
    context_gib: float
    target_weights_gib: float
    draft_weights_gib: float
    kv_pool_gib: float
    kv_tokens: int
    graph_gib: float
    activation_gib: float
    free_after_static_gib: float
    #: Taken on the GPU by another part of the server after the budget was measured and before
    #: the KV pool is sized (SGLang 0.5.17's multimodal feature pool): it comes out of the pool.
    reserved_gib: float = 0.0


@dataclass(frozen=True)
class StartupPlan:
    """What a server with a given configuration does from launch until ready (or crash)."""

    phases: tuple[StartupPhase, ...]
    crash: Crash | None
    memory: MemoryPlan | None
    max_running_requests: int
    cuda_graph: bool
    #: Lines printed early (argument handling), e.g. SGLang's reset of max running requests.
    notices: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.crash is None

    @property
    def duration_s(self) -> float:
        """Unscaled seconds from launch to ready or to the crash line."""
        total = 0.0
        for phase in self.phases:
            total += phase.duration_s
            if self.crash is not None and phase.name == self.crash.after_phase:
                break
        return total


@dataclass(frozen=True)
class SimRequest:
    """A request as the serving engine sees it (token counts only)."""

    rid: str
    prompt_tokens: int
    max_new_tokens: int
    temperature: float = 0.0


@dataclass
class TokenEvent:
    """Tokens a request gained in one engine step (one forward pass or one speculative cycle,
    or several identical decode cycles when the engine fast-forwards)."""

    rid: str
    new_tokens: int
    finished: bool
    #: Verify passes of this step for the request (one per speculative cycle), else 0.
    verify: int = 0
    #: Draft tokens accepted in this step (new_tokens - verify when verifying, bonuses excluded).
    accepted_drafts: int = 0
    prefill_tokens: int = 0
    #: The tokens of each cycle, in order, when the step ran several cycles (a served step of
    #: one cycle would have streamed each as one chunk); empty: all came in the one cycle.
    cycle_tokens: tuple[int, ...] = ()

    def tokens_by_cycle(self) -> tuple[int, ...]:
        """The tokens this request gained in each cycle of the step."""
        return self.cycle_tokens or (self.new_tokens,)


@dataclass(frozen=True)
class CycleTimes:
    """The durations (unscaled seconds) of the cycles of one engine step, in order.

    ``flat`` cycles take ``flat_s`` each; the ``count - flat`` after them grow linearly from
    ``rise_first_s`` to ``rise_last_s`` (attention reads a context that grows by the same number
    of tokens every cycle, once the step is no longer compute-bound). A step of one cycle is
    ``CycleTimes(1, 1, duration)``.
    """

    count: int
    flat: int
    flat_s: float
    rise_first_s: float = 0.0
    rise_last_s: float = 0.0

    @classmethod
    def single(cls, duration_s: float) -> CycleTimes:
        return cls(1, 1, duration_s)

    def duration(self, i: int) -> float:
        """Seconds of cycle ``i`` (0-based)."""
        if i < self.flat:
            return self.flat_s
        rising = self.count - self.flat
        if rising <= 1:
            return self.rise_first_s
        share = (i - self.flat) / (rising - 1)
        return self.rise_first_s + (self.rise_last_s - self.rise_first_s) * share

    def durations(self) -> Iterator[float]:
        return (self.duration(i) for i in range(self.count))

    @property
    def total_s(self) -> float:
        rising = self.count - self.flat
        return self.flat * self.flat_s + rising * (self.rise_first_s + self.rise_last_s) / 2


@dataclass
class StepResult:
    """One engine step: its duration (unscaled seconds) and what each request gained."""

    duration_s: float
    kind: str  # "prefill", "decode" or "idle"
    events: list[TokenEvent] = field(default_factory=list)
    running: int = 0
    queued: int = 0
    used_tokens: int = 0
    #: The step's cycles when it ran several (None: one cycle of ``duration_s``).
    cycle_times: CycleTimes | None = None

    @property
    def cycles(self) -> CycleTimes:
        """The durations of the step's cycles."""
        return self.cycle_times or CycleTimes.single(self.duration_s)


@dataclass(frozen=True)
class Verdict:
    """The model's answer for one configuration and workload (``autotune sim eval``).

    The latency figures (milliseconds; ``<family>_<stat>_ms`` for TTFT, ITL, TPOT and E2E, each
    mean, median, p90 and p99) are those the benchmark client computes
    (:mod:`autotune.bench._metrics`) from the chunks a server streaming every cycle would send;
    see :mod:`autotune.sim._virtual`.
    """

    status: str  # "ok" or a crash category
    output_tok_s: float | None
    accept_length: float | None
    accept_rate: float | None
    startup_s: float
    benchmark_s: float | None
    failure_line: str | None
    kv_tokens: int | None
    max_running_requests: int | None
    mean_running: float | None
    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None
    total_tok_s: float | None = None
    request_throughput: float | None = None
    details: dict[str, float] = field(default_factory=dict)
    ttft_mean_ms: float | None = None
    ttft_median_ms: float | None = None
    ttft_p90_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_median_ms: float | None = None
    itl_p90_ms: float | None = None
    tpot_mean_ms: float | None = None
    tpot_median_ms: float | None = None
    tpot_p90_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_mean_ms: float | None = None
    e2e_median_ms: float | None = None
    e2e_p90_ms: float | None = None
    e2e_p99_ms: float | None = None
    #: Every completed request's ``(ttft_s, tpot_s, e2e_s)`` (``tpot_s`` None with one output
    #: token), in request order: what goodput counts against per-request limits.
    requests: tuple[tuple[float, float | None, float], ...] = field(default=(), repr=False)
