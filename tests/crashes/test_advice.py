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

from ._data import DATA, ISSUES, REAL, UNSEEN, classify_file, classify_text


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


def test_kv_pool_advice_points_the_way_the_failure_does() -> None:
    # a CUDA OOM inside the pool's allocation: the pool sized from the fraction was too big
    allocated = classify_file(ISSUES / "g01_kv_pool_cuda_oom_create_buffers_docker.log")
    assert allocated.category == "oom_kv_pool"
    assert allocated.advice.startswith("lower --mem-fraction-static")
    # no room left for any pool: the fraction must grow
    empty = classify_file(ISSUES / "g07_profiled_kv_negative_dp_ranks.log")
    assert empty.category == "oom_kv_pool"
    assert empty.advice.startswith("raise --mem-fraction-static") and "empty" in empty.advice


def test_kv_pool_advice_uses_the_fraction_sglang_suggests() -> None:
    text = (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under\n"
        "--mem-fraction-static=0.7. Raise --mem-fraction-static above 0.773\n"
        "(minimum viable = 1 - available/pre = 0.7725). If using speculative decoding, draft "
        "weights are now counted.\n"
    )
    advice = classify_text(text).advice
    assert advice.startswith("raise --mem-fraction-static above 0.773")
    assert "0.7725" in advice and "current value 0.7" in advice
    # a suggestion at or below the value in use: raising the fraction is not the way out
    below = text.replace("0.773", "0.66").replace("0.7725", "0.6590")
    assert classify_text(below).advice.startswith("raising --mem-fraction-static will not help")
    cut = classify_file(ISSUES / "g36_kv_budget_valueerror_at_profile.log").advice
    assert cut.startswith("raise --mem-fraction-static") and "current value 0.9" in cut


def test_kernel_library_architecture_advice() -> None:
    advice = classify_file(ISSUES / "g04_flashinfer_tllmgen_unsupported_arch.log").advice
    assert "kernel library" in advice and "--attention-backend" in advice
    symm_mem = classify_file(UNSEEN / "u07_torch_symm_mem_sm120_slurm.log").advice
    assert "kernel library" not in symm_mem and "--enable-torch-symm-mem" in symm_mem


def test_slots_running_out_while_serving_advise_the_request_limit_not_less_memory() -> None:
    cut = (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/s/sglang/srt/managers/scheduler.py", line 1, in run_batch\n'
        "    batch.prepare_for_extend()\n"
        '  File "/s/sglang/srt/mem_cache/common.py", line 2, in alloc_for_extend\n'
    )
    tokens = classify_text(cut)
    assert tokens.category == "oom_runtime"
    assert tokens.advice.startswith("lower --max-running-requests or raise --mem-fraction-static")
    requests = classify_text(
        "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for "
        "`--max-running-requests`. self.req_to_token_pool.available_size()=1, num_reqs=2,\n"
    )
    assert requests.category == "oom_runtime"
    assert requests.advice.startswith("lower --max-running-requests:")
    assert "lower --mem-fraction-static" not in requests.advice
    activations = classify_text(
        "Traceback (most recent call last):\n"
        '  File "/s/sglang/srt/managers/scheduler.py", line 1, in run_batch\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    assert activations.advice.startswith("lower --mem-fraction-static")


def test_a_capture_failing_in_custom_all_reduce_advises_turning_it_off() -> None:
    for name in (
        "h24_custom_allreduce_ipc_meta_invalid_argument.log",
        "h25_capture_failed_runtime_check_memory_saver.log",
        "h26_register_graph_buffers_frame_only.log",
    ):
        verdict = classify_file(DATA / "heldout" / name)
        assert verdict.category == "graph_capture_other"
        assert "--disable-custom-all-reduce" in verdict.advice, name
    # another capture failure keeps the general advice
    other = classify_text("Exception: Capture cuda graph failed: mat_a must be bf16\n")
    assert "--disable-custom-all-reduce" not in other.advice
