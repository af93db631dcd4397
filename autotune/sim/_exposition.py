"""The simulated server's ``/metrics``: SGLang's ``sglang:`` or vLLM's ``vllm:`` metrics.

Gauges and counters come from the engine's statistics; the latency histograms (time to first
token, inter-token latency, end-to-end latency) are observed by the serving loop as it delivers
tokens, with the engine's bucket bounds. Each server's metrics are one collector in a
``prometheus_client`` registry of their own, rendered by ``generate_latest`` in the Prometheus
text format 0.0.4.

:class:`ServerMetrics` publishes SGLang's names (labels ``engine_type``, ``model_name``,
``pp_rank``, ``tp_rank``); :class:`VLLMMetrics` vLLM's (labels ``engine`` and ``model_name``),
among them the speculative counters ``vllm:spec_decode_num_drafts_total`` (one draft chain per
request per verify pass), ``vllm:spec_decode_num_draft_tokens_total`` (the chain's tokens) and
``vllm:spec_decode_num_accepted_tokens_total``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from autotune.sim._engine import EngineStats

_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06,
                0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8)  # fmt: skip
_E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800)
#: vLLM's bucket bounds (its ``v1/metrics/loggers.py``).
_VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                      2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_VLLM_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                     5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
_VLLM_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                     50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


@dataclass
class Histogram:
    """A Prometheus histogram's state: counts per bucket, sum and count."""

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

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, observations at or below it)`` per bound, ``+Inf`` last."""
        counts = self.counts or [0] * (len(self.buckets) + 1)
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*self.buckets, None), counts, strict=True):
            running += n
            out.append(("+Inf" if bound is None else repr(float(bound)), float(running)))
        return out


class ServerMetrics:
    """One server's metrics as a ``prometheus_client`` collector: SGLang's ``sglang:`` names.

    The serving loop observes the latency histograms (:attr:`ttft`, :attr:`itl`, :attr:`e2e`);
    :meth:`render` reads the engine's statistics and renders the server's registry.
    """

    prefix = "sglang:"
    label_names: tuple[str, ...] = ("engine_type", "model_name", "pp_rank", "tp_rank")
    bounds: tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]] = (
        _TTFT_BUCKETS,
        _ITL_BUCKETS,
        _E2E_BUCKETS,
    )

    def __init__(self, *, speculative: bool, num_draft_tokens: int) -> None:
        self.speculative = speculative
        self.num_draft_tokens = num_draft_tokens
        ttft, itl, e2e = self.bounds
        self.ttft = Histogram(ttft)
        self.itl = Histogram(itl)
        self.e2e = Histogram(e2e)
        self._stats = EngineStats()
        self._model = ""
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def accept_rate(self, s: EngineStats) -> float:
        """Accepted drafts over proposed drafts, over the server's lifetime."""
        proposed = s.verify_ct_total * max(0, self.num_draft_tokens - 1)
        return s.accepted_drafts_total / proposed if proposed else 0.0

    def render(self, s: EngineStats, model_name: str) -> str:
        """The ``/metrics`` text of the server's registry, with ``s`` as the engine's state."""
        self._stats, self._model = s, model_name
        text: bytes = generate_latest(self.registry)
        return text.decode()

    def label_values(self) -> list[str]:
        return ["unified", self._model, "0", "0"]

    # --- the collector ---------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        """The metric families of the registry (the ``prometheus_client`` collector protocol)."""
        yield from self.families(self._stats)
        labels = list(self.label_names)
        for name, help_text, hist in self.histograms():
            family = HistogramMetricFamily(self.prefix + name, help_text, labels=labels)
            family.add_metric(self.label_values(), hist.cumulative(), hist.total)
            yield family

    def gauge(self, name: str, help_text: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(self.prefix + name, help_text, labels=list(self.label_names))
        family.add_metric(self.label_values(), float(value))
        return family

    def counter(self, name: str, help_text: str, value: float) -> CounterMetricFamily:
        """A counter; ``name`` without its ``_total`` suffix, which the exposition adds."""
        family = CounterMetricFamily(self.prefix + name, help_text, labels=list(self.label_names))
        family.add_metric(self.label_values(), float(value))
        return family

    def families(self, s: EngineStats) -> Iterator[Metric]:
        """SGLang's gauges and counters."""
        yield self.gauge("num_running_reqs", "The number of running requests.", s.running)
        yield self.gauge("num_used_tokens", "The number of used tokens.", s.used_tokens)
        yield self.gauge("token_usage", "The token usage.", s.token_usage)
        yield self.gauge(
            "gen_throughput", "The generation throughput (token/s).", s.last_gen_throughput
        )
        yield self.gauge("num_queue_reqs", "The number of requests in the waiting queue.", s.queued)
        yield self.gauge("cache_hit_rate", "The prefix cache hit rate.", 0.0)
        yield self.gauge(
            "max_total_num_tokens", "Maximum total number of tokens.", s.max_total_num_tokens
        )
        yield self.gauge(
            "spec_accept_length",
            "The average acceptance length of speculative decoding.",
            s.avg_spec_accept_length if self.speculative else 0.0,
        )
        yield self.gauge(
            "spec_accept_rate",
            "The average acceptance rate of speculative decoding.",
            self.accept_rate(s) if self.speculative else 0.0,
        )
        yield self.counter(
            "prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_total
        )
        yield self.counter(
            "generation_tokens", "Number of generation tokens processed.", s.generation_tokens_total
        )
        yield self.counter("num_requests", "Number of requests processed.", s.num_requests_total)

    def histograms(self) -> tuple[tuple[str, str, Histogram], ...]:
        return (
            ("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
             self.ttft),
            ("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
             self.itl),
            ("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
             self.e2e),
        )  # fmt: skip


class VLLMMetrics(ServerMetrics):
    """vLLM's ``vllm:`` names: requests, KV-cache usage, tokens, latencies, speculative counters.

    ``num_draft_tokens`` is the chain length (``num_speculative_tokens``): every verify pass of a
    request is one draft of that many tokens.
    """

    prefix = "vllm:"
    label_names = ("engine", "model_name")
    bounds = (_VLLM_TTFT_BUCKETS, _VLLM_ITL_BUCKETS, _VLLM_E2E_BUCKETS)

    def label_values(self) -> list[str]:
        return ["0", self._model]

    def families(self, s: EngineStats) -> Iterator[Metric]:
        yield self.gauge(
            "num_requests_running", "Number of requests in model execution batches.", s.running
        )
        yield self.gauge(
            "num_requests_waiting", "Number of requests waiting to be processed.", s.queued
        )
        yield self.gauge(
            "kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.token_usage
        )
        yield self.counter(
            "prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_total
        )
        yield self.counter(
            "generation_tokens", "Number of generation tokens processed.", s.generation_tokens_total
        )
        yield self.counter(
            "request_success", "Count of successfully processed requests.", s.num_requests_total
        )
        if not self.speculative:
            return
        yield self.counter(
            "spec_decode_num_drafts", "Number of spec decoding drafts.", s.verify_ct_total
        )
        yield self.counter(
            "spec_decode_num_draft_tokens",
            "Number of draft tokens.",
            s.verify_ct_total * self.num_draft_tokens,
        )
        yield self.counter(
            "spec_decode_num_accepted_tokens", "Number of accepted tokens.", s.accepted_drafts_total
        )

    def histograms(self) -> tuple[tuple[str, str, Histogram], ...]:
        return (
            ("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
             self.ttft),
            ("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
             self.itl),
            ("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
             self.e2e),
        )  # fmt: skip
