"""Benchmark figures, with the definitions of SGLang's ``bench_serving``.

Per request (completed ones only, as bench_serving does):

- TTFT: send to the first chunk that carries output.
- E2E latency: send to the end of the stream.
- TPOT: ``(e2e - ttft) / (output_tokens - 1)`` for requests with more than one output token.
- ITL: gaps between consecutive chunks that carry output. When a chunk says how many tokens it
  adds (``meta_info.completion_tokens`` of ``/generate``; with speculative decoding one chunk can
  carry several), the gap is spread evenly over those tokens, one value per token; when it does
  not (the OpenAI routes), each gap is one value.

For the run: duration is first send to last end (completed or failed); throughputs divide the
completed requests' tokens by it (output tokens, input + output tokens, requests). Goodput, where
per-request limits are given (:class:`~autotune._slo.RequestLimits`), divides the completed
requests that meet every limit (TTFT, TPOT, E2E of that request) by the same duration. Latency
figures are mean, median, p90 and p99 in milliseconds; percentiles interpolate linearly between
order statistics (numpy's default, as bench_serving uses).

Acceptance of this run (``acceptance_source``) is read as the engine says (its
:class:`~autotune.engines.ServerApi`): first from the completed requests' own statistics
(``request_meta_info``), else from the server's statistics routes read around the run; the sources
are :data:`ACCEPTANCE_SOURCES`. SGLang's reading is described in
:mod:`autotune.engines.sglang._serving`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from autotune._errors import BenchmarkError
from autotune._slo import RequestLimits
from autotune._stats import percentile
from autotune.engines import Acceptance, DraftStats, ServerApi, server_api_for

#: The latency families and the statistics reported for each (names ``<family>_<stat>_ms``).
LATENCY_FAMILIES = ("ttft", "tpot", "itl", "e2e")
LATENCY_STATS = ("mean", "median", "p90", "p99")


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request. Times are seconds: ``start`` from the run's origin, the others
    from the request's own send.

    ``chunk_times`` lists the chunks that carried output; ``chunk_tokens`` the cumulative output
    tokens the server reported at each (``None`` where a chunk did not say). ``error`` is a reason
    code (``timeout``, ``stalled``, ``disconnected``, ``connect``, ``http_500``, ``malformed``,
    ``server_error``, ``incomplete``, ``empty``, ...) and ``error_detail`` the particulars.
    """

    index: int
    warmup: bool = False
    start: float | None = None
    ttft: float | None = None
    e2e: float | None = None
    chunk_times: tuple[float, ...] = ()
    chunk_tokens: tuple[int | None, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    spec_num_correct_drafts: int | None = None
    spec_num_proposed_drafts: int | None = None
    error: str | None = None
    error_detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def end(self) -> float | None:
        """Seconds from the run's origin to this request's end (None if it was never sent)."""
        if self.start is None or self.e2e is None:
            return None
        return self.start + self.e2e

    def in_time(self, scale: float) -> RequestRecord:
        """This record with its times divided by ``scale`` (wall seconds per second of the box
        they are read in)."""

        def div(t: float | None) -> float | None:
            return None if t is None else t / scale

        return replace(
            self,
            start=div(self.start),
            ttft=div(self.ttft),
            e2e=div(self.e2e),
            chunk_times=tuple(t / scale for t in self.chunk_times),
        )

    def itls(self) -> list[float]:
        """Inter-token latencies of this request, seconds (see the module docstring)."""
        out: list[float] = []
        times, tokens = self.chunk_times, self.chunk_tokens
        for i in range(1, len(times)):
            gap = times[i] - times[i - 1]
            before = tokens[i - 1] if i - 1 < len(tokens) else None
            after = tokens[i] if i < len(tokens) else None
            if before is not None and after is not None and after > before:
                n = after - before
                out.extend([gap / n] * n)
            else:
                out.append(gap)
        return out

    def tpot(self) -> float | None:
        if self.ttft is None or self.e2e is None or self.completion_tokens <= 1:
            return None
        return (self.e2e - self.ttft) / (self.completion_tokens - 1)

    def draft_stats(self) -> DraftStats:
        """The speculative statistics the server reported for this request."""
        return DraftStats(
            verify_ct=self.spec_verify_ct,
            accept_length=self.spec_accept_length,
            accept_rate=self.spec_accept_rate,
            num_correct_drafts=self.spec_num_correct_drafts,
            num_proposed_drafts=self.spec_num_proposed_drafts,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BenchmarkResult:
    """The figures of one benchmark run. Latencies in milliseconds; ``None`` where not measured."""

    url: str
    api: str
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    output_tok_s: float
    total_tok_s: float
    request_throughput: float
    concurrency: float
    ttft_mean_ms: float | None
    ttft_median_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    tpot_mean_ms: float | None
    tpot_median_ms: float | None
    tpot_p90_ms: float | None
    tpot_p99_ms: float | None
    itl_mean_ms: float | None
    itl_median_ms: float | None
    itl_p90_ms: float | None
    itl_p99_ms: float | None
    e2e_mean_ms: float | None
    e2e_median_ms: float | None
    e2e_p90_ms: float | None
    e2e_p99_ms: float | None
    accept_length: float | None
    accept_rate: float | None
    acceptance_source: str
    #: Failed measured requests by reason code.
    errors: Mapping[str, int] = field(default_factory=dict)
    #: The first few failures, ``"reason: detail"``.
    error_examples: tuple[str, ...] = ()
    warmup_failed: int = 0
    records: tuple[RequestRecord, ...] = field(default=(), repr=False)
    #: Completed requests per second within every per-request limit (None: no limits given).
    goodput: float | None = None

    def metrics(self) -> dict[str, float]:
        """The numeric figures by name (those measured), for aggregation over repeats."""
        skip = ("url", "api", "acceptance_source", "errors", "error_examples", "records")
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        return {name: float(v) for name, v in values.items() if v is not None}

    def to_dict(self, *, requests: bool = False) -> dict[str, Any]:
        """A JSON-ready mapping; per-request records only with ``requests``."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "records":
                continue
            value = getattr(self, f.name)
            out[f.name] = dict(value) if f.name == "errors" else value
        out["error_examples"] = list(self.error_examples)
        if requests:
            out["requests"] = [r.to_dict() for r in self.records]
        return out


def summarize(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, median, p90 and p99 of seconds, in milliseconds (all ``None`` when empty)."""
    if not values:
        return dict.fromkeys(LATENCY_STATS)
    return {
        "mean": 1000.0 * math.fsum(values) / len(values),
        "median": 1000.0 * percentile(values, 50),
        "p90": 1000.0 * percentile(values, 90),
        "p99": 1000.0 * percentile(values, 99),
    }


def acceptance_from_records(
    records: Iterable[RequestRecord], server_api: ServerApi | None = None
) -> Acceptance | None:
    """Acceptance from completed requests' own statistics, as ``server_api`` reads them
    (``None``: SGLang's); ``None`` when none reported it."""
    api = server_api or server_api_for()
    return api.of_requests((r.completion_tokens, r.draft_stats()) for r in records if r.ok)


def compute_result(
    records: Sequence[RequestRecord],
    *,
    url: str,
    api: str,
    acceptance: Acceptance | None = None,
    server_api: ServerApi | None = None,
    limits: RequestLimits | None = None,
) -> BenchmarkResult:
    """The run's figures from its request records (warm-up records are left out).

    ``limits``: the per-request limits goodput counts against (no goodput without them).

    Acceptance comes from the requests' own statistics as ``server_api`` reads them (``None``:
    SGLang's), else ``acceptance`` (the server's figure, read around the run).

    Raises:
        BenchmarkError: every measured request failed (the message gives the first errors).
    """
    measured = [r for r in records if not r.warmup]
    done = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    examples = tuple(f"{r.error}: {r.error_detail or ''}".rstrip(": ") for r in failed[:5])
    if not done:
        reasons = Counter(r.error for r in failed)
        only_connect = set(reasons) == {"connect"}
        raise BenchmarkError(
            f"all {len(measured)} requests failed ("
            + ", ".join(f"{n} {reason}" for reason, n in reasons.most_common())
            + "); first: "
            + "; ".join(examples[:3]),
            url=url,
            hint=(
                "is the server running and listening at this URL?"
                if only_connect
                else "check the server log; `autotune bench run --url URL --num-prompts 1` "
                "shows a single request's outcome"
            ),
        )
    starts = [r.start for r in measured if r.start is not None]
    ends = [e for e in (r.end for r in measured) if e is not None]
    duration = max(ends) - min(starts) if starts and ends else 0.0
    if duration <= 0:
        duration = max(r.e2e or 0.0 for r in done) or 1e-9
    total_in = sum(r.prompt_tokens for r in done)
    total_out = sum(r.completion_tokens for r in done)
    families: dict[str, list[float]] = {
        "ttft": [r.ttft for r in done if r.ttft is not None],
        "tpot": [t for t in (r.tpot() for r in done) if t is not None],
        "itl": [gap for r in done for gap in r.itls()],
        "e2e": [r.e2e for r in done if r.e2e is not None],
    }
    latency: dict[str, float | None] = {}
    for family, values in families.items():
        for stat, value in summarize(values).items():
            latency[f"{family}_{stat}_ms"] = value
    acc = acceptance_from_records(done, server_api) or acceptance or Acceptance()
    return BenchmarkResult(
        url=url,
        api=api,
        completed=len(done),
        failed=len(failed),
        duration_s=duration,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        output_tok_s=total_out / duration,
        total_tok_s=(total_in + total_out) / duration,
        request_throughput=len(done) / duration,
        concurrency=math.fsum(families["e2e"]) / duration,
        accept_length=acc.accept_length,
        accept_rate=acc.accept_rate,
        acceptance_source=acc.source,
        errors=dict(Counter(r.error or "" for r in failed)),
        error_examples=examples,
        warmup_failed=sum(1 for r in records if r.warmup and not r.ok),
        records=tuple(records),
        goodput=None
        if limits is None
        else limits.goodput(((r.ttft, r.tpot(), r.e2e) for r in done), duration),
        ttft_mean_ms=latency["ttft_mean_ms"],
        ttft_median_ms=latency["ttft_median_ms"],
        ttft_p90_ms=latency["ttft_p90_ms"],
        ttft_p99_ms=latency["ttft_p99_ms"],
        tpot_mean_ms=latency["tpot_mean_ms"],
        tpot_median_ms=latency["tpot_median_ms"],
        tpot_p90_ms=latency["tpot_p90_ms"],
        tpot_p99_ms=latency["tpot_p99_ms"],
        itl_mean_ms=latency["itl_mean_ms"],
        itl_median_ms=latency["itl_median_ms"],
        itl_p90_ms=latency["itl_p90_ms"],
        itl_p99_ms=latency["itl_p99_ms"],
        e2e_mean_ms=latency["e2e_mean_ms"],
        e2e_median_ms=latency["e2e_median_ms"],
        e2e_p90_ms=latency["e2e_p90_ms"],
        e2e_p99_ms=latency["e2e_p99_ms"],
    )
