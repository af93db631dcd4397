"""Value types shared by the simulator's model, its serving engine and its server."""

from __future__ import annotations

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
    """Tokens a request gained in one engine step (one forward pass or one speculative cycle)."""

    rid: str
    new_tokens: int
    finished: bool
    #: 1 when this step was a speculative verify pass for the request, else 0.
    verify: int = 0
    #: Draft tokens accepted in this verify pass (new_tokens - 1 when verify, bonus excluded).
    accepted_drafts: int = 0
    prefill_tokens: int = 0


@dataclass
class StepResult:
    """One engine step: its duration (unscaled seconds) and what each request gained."""

    duration_s: float
    kind: str  # "prefill", "decode" or "idle"
    events: list[TokenEvent] = field(default_factory=list)
    running: int = 0
    queued: int = 0
    used_tokens: int = 0


@dataclass(frozen=True)
class Verdict:
    """The model's answer for one configuration and workload (``autotune sim eval``)."""

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
