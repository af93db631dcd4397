"""vLLM's acceptance from its /metrics counters, read before and after a run."""

from __future__ import annotations

import pytest

from autotune.engines.vllm import READINESS, VLLM_API, acceptance_from_metrics
from autotune.engines.vllm._serving import counters


def exposition(drafts: float, proposed: float, accepted: float, engines: int = 1) -> str:
    """A /metrics text in Prometheus' exposition format with vLLM's counter names."""
    out = [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
    ]
    for engine in range(engines):
        labels = f'{{engine="{engine}",model_name="llama"}}'
        out += [
            f"vllm:spec_decode_num_drafts_total{labels} {drafts}",
            f"vllm:spec_decode_num_draft_tokens_total{labels} {proposed}",
            f"vllm:spec_decode_num_accepted_tokens_total{labels} {accepted}",
            # per-position counters share the prefix and must not be summed in
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{labels[:-1]},position="0"}} 9e9',
            f"vllm:spec_decode_num_drafts_created{labels} 1.7e9",
        ]
    return "\n".join(out) + "\n"


def test_acceptance_is_this_runs_difference() -> None:
    # the server's warm-up drafted 10 chains before the run; the run drafts 50 of 4 tokens
    before = exposition(10, 40, 20)
    after = exposition(60, 240, 145)
    acceptance = acceptance_from_metrics(before, after)
    assert acceptance is not None and acceptance.source == "metrics_diff"
    assert acceptance.accept_length == pytest.approx(1 + 125 / 50)
    assert acceptance.accept_rate == pytest.approx(125 / 200)


def test_label_sets_are_summed() -> None:
    assert counters(exposition(3, 9, 6, engines=2)) == {
        "vllm:spec_decode_num_drafts_total": 6.0,
        "vllm:spec_decode_num_draft_tokens_total": 18.0,
        "vllm:spec_decode_num_accepted_tokens_total": 12.0,
    }


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (exposition(5, 20, 10), exposition(5, 20, 10)),  # nothing drafted in between
        (exposition(500, 2000, 900), exposition(5, 20, 10)),  # a restarted server
        (None, exposition(5, 20, 10)),  # no answer before the run
        ("vllm:num_requests_running 0\n", "vllm:num_requests_running 3\n"),  # no speculation
    ],
)
def test_no_figure_where_the_counters_tell_nothing(before: str | None, after: str) -> None:
    assert acceptance_from_metrics(before, after) is None


def test_the_api_reads_metrics_around_the_run_and_probes_vllms_routes() -> None:
    assert VLLM_API.stats_before == ("/metrics",) and VLLM_API.stats_after == ("/metrics",)
    assert VLLM_API.flush_cache_path is None
    result = VLLM_API.from_server(
        {"/metrics": exposition(0, 0, 0)}, {"/metrics": exposition(10, 30, 15)}
    )
    assert result is not None and result.accept_length == pytest.approx(2.5)
    assert [p.path for p in READINESS.probes] == ["/health", "/v1/models"]
    assert READINESS.is_ready_line("INFO:     Application startup complete.")
    assert not READINESS.is_ready_line("INFO:     Waiting for application startup.")
