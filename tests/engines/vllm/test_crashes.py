"""vLLM's crash rules on real vLLM logs that users pasted into public issue threads.

The logs and their labels are listed in ``data/logs.json`` with the thread each comes from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.crashes import LiveClassifier, classify_text
from autotune.engines.vllm import VLLM_CRASH_RULES
from autotune.engines.vllm._crashes import strip_prefix

DATA = Path(__file__).resolve().parent / "data"
INDEX: list[dict[str, Any]] = json.loads((DATA / "logs.json").read_text())["logs"]


def test_the_corpus_is_real_and_large_enough() -> None:
    crashes = [e for e in INDEX if e["label"] != "starting"]
    assert len(crashes) >= 15
    assert all(e["source"].startswith("https://github.com/vllm-project/") for e in INDEX)
    assert {e["label"] for e in crashes} >= {
        "oom_kv_pool",
        "oom_cuda_graph",
        "oom_runtime",
        "nccl_error",
        "bad_args",
    }


@pytest.mark.parametrize("entry", INDEX, ids=[e["file"] for e in INDEX])
def test_each_log_gets_the_label_its_thread_gives(entry: dict[str, Any]) -> None:
    text = (DATA / "logs" / entry["file"]).read_text()
    verdict = classify_text(text, VLLM_CRASH_RULES)
    assert verdict.category == entry["label"], (entry["source"], verdict.evidence)
    if entry["label"] == "starting":
        assert not verdict.is_crash
        return
    assert verdict.is_crash and verdict.evidence and verdict.line_number and verdict.advice
    line = text.splitlines()[verdict.line_number - 1]
    assert strip_prefix(verdict.evidence.strip())[:20] in line


def test_a_kv_cache_crash_advises_vllms_own_knobs() -> None:
    blocks = classify_text((DATA / "logs" / "01_oom_kv_pool.log").read_text(), VLLM_CRASH_RULES)
    assert "raise gpu_memory_utilization" in blocks.advice
    too_long = classify_text((DATA / "logs" / "05_oom_kv_pool.log").read_text(), VLLM_CRASH_RULES)
    assert "max_model_len" in too_long.advice and "max-model-len" in too_long.advice
    graphs = classify_text((DATA / "logs" / "06_oom_cuda_graph.log").read_text(), VLLM_CRASH_RULES)
    assert "--enforce-eager" in graphs.advice


def test_the_live_reader_stops_at_the_deciding_line() -> None:
    lines = (DATA / "logs" / "04_oom_kv_pool.log").read_text().splitlines()
    live = LiveClassifier(VLLM_CRASH_RULES)
    decided = [n for n, line in enumerate(lines, 1) if live.feed(line) is not None]
    assert decided and decided[0] == 6  # the worker's exception line, not the weights lines


def test_vllms_prefixes_are_stripped_for_tracebacks() -> None:
    prefix = "(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] "
    line = prefix + '  File "x.py"'
    assert strip_prefix(line) == '  File "x.py"'
    assert strip_prefix("(EngineCore_DP0 pid=6880) ValueError: no") == "ValueError: no"
    assert strip_prefix("INFO 09-28 15:57:15 [default_loader.py:268] Loading") == "Loading"


def test_a_traceback_cut_in_vllms_distributed_init_reads_as_nccl() -> None:
    prefix = "(VllmWorker rank=0 pid=1) ERROR 08-11 10:45:36 [multiproc_executor.py:511] "
    cut = (
        f'{prefix}  File "/v/vllm/distributed/parallel_state.py", line 1121, in '
        "ensure_model_parallel_initialized\n"
        f"{prefix}    initialize_model_parallel(tensor_model_parallel_size,\n"
    )
    assert classify_text(cut, VLLM_CRASH_RULES).category == "nccl_error"


def test_an_error_raised_while_parsing_the_command_line_is_bad_arguments() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/v/vllm/entrypoints/cli/main.py", line 48, in main\n'
        "    args = parser.parse_args()\n"
        '  File "/v/vllm/utils.py", line 1391, in parse_args\n'
        "    raise ValueError(\n"
        "ValueError: With `vllm serve`, you should provide the model as a positional argument\n"
    )
    assert classify_text(text, VLLM_CRASH_RULES).category == "bad_args"
    served = text.replace("parse_args", "load_model").replace("cli/main.py", "worker.py")
    assert classify_text(served, VLLM_CRASH_RULES).category == "unknown_crash"


def test_zero_kv_cache_blocks_read_as_a_kv_cache_that_does_not_fit() -> None:
    old = "INFO 04-27 10:13:05 llm_engine.py:275] # GPU blocks: 0, # CPU blocks: 256\n"
    assert classify_text(old, VLLM_CRASH_RULES).category == "oom_kv_pool"
    fine = "INFO 04-27 10:13:05 llm_engine.py:275] # GPU blocks: 2291, # CPU blocks: 256\n"
    assert classify_text(fine, VLLM_CRASH_RULES, alive=True).category == "starting"


def test_a_minimum_capability_or_a_list_of_sm_families_reads_as_unsupported_arch() -> None:
    lines = (
        "ValueError: The quantization method fp8 is not supported for the current GPU."
        " Minimum capability: 90. Current capability: 86.\n",
        "(EngineCore_DP0 pid=1) RuntimeError: ('Quantization scheme is not supported for ',"
        " 'the current GPU. Min capability: 80. ', 'Current capability: 75.')\n",
        "AssertionError: Only SM 10.x and 11.x are supported\n",
    )
    for line in lines:
        assert classify_text(line, VLLM_CRASH_RULES).category == "unsupported_arch", line


def test_a_worker_that_failed_to_start_is_a_crash() -> None:
    text = (
        "(Worker_TP0 pid=5) INFO 10-06 18:54:29 [gpu_model_runner.py:1] Loading drafter model...\n"
        "(Worker_TP0 pid=5) ERROR 10-06 18:54:30 [multiproc_executor.py:2] WorkerProc failed to"
        " start.\n"
    )
    assert classify_text(text, VLLM_CRASH_RULES).category == "unknown_crash"
    loading = text.splitlines(keepends=True)[0]
    assert classify_text(loading, VLLM_CRASH_RULES, alive=True).category == "starting"


def test_kernel_and_amd_architecture_refusals_read_as_unsupported_arch() -> None:
    refusals = (
        "NotImplementedError: glm 5 next currently supports ROCm gfx950 only.\n",
        "AssertionError: expected sm90 or sm100\n",
        "RuntimeError: Unsupported GPU architecture detected gfx1100. Expected 'gfx942'.\n",
    )
    for line in refusals:
        assert classify_text(line, VLLM_CRASH_RULES).category == "unsupported_arch", line


def test_rocms_gpu_memory_access_fault_is_a_crash() -> None:
    fault = (
        "Memory access fault by GPU node-2 (Agent handle: 0x5a) on address 0x7d. Reason: Unknown.\n"
    )
    assert classify_text(fault, VLLM_CRASH_RULES).category == "unknown_crash"


def test_a_paste_that_ran_lines_together_keeps_the_error_before_an_nccl_info_tag() -> None:
    error = (
        "ERROR 11-04 18:02:56 [multiproc_executor.py:597] raise RuntimeError(f'NCCL error') "
        "ERROR 11-04 18:02:56 [multiproc_executor.py:597] RuntimeError: NCCL error: unhandled cuda"
        " error (run with NCCL_DEBUG=INFO for details)"
    )
    flattened = error + " 02fdc141b80d:213:213 [1] NCCL INFO cudaDriverVersion 12080\n"
    assert classify_text(flattened, VLLM_CRASH_RULES).category == "nccl_error"
    # a line that is an NCCL INFO line stays noise, whatever words it carries
    info = "02fdc141b80d:213:213 [1] NCCL INFO NET/IB : No device found, error code 2\n"
    assert classify_text(info, VLLM_CRASH_RULES, alive=True).category == "starting"


def test_a_taken_port_in_words_and_nvshmem_failing_to_connect() -> None:
    taken = "ValueError: port_base at 11434 is not available in 30 seconds.\n"
    assert classify_text(taken, VLLM_CRASH_RULES).category == "port_in_use"
    nvshmem = "/x/init.cu:1007: non-zero status: 7 nvshmem setup connections failed\n"
    assert classify_text(nvshmem, VLLM_CRASH_RULES).category == "nccl_error"


def test_a_memory_profile_that_leaves_the_kv_cache_nothing_is_a_kv_pool_failure() -> None:
    # vLLM-Ascend's worker, vLLM's own profile, the older engine's summary: zero or less left
    for line in (
        "(Worker_TP0 pid=552) INFO 10-28 21:14:49 [worker_v1.py:259] Available memory: 0, "
        "total memory: 65452113920\n",
        "(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [gpu_worker.py:456] Available KV cache "
        "memory: -1.08 GiB\n",
        "INFO 04-15 00:05:58 [worker.py:267] model weights take 34.43GiB; the rest of the memory "
        "reserved for KV Cache is 0.00GiB.\n",
        "Memory profiling results: total_gpu_memory=23.58GiB kv_cache_size=-0.52GiB "
        "gpu_memory_utilization=0.90\n",
    ):
        verdict = classify_text(line, VLLM_CRASH_RULES)
        assert verdict.category == "oom_kv_pool", line
        assert "raise gpu_memory_utilization" in verdict.advice
    # a small but positive budget, and the healthy summary's suggested negative size, are no crash
    for line in (
        "INFO 03-08 16:44:29 [gpu_worker.py:456] Available KV cache memory: 0.82 GiB\n",
        "INFO 08-07 23:22:57 [gpu_worker.py:789] Replace gpu_memory_utilization config with "
        "`--kv-cache-memory=-1160530022` (-1.08 GiB) to fit into requested memory\n",
    ):
        assert classify_text(line, VLLM_CRASH_RULES, alive=True).category == "starting", line


def test_a_cuda_error_while_graphs_are_captured_is_a_capture_failure() -> None:
    capture = "Capturing CUDA graphs (FULL): 50%|█████ | 1/2 [00:00<00:00, 5.53it/s]\n"
    failed = "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'invalid argument'\n"
    verdict = classify_text(capture + failed, VLLM_CRASH_RULES)
    assert verdict.category == "graph_capture_other"
    assert "--disable-custom-all-reduce" in verdict.advice
    illegal = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    assert classify_text(capture + illegal, VLLM_CRASH_RULES).category == "graph_capture_other"
    # out of memory and a GPU the kernel was not built for keep their own categories
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n"
    assert classify_text(capture + oom, VLLM_CRASH_RULES).category == "oom_cuda_graph"
    arch = "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    assert classify_text(capture + arch, VLLM_CRASH_RULES).category == "unsupported_arch"
    # the same CUDA error outside capture, or once capture finished, is no capture failure
    done = "INFO 08-07 23:22:57 [gpu_model_runner.py:6905] Graph capturing finished in 22 secs\n"
    assert classify_text(illegal, VLLM_CRASH_RULES).category == "unknown_crash"
    assert classify_text(capture + done + illegal, VLLM_CRASH_RULES).category == "unknown_crash"
