"""SGLang's server as the tuner meets it over HTTP: readiness, and how it reports acceptance.

Readiness: SGLang logs :data:`READY_LINE` once its own warm-up request succeeded; the tuner then
asks ``GET /health_generate`` (a one-token generation: 200 once the scheduler serves) and
``GET /get_model_info`` (a JSON object; wants the ``--api-key`` where one is set).

Acceptance of a run (``acceptance_source``):

- ``request_meta_info``: from the completed requests' own ``meta_info``: accept length is
  ``sum(completion_tokens) / sum(spec_verify_ct)`` and accept rate ``sum(spec_num_correct_drafts)
  / sum(spec_num_proposed_drafts)`` (or ``spec_accept_rate`` weighted by verify passes).
- ``server_info_diff``: the difference of cumulative acceptance counters in ``/get_server_info``
  ``internal_states`` before and after the run, where the server exposes counters.
- ``server_info_lifetime``: SGLang's ``avg_spec_accept_length``, the server's lifetime average
  (it includes the server's own warm-up, this benchmark's warm-up and any earlier run). SGLang
  releases to date expose only this ratio, so it cannot be diffed.
- ``metrics_gauge``: the ``sglang:spec_accept_length`` / ``spec_accept_rate`` gauges of
  ``/metrics``, the window of the server's most recent decode log line.
- ``none``: nothing measured it (no speculative decoding, or a server that reports none).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from autotune.engines._prometheus import sample_values
from autotune.engines._serving import NO_DRAFT_STATS, Acceptance, DraftStats, ServerApi
from autotune.server import Probe, Readiness

#: SGLang's own ready line, printed after the warm-up request succeeded.
READY_LINE = "The server is fired up and ready to roll!"

#: How an SGLang server (and the simulated one, which speaks the same) says it is ready.
READINESS = Readiness(
    ready_lines=(READY_LINE,),
    probes=(
        Probe("/health_generate"),
        Probe("/get_model_info", json_object=True, needs_key=True),
    ),
)

SERVER_INFO = "/get_server_info"
METRICS = "/metrics"

#: The speculative statistics of one request in its ``meta_info``.
_SPEC_KEYS = (
    "spec_verify_ct",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
)
#: Cumulative (accepted tokens, verify passes) counters a server may expose in internal_states.
_COUNTER_PAIRS = (
    ("spec_total_num_accept_tokens", "spec_total_num_forward_ct"),
    ("cum_spec_accept_length", "cum_spec_accept_count"),
)


class SGLangServerApi(ServerApi):
    """SGLang's HTTP API: ``/flush_cache``, ``/get_server_info``, ``/metrics``, ``meta_info``."""

    flush_cache_path = "/flush_cache"
    stats_before = (SERVER_INFO,)
    stats_after = (SERVER_INFO, METRICS)

    def from_meta_info(self, meta: Mapping[str, Any]) -> DraftStats:
        """``spec_verify_ct``, ``spec_accept_length``, ``spec_accept_rate``,
        ``spec_num_correct_drafts`` and ``spec_num_proposed_drafts`` where they are numbers."""
        if not any(key in meta for key in _SPEC_KEYS):
            return NO_DRAFT_STATS
        verify = _number(meta.get("spec_verify_ct"))
        correct = _number(meta.get("spec_num_correct_drafts"))
        proposed = _number(meta.get("spec_num_proposed_drafts"))
        return DraftStats(
            verify_ct=None if verify is None else int(verify),
            accept_length=_number(meta.get("spec_accept_length")),
            accept_rate=_number(meta.get("spec_accept_rate")),
            num_correct_drafts=None if correct is None else int(correct),
            num_proposed_drafts=None if proposed is None else int(proposed),
        )

    def from_server(
        self, before: Mapping[str, str | None], after: Mapping[str, str | None]
    ) -> Acceptance | None:
        return acceptance_from_server(
            _json_object(before.get(SERVER_INFO)),
            _json_object(after.get(SERVER_INFO)),
            after.get(METRICS),
        )


#: The one :class:`SGLangServerApi` (it holds no state).
SGLANG_API = SGLangServerApi()


def acceptance_from_server(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    metrics_text: str | None = None,
) -> Acceptance | None:
    """Acceptance from the server's own statistics (see the module docstring for the order).

    ``before`` and ``after`` are ``/get_server_info`` bodies taken around the run (either may be
    ``None``); ``metrics_text`` is the ``/metrics`` exposition taken after it.
    """
    states_after = _internal_states(after)
    states_before = _internal_states(before)
    for accepted_key, count_key in _COUNTER_PAIRS:
        a1, c1 = _sum_key(states_after, accepted_key), _sum_key(states_after, count_key)
        a0, c0 = _sum_key(states_before, accepted_key), _sum_key(states_before, count_key)
        if a1 is None or c1 is None or a0 is None or c0 is None:
            continue
        if c1 > c0 and a1 >= a0:
            return Acceptance((a1 - a0) / (c1 - c0), None, "server_info_diff")
    lifetime = [v for v in (_number(s.get("avg_spec_accept_length")) for s in states_after) if v]
    if lifetime and (length := math.fsum(lifetime) / len(lifetime)) >= 1.0:
        return Acceptance(length, None, "server_info_lifetime")
    if metrics_text:
        length_g = _gauge(metrics_text, "sglang:spec_accept_length")
        rate_g = _gauge(metrics_text, "sglang:spec_accept_rate")
        if length_g is not None and length_g >= 1.0:
            rate = rate_g if rate_g is not None and 0.0 <= rate_g <= 1.0 else None
            return Acceptance(length_g, rate, "metrics_gauge")
    return None


def _json_object(text: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _internal_states(info: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if not isinstance(info, Mapping):
        return []
    decode = info.get("decode")
    if isinstance(decode, list) and decode and isinstance(decode[0], Mapping):
        info = decode[0]  # prefill/decode disaggregation: the decode server decodes
    states = info.get("internal_states")
    if isinstance(states, Mapping):
        states = [states]
    if not isinstance(states, list):
        return []
    return [s for s in states if isinstance(s, Mapping)]


def _number(raw: Any) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    value = float(raw)
    return None if math.isnan(value) or math.isinf(value) else value


def _sum_key(states: list[Mapping[str, Any]], key: str) -> float | None:
    values = [_number(s.get(key)) for s in states]
    if not values or any(v is None for v in values):
        return None
    return math.fsum(v for v in values if v is not None)


def _gauge(text: str, name: str) -> float | None:
    """Mean of a gauge's samples (over label sets) in a Prometheus text exposition."""
    samples = sample_values(text, (name,)).get(name, [])
    return math.fsum(samples) / len(samples) if samples else None
