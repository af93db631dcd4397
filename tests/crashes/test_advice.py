"""Advice worded from the log's own evidence."""

from __future__ import annotations

from autotune.crashes import (
    CRASH_CATEGORIES,
    HEALTHY_CATEGORIES,
    TAG_DRAFT,
    TAG_LOADING,
    AdviceContext,
)
from autotune.engines.sglang._crash_advice import advise

from ._data import REAL, UNSEEN, classify_file, classify_text


def test_every_category_has_advice() -> None:
    texts = {advise(AdviceContext(c)) for c in CRASH_CATEGORIES + HEALTHY_CATEGORIES}
    assert len(texts) == len(CRASH_CATEGORIES) + len(HEALTHY_CATEGORIES)
    assert "no advice" in advise(AdviceContext("timeout"))


def test_kv_pool_advice_carries_the_value_the_log_shows() -> None:
    shown = classify_file(UNSEEN / "u01_kv_pool_docker_current_value.log").advice
    assert shown.startswith("raise --mem-fraction-static")
    assert "current value 0.76" in shown
    dumped = classify_file(UNSEEN / "u20_kv_pool_old_ansi_crlf.log").advice
    assert "current value 0.88" in dumped  # from the ServerArgs dump at the top
    assert "0." not in classify_file(REAL / "05_oom_kv_pool.log").advice


def test_graph_and_runtime_oom_advice() -> None:
    draft = classify_file(UNSEEN / "u03_eagle_draft_graph_oom.log").advice
    assert "--cuda-graph-max-bs" in draft and "draft" in draft
    assert "draft" not in advise(AdviceContext("oom_cuda_graph"))
    assert "draft" in advise(AdviceContext("oom_cuda_graph", tags=frozenset({TAG_DRAFT})))
    loading = advise(AdviceContext("oom_runtime", tags=frozenset({TAG_LOADING})))
    assert "--tp-size" in loading
    kv = classify_text("RuntimeError: Decode out of memory. Try to lower your batch size.\n")
    assert "--max-running-requests" in kv.advice


def test_bad_args_advice_names_the_flag() -> None:
    ambiguous = classify_file(UNSEEN / "u09_argparse_ambiguous.log").advice
    assert "--cuda-graph-max-bs " in ambiguous and "--cuda-graph-max-bs-decode" in ambiguous
    unknown = classify_file(REAL / "14_bad_args.log").advice
    assert "--enable_metrics" in unknown
    choice = classify_file(UNSEEN / "u10_argparse_invalid_choice_slurm.log").advice
    assert "--attention-backend" in choice and "fa5" in choice


def test_a_port_in_use_is_its_own_category_with_its_advice() -> None:
    verdict = classify_file(UNSEEN / "u22_port_in_use.log")
    assert (verdict.category, verdict.line_number) == ("port_in_use", 4)
    assert "port is already in use" in verdict.advice


def test_other_crash_advice_for_known_non_tuning_causes() -> None:
    assert "host" in classify_file(UNSEEN / "u25_host_oom_slurm.log").advice
    assert "architecture" in classify_file(REAL / "20_other_crash.log").advice
    assert "symm" in classify_file(UNSEEN / "u07_torch_symm_mem_sm120_slurm.log").advice
    assert "loading weights" in classify_file(UNSEEN / "u16_loading_only.log").advice
