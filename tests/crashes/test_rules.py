"""What single lines mean, with the context a caller passes in."""

from __future__ import annotations

import pytest

from autotune.crashes import CRASH_CATEGORIES, TAG_DRAFT, classify_text
from autotune.crashes._lines import normalise
from autotune.engines.sglang import _crash_rules as rules
from autotune.engines.sglang._crashes import SGLANG_CRASH_RULES as RULES

NO_TAGS: frozenset[str] = frozenset()


def cause(line: str, tags: frozenset[str] = NO_TAGS, capture: bool = False) -> str | None:
    found = rules.specific_cause(line, RULES.parse_exception(line), tags, capture)
    return None if found is None else found[0]


def test_exception_lines() -> None:
    assert RULES.parse_exception("torch.OutOfMemoryError: CUDA out of memory.") == (
        "OutOfMemoryError",
        "CUDA out of memory.",
    )
    assert RULES.parse_exception("AssertionError") == ("AssertionError", "")
    assert RULES.parse_exception("KeyError: 12") == ("KeyError", "12")
    assert RULES.parse_exception("  what():  CUDA error: out of memory") == (
        "what()",
        "CUDA error: out of memory",
    )
    assert RULES.parse_exception("Scheduler hit an exception: Traceback") is None
    assert RULES.parse_exception("x.py:558: UserWarning: Using a slow tokenizer.") is None


def test_frames_and_their_tags() -> None:
    frame = RULES.parse_frame('  File "/s/model_runner.py", line 628, in init_memory_pool')
    assert frame is not None
    path, func = frame
    assert func == "init_memory_pool"
    assert rules.frame_tags(path, func) == {rules.TAG_KV_POOL}
    assert RULES.parse_frame('  File "/sgl-workspace/sglang/py') == ("/sgl-workspace/sglang/py", "")
    graph = rules.frame_tags("/s/speculative/eagle_draft_cuda_graph_runner.py", "__init__")
    assert graph == {rules.TAG_CAPTURE, TAG_DRAFT}
    assert rules.TAG_CAPTURE not in rules.frame_tags("/s/cuda_graph_runner.py", "replay")
    assert rules.TAG_SYMM_MEM in rules.frame_tags("/s/torch_symm_mem.py", "__init__")
    assert rules.TAG_ARGS in rules.frame_tags("/s/srt/server_args.py", "__post_init__")
    assert RULES.called_function("    self.init_memory_pool(min_per_gpu_memory)") == (
        "init_memory_pool"
    )


@pytest.mark.parametrize(
    ("line", "category"),
    [
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.76",
            "oom_kv_pool",
        ),
        (
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2 GiB",
            "oom_cuda_graph",
        ),
        ("Exception: Capture cuda graph failed: CUBLAS_STATUS_ALLOC_FAILED", "oom_cuda_graph"),
        (
            "Exception: Capture cuda graph failed: No supported CUDA architectures found for major "
            "versions [10].",
            "graph_capture_other",
        ),
        (
            "RuntimeError: CUDA error: operation not permitted when stream is capturing",
            "graph_capture_other",
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 114.00 MiB.",
            "oom_runtime",
        ),
        ("RuntimeError: Prefill out of memory. Try to lower your batch size.", "oom_runtime"),
        ("RuntimeError: SGLang only supports sm75 and above.", "unsupported_arch"),
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            "unsupported_arch",
        ),
        (
            "RuntimeError: TorchSymmMemCommunicator: Device capability 8 not supported, "
            "communicator is not available.",
            "unsupported_arch",
        ),
        ("RuntimeError: NCCL error: unhandled system error", "nccl_error"),
        ("launch_server.py: error: unrecognized arguments: --enable_metrics", "bad_args"),
        ("launch_server.py: error: the following arguments are required: --model-path", "bad_args"),
        (
            "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
            "address already in use",
            "port_in_use",
        ),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. port: 30001, useIpv6: false, code: -98, name: EADDRINUSE",
            "port_in_use",
        ),
        ("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5757')", "port_in_use"),
        ("OSError: [Errno 98] Address in use", "port_in_use"),
    ],
)
def test_specific_causes(line: str, category: str) -> None:
    assert cause(line) == category


def test_a_port_in_use_decides_a_crash_that_was_only_a_strong_sign() -> None:
    line = "ERROR:    [Errno 98] error while attempting to bind on address: address already in use"
    assert RULES.may_matter("name: EADDRINUSE") and RULES.may_matter("[errno 98] taken")
    assert not RULES.is_strong_crash(line)  # a specific cause now, not a generic sign
    assert RULES.cause_priority.index("port_in_use") < RULES.cause_priority.index("nccl_error")
    assert "port_in_use" in CRASH_CATEGORIES


def test_collective_timeouts() -> None:
    assert rules.is_collective_timeout("Watchdog caught collective operation timeout: WorkNCCL")
    assert rules.is_collective_timeout("NCCL operations have failed or TIMED OUT")
    assert not rules.is_collective_timeout("NCCL error: unhandled system error")


def test_context_changes_what_an_exception_means() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB."
    assert cause(oom, frozenset({rules.TAG_CAPTURE})) == "oom_cuda_graph"
    assert cause(oom, NO_TAGS, capture=True) == "oom_cuda_graph"
    assert cause(oom, frozenset({rules.TAG_LOADING}), capture=True) == "oom_runtime"
    arch = "RuntimeError: No supported CUDA architectures found for major versions [9, 10]."
    assert cause(arch) == "unsupported_arch"
    assert cause(arch, frozenset({rules.TAG_CAPTURE})) == "graph_capture_other"
    assert cause("KeyError: 12") is None
    assert cause("KeyError: 12", frozenset({rules.TAG_SYMM_MEM})) == "unsupported_arch"
    assert cause("AssertionError") is None
    assert cause("AssertionError", frozenset({rules.TAG_ARGS})) == "bad_args"


@pytest.mark.parametrize(
    "line",
    [
        "ValueError: Model architectures ['X'] are not supported for now.",
        "[2026-01-01 TP0] Compute capability below sm80. Use float16 due to lack of bfloat16.",
        "srun: error: gpu-node-02: task 0: Out Of Memory",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ],
)
def test_lines_that_name_no_specific_cause(line: str) -> None:
    assert cause(line) is None


def test_noise_warnings_and_hints() -> None:
    assert RULES.is_noise("gpu01:1:1 [0] NCCL INFO Channel 00/02")
    # a full KV pool's retraction of requests: the server goes on serving, no crash
    retraction = "[TP0] Decode out of memory happened. #retracted_reqs: 1"
    assert not RULES.is_noise(retraction)
    assert (progress := RULES.progress(retraction)) is not None and progress.kind == "running"
    assert classify_text(retraction + "\n", RULES).category == "running"
    assert RULES.is_warning("[W1014 11:00:24.551 ProcessGroupNCCL.cpp:4751] Warning: x")
    assert RULES.is_warning("host:1:1 [0] misc/socket.cc:578 NCCL WARN socketPollConnect: refused")
    assert rules.hint_of("host:1:1 [0] NCCL WARN connect returned Connection refused") == (
        "nccl_error",
        0,
    )
    assert rules.hint_of("host:1:1 [0] NCCL WARN NET/IB : No device found.") is None
    assert rules.hint_of("usage: launch_server.py [-h] --model-path MODEL_PATH") == ("bad_args", 0)


def test_every_exception_shape_passes_the_prefilter() -> None:
    for name in ("KeyboardInterrupt", "SystemExit", "FooFailure", "BarFault", "BazError"):
        assert RULES.may_matter(f"{name}: x")
        assert RULES.parse_exception(f"{name}: x") == (name, "x")
    assert not RULES.may_matter('[2026-01-01] INFO:     127.0.0.1:5 - "POST /generate" 200 OK')


def test_only_graph_capture_functions_are_capture() -> None:
    for func in ("capture", "capture_one_batch_size", "_capture_graph", "init_cuda_graphs"):
        assert rules.TAG_CAPTURE in rules.frame_tags("/s/x.py", func), func
    assert rules.TAG_CAPTURE in rules.frame_tags(
        "/s/flashinfer_backend.py", "init_forward_metadata_capture_cuda_graph"
    )
    assert rules.TAG_CAPTURE in rules.frame_tags("/torch/cuda/graphs.py", "__exit__")
    for func in ("capture_for_decode", "capture_hidden_states", "forward"):
        assert rules.TAG_CAPTURE not in rules.frame_tags("/s/speculative/eagle_info.py", func)


def _read(text: str) -> str:
    """The category of ``text`` as the live start-up watch reads it (the process running): a
    line that is no crash reads as ``starting``."""
    from autotune.crashes import classify_text

    return classify_text(text, RULES, alive=True).category


def test_a_traceback_cut_inside_distributed_init_reads_as_nccl() -> None:
    cut = (
        "[2025-01-01 00:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/s/sglang/srt/model_executor/model_runner.py", line 163, in __init__\n'
        "    min_per_gpu_memory = self.init_torch_distributed()\n"
        '  File "/s/sglang/srt/model_executor/model_runner.py", line 298, in x\n'
        "    initialize_model_parallel(tensor_model_parallel_size=self.tp_size)\n"
        '  File "/s/sglang/srt/distributed/paral\n'
    )
    assert _read(cut) == "nccl_error"
    # an error with a cause of its own keeps it, wherever it was raised
    oom = cut + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert _read(oom) != "nccl_error"


def test_custom_all_reduce_graph_buffers_are_part_of_graph_capture() -> None:
    frame = (
        '  File "/s/device_communicators/custom_all_reduce.py", line 307, in register_graph_buffers'
    )
    assert _read("Traceback (most recent call last):\n" + frame + "\n") == "graph_capture_other"
    quoted = (
        "RuntimeError: invalid argument\n"
        "torch.ops.sgl_kernel.get_graph_buffer_ipc_meta.default(x)\n"
    )
    assert _read(quoted) == "graph_capture_other"
    assert _read("RuntimeError: invalid argument\n") == "unknown_crash"


def test_the_servers_usage_block_reads_as_bad_arguments_even_without_its_error_line() -> None:
    usage = "usage: launch_server.py [-h] --model-path MODEL_PATH [--port PORT]\n"
    assert _read(usage) == "bad_args"
    assert _read("usage: sglang serve [-h] --model-path MODEL_PATH\n") == "bad_args"
    assert _read("usage: some_other_tool.py [-h]\n") == "starting"


def test_kernel_builds_missing_for_the_gpus_sm_read_as_unsupported_arch() -> None:
    loader = "ImportError: [sgl_kernel] CRITICAL: Could not load any common_ops library!\n"
    assert _read(loader) == "unsupported_arch"
    ptxas = (
        "subprocess.CalledProcessError: Command '/x/triton/backends/nvidia/bin/ptxas -lineinfo"
        " -v --gpu-name=sm_120 /tmp/a.ptx -o /tmp/a.ptx.o' returned non-zero exit status 255.\n"
    )
    assert _read(ptxas) == "unsupported_arch"
    other = "subprocess.CalledProcessError: Command 'make all' returned non-zero exit status 2.\n"
    assert _read(other) == "unknown_crash"


def test_a_frame_wrapped_after_its_path_keeps_its_function() -> None:
    wrapped = (
        "Traceback (most recent call last):\n"
        '  File "/s/sglang/srt/distributed/parallel_state.py"\n'
        ", line 1121, in ensure_model_parallel_initialized\n"
    )
    assert _read(wrapped) == "nccl_error"


def test_a_ci_timestamp_in_brackets_is_a_prefix() -> None:
    line = '[2026-02-24T20:21:58Z] (EngineCore_DP0 pid=1)   File "/s/x.py", line 9, in run'
    assert RULES.parse_frame(normalise(line)) == ("/s/x.py", "run")


def test_an_sm_refusal_and_an_unsupported_capability_read_as_unsupported_arch() -> None:
    assert _read("SGlang only supports sm 75 and  above\n") == "unsupported_arch"
    assert _read("ValueError: Unsupported compute capability: 12.0\n") == "unsupported_arch"
    assert _read("WARNING: FlashInfer only supports sm75 and above, using triton\n") == "starting"


def test_a_kernel_listing_the_sm_families_it_runs_on_reads_as_unsupported_arch() -> None:
    assert _read("AssertionError: only sm90 is supported\n") == "unsupported_arch"
    assert _read("RuntimeError: Only SM 100 and SM 103 are supported\n") == "unsupported_arch"
    assert _read("ValueError: Min capability: 80. Current capability: 75.\n") == "unsupported_arch"
    # a note, not a refusal: no error on the line and no exception
    assert _read("INFO: only sm90 is supported by this kernel, falling back\n") == "starting"


def test_a_traceback_cut_in_the_kv_slot_allocator_while_serving_is_a_runtime_oom() -> None:
    head = (
        "[2025-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/s/sglang/srt/managers/scheduler.py", line 1, in event_loop_normal\n'
        "    result = self.run_batch(batch)\n"
        '  File "/s/sglang/srt/managers/schedule_batch.py", line 2, in prepare_for_decode\n'
    )
    call = head + "    self.out_cache_loc = self.alloc_token_slots(bs)\n"
    slots = (
        call + '  File "/s/sglang/srt/managers/schedule_batch.py", line 3, in alloc_token_slots\n'
    )
    assert _read(slots) == "oom_runtime"
    assert _read(call) == "oom_runtime"  # cut at the call into the allocator
    # the same traceback cut before the allocator says nothing about memory
    assert _read(head) == "unknown_crash"
    # the start-up pool, cut while its buffers are created, stays a KV pool that does not fit
    pool = (
        "Traceback (most recent call last):\n"
        '  File "/s/sglang/srt/model_executor/model_runner.py", line 4, in init_memory_pool\n'
        "    self.token_to_kv_pool = MHATokenToKVPool(\n"
    )
    assert _read(pool) == "oom_kv_pool"


def test_kernel_and_amd_architecture_refusals_read_as_unsupported_arch() -> None:
    refusals = (
        "AssertionError: expected sm90 or sm100\n",
        "RuntimeError: this kernel expected an sm100a GPU\n",
        "NotImplementedError: this model currently supports ROCm gfx950 only.\n",
        "RuntimeError: Unsupported GPU architecture detected gfx1100. Expected 'gfx942'.\n",
        'KeyError: "Unknown GPU architecture: gfx1151. Please check your ROCm install"\n',
        "ValueError: gfx90a is not supported by this backend\n",
    )
    for line in refusals:
        assert _read(line) == "unsupported_arch", line
    assert _read("INFO: using the gfx942 kernels, expected sm90 or sm100 on CUDA\n") == "starting"


def test_rocms_gpu_memory_access_fault_is_a_crash() -> None:
    fault = "Memory access fault by GPU node-2 (Agent handle: 0x5a0d) on address 0x7d35.\n"
    assert _read("[2025-01-01 00:00:00] Decode batch. #running-req: 1\n" + fault) == "unknown_crash"


def test_an_exception_name_cut_inside_torchs_out_of_memory_error_is_an_oom() -> None:
    capture = (
        "Traceback (most recent call last):\n"
        '  File "/s/sglang/srt/model_executor/cuda_graph_runner.py", line 1, in __init__\n'
        "    self.model_runner.attn_backend.init_cuda_graph_state(self.max_num_token)\n"
        '  File "/s/sglang/srt/layers/attention/triton.py", line 2, in init_cuda_graph_state\n'
        "    self.cuda_graph_attn_logits = torch.empty(\n"
    )
    assert _read(capture + "torch.O\n") == "oom_cuda_graph"
    assert _read(capture + "torch.cuda.OutOfMem\n") == "oom_cuda_graph"
    serving = (
        "Traceback (most recent call last):\n"
        '  File "/s/sglang/srt/managers/scheduler.py", line 1, in run_batch\n'
        "    out = self.model_runner.forward(batch)\n"
    )
    assert _read(serving + "torch.Out\n") == "oom_runtime"
    # another name, or the start of one that other exceptions share, is no OOM
    assert _read(capture + "torch.\n") == "graph_capture_other"
    assert _read(serving + "torch.ones\n") == "unknown_crash"


def test_a_logger_tag_naming_the_graph_buffer_registration_is_no_capture_failure() -> None:
    info = (
        "2025-11-05T01:56:54.243403Z  INFO custom_all_reduce.register_graph_buffers: Registering"
        " 595 cuda graph addresses\n"
    )
    assert _read(info) == "starting"
    # the same function named by an error (the quoted call under the exception) still is
    failed = (
        "RuntimeError: invalid argument\n"
        "torch.ops.sgl_kernel.get_graph_buffer_ipc_meta.default(fa)\n"
    )
    assert _read(failed) == "graph_capture_other"


def test_the_servers_own_words_for_a_taken_port_read_as_port_in_use() -> None:
    taken = (
        "ValueError: port_base at 11434 is not available in 30 seconds. port_base is used by a "
        "process already.\n"
    )
    assert _read(taken) == "port_in_use"
    assert _read("RuntimeError: Port 30000 is already in use\n") == "port_in_use"
    assert _read("[2026-01-01 00:00:00] Port 30000 is not available, trying 30001\n") == "starting"


def test_nvshmem_failing_to_connect_the_gpus_reads_as_a_communication_failure() -> None:
    for line in (
        "/sgl-workspace/nvshmem/src/host/init/init.cu:1007: non-zero status: 7 nvshmem setup "
        "connections failed\n",
        "connect EPS failed\n",
        "/x/team.cu:63: NVSHMEM API called before NVSHMEM initialization has completed\n",
    ):
        verdict = classify_text(line, RULES)
        assert verdict.category == "nccl_error", line
        assert "NVSHMEM" in verdict.advice and "--moe-a2a-backend" in verdict.advice
    assert _read("[2026-01-01 00:00:00] NVSHMEM symmetric heap size 1 GiB\n") == "starting"


def test_a_cuda_error_while_graphs_are_captured_is_a_capture_failure() -> None:
    begin = (
        "[2026-03-17 07:16:11 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
    )
    illegal = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    assert _read(begin + illegal) == "graph_capture_other"
    end = "[2026-03-17 07:16:38 TP0] Capture cuda graph end. Time elapsed: 27.41 s.\n"
    assert _read(illegal) == "unknown_crash"
    assert _read(begin + end + illegal) == "unknown_crash"
    # a GPU the kernel was not built for keeps its own category, inside capture too
    arch = "CUDA error (csrc/get_mla_metadata.cu:93): no kernel image is available for execution\n"
    assert _read(begin + arch) == "unsupported_arch"
