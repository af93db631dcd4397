"""Where an error was raised decides what it means: the same CUDA out-of-memory message in
KV-pool allocation, graph capture, weight loading or a forward pass; SGLang's KV-pool messages in
every wording; kernel libraries that reject the GPU; the NCCL watchdog as a messenger."""

from __future__ import annotations

import pytest

from autotune.crashes import TAG_LOADING
from autotune.engines.sglang import _crash_frames as frames
from autotune.engines.sglang import _crash_rules as rules
from autotune.engines.sglang._crashes import SGLANG_CRASH_RULES as RULES

from ._data import classify_text

FRAME = '  File "/sgl-workspace/sglang/python/sglang/srt/{}", line {}, in {}'
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total "
    "capacity of 23.52 GiB of which 13.00 MiB is free."
)
# (file, function) of the innermost frames of each step, as SGLang's tracebacks show them
KV_POOL = [
    ("model_executor/model_runner.py", "init_memory_pool"),
    ("mem_cache/memory_pool.py", "__init__"),
    ("mem_cache/memory_pool.py", "_create_buffers"),
]
CAPTURE = [
    ("model_executor/cuda_graph_runner.py", "capture"),
    ("model_executor/cuda_graph_runner.py", "capture_one_batch_size"),
    ("models/llama.py", "forward"),
]
LOADING = [("model_executor/model_runner.py", "load_model"), ("model_loader/loader.py", "x")]
FORWARD = [
    ("managers/scheduler.py", "run_batch"),
    ("managers/tp_worker.py", "forward_batch_generation"),
    ("model_executor/model_runner.py", "forward_extend"),
]


def traceback(steps: list[tuple[str, str]], exception: str) -> str:
    lines = ["Scheduler hit an exception: Traceback (most recent call last):"]
    for number, (path, func) in enumerate(steps, start=1):
        lines += [FRAME.format(path, 100 * number, func), "    self.step()"]
    return "\n".join([*lines, exception]) + "\n"


@pytest.mark.parametrize(
    ("steps", "category"),
    [
        (KV_POOL, "oom_kv_pool"),
        (CAPTURE, "oom_cuda_graph"),
        (LOADING, "oom_runtime"),
        (FORWARD, "oom_runtime"),
    ],
)
def test_an_out_of_memory_error_is_read_by_where_it_was_raised(
    steps: list[tuple[str, str]], category: str
) -> None:
    assert classify_text(traceback(steps, OOM)).category == category


def test_capture_wins_over_the_forward_pass_it_runs_and_serving_over_the_capture_phase() -> None:
    assert classify_text(traceback(CAPTURE + FORWARD, OOM)).category == "oom_cuda_graph"
    begun = "[2026-01-01 10:00:00 TP0] Capture cuda graph begin. This can take minutes.\n"
    assert classify_text(begun + traceback(FORWARD, OOM)).category == "oom_runtime"
    assert classify_text(begun + OOM + "\n").category == "oom_cuda_graph"


def test_reading_the_kv_pool_while_serving_is_not_allocating_it() -> None:
    serving = [*FORWARD, ("mem_cache/memory_pool.py", "set_kv_buffer")]
    assert frames.TAG_KV_POOL not in frames.frame_tags("/s/mem_cache/memory_pool.py", "get_key")
    assert classify_text(traceback(serving, OOM)).category == "oom_runtime"


def test_steps_are_weighed_innermost_first() -> None:
    assert frames.raised_in(frozenset({frames.TAG_CAPTURE, frames.TAG_FORWARD})) == "capture"
    assert frames.raised_in(frozenset({frames.TAG_KV_POOL, TAG_LOADING})) == "kv_pool"
    assert frames.raised_in(frozenset({frames.TAG_FORWARD})) == "forward"
    assert frames.raised_in(frozenset({frames.TAG_NCCL})) is None
    assert frames.TAG_KERNEL in frames.frame_tags("/venv/site-packages/flashinfer/jit/core.py", "f")
    assert frames.TAG_KERNEL in frames.frame_tags("/venv/site-packages/deep_gemm/__init__.py", "f")


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        "--mem-fraction-static=0.7. Raise --mem-fraction-static above 0.773 (minimum viable = "
        "1 - available/pre = 0.7725). If using speculative decoding, draft weights are now "
        "counted.",
        "ValueError: Loaded weights leave no GPU memory for the KV cache under",
        "RuntimeError: Not enough memory to allocate KV cache.",
        "[2026-01-01 10:00:00 TP0] max_total_tokens=8192 is larger than the profiled value -4096. "
        "Use the profiled value instead.",
        "[2026-01-01 10:00:00 TP0] max_total_num_tokens=0, chunked_prefill_size=8192",
        "[2026-01-01 10:00:00 TP0] WARNING: max_total_num_tokens=-3270",
    ],
)
def test_every_wording_of_a_kv_pool_that_does_not_fit(line: str) -> None:
    assert classify_text(line + "\n").category == "oom_kv_pool"


def test_a_positive_pool_and_a_later_request_limit_are_no_kv_pool_failure() -> None:
    pool = "max_total_num_tokens=2261377, chunked_prefill_size=16384\n"
    assert classify_text(pool, alive=True).category == "starting"
    line = (
        "max_total_tokens=900000 is larger than the profiled value 813221. Use the profiled value."
    )
    assert classify_text(line + "\n", alive=True).category == "starting"


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: Error in function 'TllmGenFmhaRunner' at /x/flashinfer/data/include/"
        "flashinfer/trtllm/fmha/fmhaRunner.cuh:30: Unsupported architecture",
        "tvm.error.InternalError: Assertion error (/deepgemm/csrc/apis/layout.hpp:59): Unsupported "
        "architecture",
        "RuntimeError: Assertion error (/x/apis/attention.hpp:136): Unsupported architecture",
        "ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes are "
        "('fp8e4b15', 'fp8e5')",
        "tvm.error.InternalError: Check failed: (0) is false: Unsupported target for gemm: cuda "
        "-keys=cuda,gpu -arch=sm_120",
        "RuntimeError: FP8 block-scaled GEMM is not supported on SM120",
    ],
)
def test_kernel_libraries_that_reject_the_gpu(line: str) -> None:
    assert classify_text(line + "\n").category == "unsupported_arch"


def test_a_model_class_is_not_a_gpu_architecture() -> None:
    # a model class the engine does not serve: a cause no setting cures
    line = "ValueError: Model architectures ['FooForCausalLM'] are not supported for now."
    assert classify_text(line + "\n").category == "other_crash"
    # the same words with no rule's wording: a crash, its cause not decided
    line = "ValueError: Unsupported architecture: FooForCausalLM"
    assert classify_text(line + "\n").category == "unknown_crash"


def test_a_kernel_library_check_is_read_from_its_frames() -> None:
    frames_of_flashinfer = [("layers/attention/flashinfer_backend.py", "init_forward_metadata")]
    text = traceback(frames_of_flashinfer, "x")
    text = text.replace(
        "x\n",
        '  File "/venv/lib/python3.12/site-packages/flashinfer/jit/core.py", line 9, in build\n'
        "    raise RuntimeError(msg)\n"
        "RuntimeError: no compiled module for SM 120 in this wheel\n",
    )
    assert classify_text(text).category == "unsupported_arch"
    assert (
        rules.specific_cause("RuntimeError: bad", ("RuntimeError", "bad"), frozenset(), False)
        is None
    )


def test_the_nccl_watchdog_reporting_a_cuda_error_is_not_an_nccl_failure() -> None:
    lines = [
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG ID 2 PG GUID 3 Rank 1] Process group watchdog thread terminated with "
        "exception: CUDA error: an illegal memory access was encountered",
    ]
    verdict = classify_text("\n".join(lines) + "\n")
    assert (verdict.category, verdict.line_number) == ("unknown_crash", 2)
    timeout = lines[1].replace(
        "CUDA error: an illegal memory access was encountered",
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)",
    )
    verdict = classify_text("\n".join([lines[0], timeout]) + "\n")
    assert (verdict.category, verdict.line_number) == ("nccl_error", 2)
    assert RULES.is_strong_crash(lines[0])


def test_which_way_the_memory_fraction_must_move() -> None:
    assert RULES.fraction_fix("oom_kv_pool", OOM) == "lower"
    assert RULES.fraction_fix("oom_kv_pool", "RuntimeError: Not enough memory.") == "raise"
    assert RULES.fraction_fix("oom_kv_pool", None) == "raise"
    assert RULES.fraction_fix("oom_cuda_graph", OOM) == "lower"
    assert RULES.fraction_fix("nccl_error", "RuntimeError: NCCL error") is None
    allocated = classify_text(traceback(KV_POOL, OOM))
    assert RULES.fraction_fix(allocated.category, allocated.evidence) == "lower"
