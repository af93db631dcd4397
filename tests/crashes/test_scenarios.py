"""Short log excerpts with one difficulty each: context, wrappers, stops, hints."""

from __future__ import annotations

import pytest

from ._data import classify_text

FRAME = '  File "/x/sglang/srt/{}", line {}, in {}'

SCENARIOS: dict[str, tuple[str, list[str]]] = {
    # NCCL's own "Cuda failure 'out of memory'" at init: another process holds the GPU
    "nccl_unhandled_cuda_error": (
        "nccl_error",
        [
            "[2026-01-01 10:00:03 TP5] Scheduler hit an exception: Traceback (most recent call "
            "last):",
            FRAME.format("distributed/parallel_state.py", 330, "__init__"),
            "    self.pynccl_comm = PyNcclCommunicator(",
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
            "c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for "
            "details), NCCL version 2.21.5",
            "ncclUnhandledCudaError: Call to CUDA function failed.",
            "Last error:",
            "Cuda failure 'out of memory'",
        ],
    ),
    # a generic wrapper exception does not hide the NCCL warning that explains it
    "initialization_failed_after_nccl_warn": (
        "nccl_error",
        [
            "gpu1:1:1 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
            "10.0.0.1<4000> failed : Connection refused",
            "RuntimeError: Initialization failed. Please see the error messages above.",
        ],
    ),
    "store_timeout_inside_pynccl": (
        "nccl_error",
        [
            "Traceback (most recent call last):",
            FRAME.format("distributed/device_communicators/pynccl.py", 99, "__init__"),
            "    self.unique_id = self.nccl.ncclGetUniqueId()",
            "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. "
            "7/8 clients joined.",
        ],
    ),
    "kv_pool_message_cut_short": ("oom_kv_pool", ["RuntimeError: Not enough memory."]),
    "unknown_speculative_algorithm": (
        "bad_args",
        ["ValueError: Unknown speculative algorithm name: EAGLE-3"],
    ),
    "dist_port_in_use": (
        "port_in_use",
        [
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. port: 30001, useIpv6: false, code: -98, name: EADDRINUSE, "
            "message: address already in use"
        ],
    ),
    "driver_oom_in_warmup_after_capture": (
        "oom_runtime",
        [
            "[2026-01-01 10:00:00 TP0] Capture cuda graph end. Time elapsed: 3 s.",
            "Traceback (most recent call last):",
            FRAME.format("model_executor/model_runner.py", 2391, "forward_extend"),
            "    return self.model.forward(",
            "RuntimeError: CUDA driver error: out of memory",
        ],
    ),
    "older_torch_oom_in_capture_frames": (
        "oom_cuda_graph",
        [
            "Traceback (most recent call last):",
            FRAME.format("model_executor/cuda_graph_runner.py", 300, "capture"),
            "    ) = self.capture_one_batch_size(bs, forward)",
            FRAME.format("models/llama.py", 120, "forward"),
            "    x = self.mlp(x)",
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; "
            "79.15 GiB total capacity; 77.10 GiB already allocated)",
        ],
    ),
    "request_error_after_ready_is_not_a_crash": (
        "ready",
        [
            "[2026-01-01 10:00:00] The server is fired up and ready to roll!",
            "[2026-01-01 10:00:05] ERROR:    Exception in ASGI application",
            "Traceback (most recent call last):",
            '  File "/x/uvicorn/protocols/http/httptools_impl.py", line 409, in run_asgi',
            "    result = await app(",
            "ValueError: Input length (300000 tokens) exceeds the maximum allowed length.",
        ],
    ),
    "interrupted_start_is_not_a_crash": (
        "starting",
        [
            "[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB",
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3.12/asyncio/runners.py", line 118, in run',
            "    return self._loop.run_until_complete(task)",
            "KeyboardInterrupt",
        ],
    ),
    "segfault": (
        "unknown_crash",
        [
            "[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB",
            "!!!!!!! Segfault encountered !!!!!!!",
            "Fatal Python error: Segmentation fault",
        ],
    ),
    "capture_traceback_cut_before_the_exception": (
        "graph_capture_other",
        [
            "[2026-01-01 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call "
            "last):",
            FRAME.format("model_executor/cuda_graph_runner.py", 402, "__init__"),
            "    self.capture()",
            '  File "/x/sglang/srt/model_executor/cuda_graph_run',
        ],
    ),
    "custom_all_reduce_without_p2p": (
        "unknown_crash",
        [
            "Traceback (most recent call last):",
            FRAME.format("distributed/device_communicators/custom_all_reduce.py", 160, "__init__"),
            "    handles, offsets = self._get_ipc_meta(self.meta)",
            "RuntimeError: CUDA error: peer access is not supported between these two devices",
        ],
    ),
    "triton_shared_memory_limit": (
        "unsupported_arch",
        [
            "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: "
            "147456, Hardware limit: 101376. Reducing block sizes or `num_stages` may help.",
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario(name: str) -> None:
    category, lines = SCENARIOS[name]
    assert classify_text("\n".join(lines) + "\n").category == category


def test_interrupting_a_capture_is_not_a_capture_failure() -> None:
    lines = [
        "[2026-01-01 10:00:00 TP0] Capture cuda graph begin. This can take up to several minutes.",
        "Traceback (most recent call last):",
        FRAME.format("model_executor/cuda_graph_runner.py", 402, "__init__"),
        "    self.capture()",
        "KeyboardInterrupt",
    ]
    assert classify_text("\n".join(lines)).category == "starting"
