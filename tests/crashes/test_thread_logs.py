"""The corpus of issue #43 (``data/threads``): real logs from public threads, split by a hash of
their thread's address before any rule was written, read by each log's own engine; and the
direction of every category's advice, checked on its ``moves`` (the knobs it moves and which way).

The held-out half was measured once, on the rules written against the dev half (README.md):
its figure and misses are pinned here so that a later change shows up.
"""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pytest

from autotune import crashes
from autotune.crashes import CRASH_CATEGORIES, HEALTHY_CATEGORIES, UNKNOWN_CRASH, AdviceContext
from autotune.engines import EngineSpec, create_engine

from ._data import reads_as

pytestmark = pytest.mark.timeout(60)

THREADS = Path(__file__).resolve().parent / "data" / "threads"
ROWS = list(csv.DictReader((THREADS / "LABELS.tsv").open(encoding="utf-8"), delimiter="\t"))
RULES = {kind: create_engine(EngineSpec(kind=kind)).crash_rules() for kind in ("sglang", "vllm")}
MEMORY = {"mem_fraction_static", "gpu_memory_utilization", "cuda_graph_max_bs"}

#: Misses of the held-out half at its one measurement (file -> read as), less t01, t02, t25, t27
#: and t57: rules for their lines (SGLang's "Piecewise CUDA Graph failed", an assert naming the SMs
#: a kernel runs on, SGLang's retraction of requests while serving, Gloo failing to connect the
#: ranks) were written after that measurement had shown them, so they count with the dev side
#: since (threads2/README.md).
HELD_OUT_MISSES = {
    "t03_qwen3vl_pcg_capture_stream_assertion.log": "unknown_crash",
    "t04_piecewise_v055_model_runner_frames_cut.log": "unknown_crash",
    "t05_qwen2_capture_all_gather_frames_cut.log": "nccl_error",
    "t06_vllm_initialize_cache_raise_if_invalid_cut.log": "unknown_crash",
    "t16_r1_four_nodes_load_weight_lines_only.log": "starting",
    "t24_runpod_engine_init_oom_reverse_order_capture.log": "oom_runtime",
    "t26_5090_fp8_init_cuda_graphs_frames_cut.log": "graph_capture_other",
    "t28_overlap_retract_decode_batches_cut.log": "running",
    "t35_trt_allreduce_fusion_sm120_capture_failed.log": "graph_capture_other",
    "t38_glm_sm120_preamble_before_tllmgen_error.log": "undecided",
    "t58_verl_vllm_init_device_eaddrinuse_frames.log": "unknown_crash",
    "t60_qwen3_235b_v1_capture_graph_frames_cut.log": "unknown_crash",
    "t64_nextn_deepgemm_draft_capture_segfault.log": "unknown_crash",
    "t65_generate_200_ok_lines_serving.log": "undecided",
    "t68_qwen72b_ray_cuda_oom_then_capture_lines.log": "oom_runtime",
}
#: Misses of the dev half on the rules written against it.
DEV_MISSES = {
    "t08_vllm_nccl_info_lines_only.log": "undecided",
    "t23_gemma2_capture_begin_lines_only.log": "undecided",
    "t30_nextn_fused_moe_oom_custom_ar_capture_frames.log": "graph_capture_other",
    "t34_eaddrinuse_nccl_communicator_asgi_frames.log": "unknown_crash",
    "t39_dflash_negative_max_num_scheduled_tokens.log": "undecided",
    "t47_llava_next_create_weights_frames_cut.log": "unknown_crash",
    "t48_l4_router_load_model_frames_cut.log": "unknown_crash",
    "t51_qanything_compose_check_gpu_supports_dtype_cut.log": "undecided",
    "t56_init_device_tcpstore_client_timeout_frames.log": "unknown_crash",
    "t67_pixtral_args_namespace_only.log": "starting",
    "t69_t4_profile_then_capture_begins_cut.log": "starting",
}


def _read(row: dict[str, str], exit_code: int | None = None) -> crashes.Classification:
    return crashes.classify_file(THREADS / row["file"], RULES[row["engine"]], exit_code=exit_code)


def test_the_corpus_is_real_labelled_and_split_by_thread() -> None:
    assert len(ROWS) >= 60
    assert sorted(p.name for p in THREADS.glob("*.log")) == sorted(r["file"] for r in ROWS)
    assert {r["category"] for r in ROWS} <= set(CRASH_CATEGORIES) | set(HEALTHY_CATEGORIES)
    assert len({r["source_url"] for r in ROWS}) == len(ROWS)  # one log per thread
    for row in ROWS:
        assert row["source_url"].startswith("https://github.com/")
        digest = int(hashlib.sha1(row["source_url"].encode()).hexdigest(), 16)
        assert row["split"] == ("dev" if digest % 2 == 0 else "held_out")
        if row["line"]:  # the deciding line is in the file where the label says
            lines = (THREADS / row["file"]).read_text(encoding="utf-8").split("\n")
            assert lines[int(row["line"]) - 1].strip()


@pytest.mark.parametrize("row", ROWS, ids=[r["file"] for r in ROWS])
def test_each_log_reads_as_labelled_or_as_its_pinned_miss(row: dict[str, str]) -> None:
    misses = HELD_OUT_MISSES if row["split"] == "held_out" else DEV_MISSES
    got = _read(row).category
    assert got == misses[row["file"]] if row["file"] in misses else reads_as(row["category"], got)


@pytest.mark.parametrize("split", ["dev", "held_out"])
def test_the_figures(split: str) -> None:
    rows = [r for r in ROWS if r["split"] == split]
    right = [r for r in rows if reads_as(r["category"], _read(r).category)]
    # held out: 15 at its one measurement, 20 with t01, t02, t25, t27 and t57 read right since
    expected = {"dev": (27, 16), "held_out": (35, 20)}[split]
    assert (len(rows), len(right)) == expected


@pytest.mark.parametrize("row", ROWS, ids=[r["file"] for r in ROWS])
def test_no_advice_moves_a_memory_knob_for_a_cause_memory_does_not_fix(row: dict[str, str]) -> None:
    verdict = _read(row)
    knobs = {knob for knob, _ in verdict.moves}
    if row["category"] in ("unsupported_arch", "graph_capture_other", "nccl_error", "bad_args"):
        assert not knobs & MEMORY, verdict
    if row["category"] == "oom_kv_pool":
        assert ("mem_fraction_static", "lower") not in verdict.moves
    if row["category"] == "nccl_error":
        assert "custom_all_reduce" not in knobs


@pytest.mark.parametrize("row", ROWS, ids=[r["file"] for r in ROWS])
def test_a_process_that_exited_is_never_starting(row: dict[str, str]) -> None:
    verdict = _read(row, exit_code=1)
    assert verdict.category != "starting"
    if _read(row).category == "starting":
        assert verdict.category == UNKNOWN_CRASH
        assert verdict.moves == ()
        assert verdict.exit_code == 1


# --- advice direction, per category, for both engines -------------------------------------
def _moves(engine: str, category: str, evidence: str, **kw: object) -> tuple[tuple[str, str], ...]:
    return RULES[engine].moves(AdviceContext(category, evidence, **kw))  # type: ignore[arg-type]


def test_a_kv_pool_that_does_not_fit_the_budget_raises_the_fraction() -> None:
    for engine, knob, line in (
        (
            "sglang",
            "mem_fraction_static",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        ),
        ("vllm", "gpu_memory_utilization", "ValueError: No available memory for the cache blocks."),
    ):
        moves = _moves(engine, "oom_kv_pool", line)
        assert (knob, "raise") in moves and (knob, "lower") not in moves


def test_a_kv_pool_that_does_not_fit_the_gpu_lowers_the_fraction() -> None:
    moves = _moves("sglang", "oom_kv_pool", "torch.OutOfMemoryError: CUDA out of memory.")
    assert ("mem_fraction_static", "lower") in moves
    assert ("mem_fraction_static", "raise") not in moves


def test_an_oom_while_capturing_lowers_the_graph_batch_and_never_raises_memory() -> None:
    for engine in ("sglang", "vllm"):
        moves = _moves(engine, "oom_cuda_graph", "torch.OutOfMemoryError: CUDA out of memory.")
        assert moves and all(way == "lower" for _, way in moves)


def test_an_oom_at_run_time_lowers_the_load() -> None:
    assert ("max_running_requests", "lower") in _moves(
        "sglang", "oom_runtime", "RuntimeError: Decode out of memory. Try to lower your batch size."
    )
    assert _moves(
        "vllm",
        "oom_runtime",
        "ValueError: Free memory on device (7.3/139 GiB) on "
        "startup is less than desired GPU memory utilization (0.9, 125 GiB).",
    ) == (("gpu_memory_utilization", "lower"),)


def test_an_unsupported_kernel_changes_the_backend_not_memory() -> None:
    for engine in ("sglang", "vllm"):
        moves = _moves(engine, "unsupported_arch", "RuntimeError: Unsupported architecture")
        assert ("attention_backend", "change") in moves
        assert not {k for k, _ in moves} & MEMORY


def test_capture_advice_names_the_failing_part_and_never_memory() -> None:
    pcg = "Piecewise CUDA Graph failed with error: 'X' object has no attribute 'num_tokens'"
    assert _moves("sglang", "graph_capture_other", pcg) == (("piecewise_cuda_graph", "disable"),)
    ar = "RuntimeError: Cuda error custom_all_reduce.cuh:164 'invalid argument'"
    assert _moves("sglang", "graph_capture_other", ar) == (("custom_all_reduce", "disable"),)


def test_a_custom_all_reduce_frame_the_traceback_passed_through_is_not_blamed() -> None:
    row = next(r for r in ROWS if r["file"].startswith("t30_"))
    verdict = _read(row)
    assert "custom_all_reduce" in (verdict.evidence or "")
    assert verdict.moves == ()  # the frames do not show the cause (a fused_moe OOM, per the thread)


def test_nccl_shared_memory_is_not_all_reduce_advice() -> None:
    for engine in ("sglang", "vllm"):
        line = "ncclSystemError: Error while creating shared memory segment /dev/shm/nccl-x"
        assert _moves(engine, "nccl_error", line) == (("dev_shm", "check"),)


def test_argument_errors_name_the_argument() -> None:
    line = "launch_server.py: error: unrecognized arguments: --reasoning_parser kimi_k2"
    assert _moves("sglang", "bad_args", line) == (("reasoning_parser", "fix"),)
    line = "AssertionError: Invalid kv_cache_dtype: float16. Valid values are: ('auto',)"
    assert _moves("vllm", "bad_args", line) == (("kv_cache_dtype", "fix"),)
    row = next(r for r in ROWS if r["file"].startswith("t31_"))
    assert _read(row).moves == (("kv_cache_dtype", "fix"),)


def test_unknown_and_other_crashes_move_no_knob() -> None:
    for engine in ("sglang", "vllm"):
        for category in ("unknown_crash", "other_crash"):
            assert _moves(engine, category, "Killed") == ()


def test_an_exited_process_with_nothing_decisive_is_an_unknown_crash_naming_the_exit() -> None:
    text = "[2025-01-01 10:00:00] Load weight begin. avail mem=70.00 GB\n"
    for engine in ("sglang", "vllm"):
        alive = crashes.classify_text(text, RULES[engine], alive=True)
        assert alive.category == "starting"
        gone = crashes.classify_text(text, RULES[engine], exit_code=-9)
        assert (gone.category, gone.exit_code, gone.line_number) == (UNKNOWN_CRASH, -9, 1)
        assert "signal 9" in gone.advice
    ready = "The server is fired up and ready to roll!\n"
    assert crashes.classify_text(ready, RULES["sglang"], exit_code=0).category == "ready"
    assert crashes.classify_text(ready, RULES["sglang"], exit_code=1).category == UNKNOWN_CRASH
