"""vLLM's server as the tuner meets it over HTTP: readiness, and how it reports acceptance.

Readiness: the OpenAI-compatible server logs uvicorn's ``Application startup complete.`` once it
serves; the tuner then asks ``GET /health`` (200 once the engine core is alive) and
``GET /v1/models`` (a JSON object; wants the ``--api-key`` where one is set).

Acceptance of a run (``metrics_diff``): vLLM counts speculative work in three Prometheus
counters of ``/metrics``: ``vllm:spec_decode_num_drafts_total`` (draft chains proposed),
``vllm:spec_decode_num_draft_tokens_total`` (tokens proposed) and
``vllm:spec_decode_num_accepted_tokens_total`` (tokens accepted), summed over their label sets
(one per engine). Read before and after the measured requests, their differences give this
run's accept length ``1 + accepted / drafts`` (each verify pass also yields one token of its
own) and accept rate ``accepted / draft tokens``. vLLM's answers carry no per-request figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.engines._prometheus import sample_values
from autotune.engines._serving import NO_DRAFT_STATS, Acceptance, DraftStats, ServerApi
from autotune.server import Probe, Readiness

#: uvicorn's line once vLLM's API server serves.
READY_LINE = "Application startup complete."

#: How a vLLM server says it is ready.
READINESS = Readiness(
    ready_lines=(READY_LINE,),
    probes=(Probe("/health"), Probe("/v1/models", json_object=True, needs_key=True)),
)

METRICS = "/metrics"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"


class VLLMServerApi(ServerApi):
    """vLLM's HTTP API: ``/metrics`` before and after a run; no cache-flush route by default
    (``/reset_prefix_cache`` exists only in its development mode)."""

    flush_cache_path = None
    stats_before = (METRICS,)
    stats_after = (METRICS,)

    def from_meta_info(self, meta: Mapping[str, Any]) -> DraftStats:
        """vLLM's streamed answers report no speculative statistics."""
        return NO_DRAFT_STATS

    def from_server(
        self, before: Mapping[str, str | None], after: Mapping[str, str | None]
    ) -> Acceptance | None:
        return acceptance_from_metrics(before.get(METRICS), after.get(METRICS))


#: The one :class:`VLLMServerApi` (it holds no state).
VLLM_API = VLLMServerApi()


def acceptance_from_metrics(before: str | None, after: str | None) -> Acceptance | None:
    """Acceptance of a run from ``/metrics`` texts taken before and after it (see the module
    docstring); ``None`` when either is missing or no draft was proposed in between."""
    if not before or not after:
        return None
    old, new = counters(before), counters(after)
    if any(name not in old or name not in new for name in (DRAFTS, ACCEPTED)):
        return None
    drafts = new[DRAFTS] - old[DRAFTS]
    accepted = new[ACCEPTED] - old[ACCEPTED]
    if drafts <= 0 or accepted < 0:
        return None  # nothing drafted in between, or a restarted server's counters
    rate: float | None = None
    if DRAFT_TOKENS in old and DRAFT_TOKENS in new:
        proposed = new[DRAFT_TOKENS] - old[DRAFT_TOKENS]
        if proposed > 0 and accepted <= proposed:
            rate = accepted / proposed
    return Acceptance(1.0 + accepted / drafts, rate, "metrics_diff")


def counters(text: str) -> dict[str, float]:
    """The speculative counters of a Prometheus text exposition (read with
    ``prometheus_client``'s parser), each summed over its label sets."""
    found = sample_values(text, (DRAFTS, DRAFT_TOKENS, ACCEPTED))
    return {name: math.fsum(values) for name, values in found.items()}
