"""SGLang's HTTP API as the benchmark reads it: ``meta_info`` and the server's statistics."""

from __future__ import annotations

import json

import pytest

from autotune.engines import NO_DRAFT_STATS, Acceptance, DraftStats
from autotune.engines.sglang import SGLANG_API, acceptance_from_server


def test_meta_info_statistics_are_read_where_they_are_numbers() -> None:
    meta = {
        "completion_tokens": 9,
        "spec_verify_ct": 3,
        "spec_accept_length": 3.0,
        "spec_accept_rate": "high",
        "spec_num_correct_drafts": True,
        "spec_num_proposed_drafts": 12.0,
    }
    assert SGLANG_API.from_meta_info(meta) == DraftStats(
        verify_ct=3, accept_length=3.0, num_proposed_drafts=12
    )
    assert SGLANG_API.from_meta_info({"completion_tokens": 4}) is NO_DRAFT_STATS


def test_later_chunks_update_what_they_report() -> None:
    first = SGLANG_API.from_meta_info({"spec_verify_ct": 1, "spec_accept_rate": 0.5})
    later = first.updated(SGLANG_API.from_meta_info({"spec_verify_ct": 4}))
    assert later == DraftStats(verify_ct=4, accept_rate=0.5)


def test_statistics_routes_are_read_by_path() -> None:
    assert SGLANG_API.flush_cache_path == "/flush_cache"
    assert SGLANG_API.stats_before == ("/get_server_info",)
    assert SGLANG_API.stats_after == ("/get_server_info", "/metrics")
    before = json.dumps({"internal_states": [{"cum_spec_accept_length": 10,
                                              "cum_spec_accept_count": 5}]})  # fmt: skip
    after = json.dumps({"internal_states": [{"cum_spec_accept_length": 40,
                                             "cum_spec_accept_count": 15}]})  # fmt: skip
    acc = SGLANG_API.from_server(
        {"/get_server_info": before}, {"/get_server_info": after, "/metrics": None}
    )
    assert acc == Acceptance(pytest.approx(3.0), None, "server_info_diff")
    assert SGLANG_API.from_server({"/get_server_info": "<html>"}, {}) is None


def test_server_counters_are_diffed() -> None:
    before = {"internal_states": [{"spec_total_num_accept_tokens": 100,
                                   "spec_total_num_forward_ct": 50,
                                   "avg_spec_accept_length": 2.0}]}  # fmt: skip
    after = {"internal_states": [{"spec_total_num_accept_tokens": 400,
                                  "spec_total_num_forward_ct": 150,
                                  "avg_spec_accept_length": 2.67}]}  # fmt: skip
    acc = acceptance_from_server(before, after)
    assert acc == Acceptance(pytest.approx(3.0), None, "server_info_diff")


def test_lifetime_average_is_labelled_as_such() -> None:
    after = {"internal_states": [{"avg_spec_accept_length": 2.0}, {"avg_spec_accept_length": 3.0}]}
    acc = acceptance_from_server({"internal_states": [{}]}, after)
    assert acc == Acceptance(2.5, None, "server_info_lifetime")


def test_disaggregated_server_info_reads_the_decode_side() -> None:
    after = {"decode": [{"internal_states": [{"avg_spec_accept_length": 3.25}]}]}
    acc = acceptance_from_server(None, after)
    assert acc is not None and acc.accept_length == 3.25


def test_metrics_gauge_when_server_info_has_nothing() -> None:
    text = (
        "# TYPE sglang:spec_accept_length gauge\n"
        'sglang:spec_accept_length{tp_rank="0"} 2.0\n'
        'sglang:spec_accept_length{tp_rank="1"} 4.0 1700000000\n'
        'sglang:spec_accept_length_total{tp_rank="0"} 99\n'
        "sglang:spec_accept_rate 0.25\n"
    )
    acc = acceptance_from_server(None, {"internal_states": [{}]}, text)
    assert acc == Acceptance(3.0, 0.25, "metrics_gauge")


def test_no_acceptance_anywhere() -> None:
    text = "sglang:spec_accept_length 0.0\n"  # a server without speculation reports 0
    assert acceptance_from_server(None, {"internal_states": [{}]}, text) is None
    assert acceptance_from_server(None, None, None) is None
