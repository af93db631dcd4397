"""The simulated server's ``/metrics``: SGLang's ``sglang:`` gauges, counters and histograms.

Gauges and counters come from the engine's statistics; the latency histograms (time to first
token, inter-token latency, end-to-end latency) are observed by the serving loop as it delivers
tokens, with SGLang's bucket bounds. The text follows the Prometheus exposition format 0.0.4.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from autotune.sim._engine import EngineStats

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


class ServerMetrics:
    """The latency histograms of one server and the text of its ``/metrics`` endpoint."""

    def __init__(self, *, speculative: bool, num_draft_tokens: int) -> None:
        self.speculative = speculative
        self.num_draft_tokens = num_draft_tokens
        self.ttft = Histogram(_TTFT_BUCKETS)
        self.itl = Histogram(_ITL_BUCKETS)
        self.e2e = Histogram(_E2E_BUCKETS)

    def accept_rate(self, s: EngineStats) -> float:
        """Accepted drafts over proposed drafts, over the server's lifetime."""
        proposed = s.verify_ct_total * max(0, self.num_draft_tokens - 1)
        return s.accepted_drafts_total / proposed if proposed else 0.0

    def render(self, s: EngineStats, model_name: str) -> str:
        """Prometheus text exposition of SGLang's ``sglang:`` metrics."""
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
                self.accept_rate(s) if self.speculative else 0.0,
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


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
