"""Where in SGLang's code a traceback's error was raised, as far as its frames tell.

An exception line says what went wrong; the frames above it say *where*, and for the same message
the place decides the verdict: a CUDA out-of-memory error raised while the KV pool is allocated
means the pool SGLang sized did not fit, the same error raised while CUDA graphs are captured
means the graphs did not fit, and raised in a forward pass while serving it means activations did
not. :func:`frame_tags` reads one frame (its file and function); :func:`raised_in` names the
start-up step a traceback's tags point to, innermost step first.
"""

from __future__ import annotations

import re

from autotune.crashes import TAG_DRAFT, TAG_LOADING

# Traceback frame tags (what the code a frame belongs to was doing); TAG_DRAFT and TAG_LOADING are
# the classifier's own (it also adds them from the start-up phase).
TAG_CAPTURE = "capture"
TAG_KV_POOL = "kv_pool"
TAG_KV_SLOTS = "kv_slots"
TAG_SYMM_MEM = "symm_mem"
TAG_ARGS = "args"
TAG_NCCL = "nccl"
TAG_FORWARD = "forward"
TAG_KERNEL = "kernel"

#: Which category an unfinished traceback (frames, no exception line) points to, best first.
TAG_HINTS: tuple[tuple[str, str], ...] = (
    (TAG_KV_POOL, "oom_kv_pool"),
    (TAG_KV_SLOTS, "oom_runtime"),
    (TAG_CAPTURE, "graph_capture_other"),
    (TAG_SYMM_MEM, "unsupported_arch"),
    (TAG_ARGS, "bad_args"),
    (TAG_NCCL, "nccl_error"),
)

#: The steps :func:`raised_in` can name, in the order a traceback's tags are weighed: graph capture
#: runs forward passes (so it wins over ``forward``); the KV pool and the weights are allocated in
#: steps of their own.
STEPS: tuple[tuple[str, str], ...] = (
    (TAG_CAPTURE, "capture"),
    (TAG_KV_POOL, "kv_pool"),
    (TAG_LOADING, "loading"),
    (TAG_FORWARD, "forward"),
)

# graph-capture functions (capture, capture_one_batch_size, _capture_graph, ..._capture_cuda_graph),
# not EAGLE's capture_for_decode or hidden-state capture, which run while serving
_CAPTURE_FUNC = re.compile(r"(?:^|_)capture(?:$|_one|_graph|_init|_end|_begin|_cuda)")
# allocating the KV pool: sizing it (profile_max_num_token, the 2026 budget check) and creating its
# buffers (MHATokenToKVPool.__init__ -> _create_buffers), for the target and the draft model
_KV_POOL_FUNCS = frozenset(
    {
        "init_memory_pool",
        "init_memory_pools",
        "init_target_memory_pool",
        "alloc_memory_pool",
        "profile_max_num_token",
        "_profile_available_bytes",
        "_create_buffers",
    }
)
# taking token or request slots from the KV pool for a batch while serving (the allocators that
# raise "Prefill/Decode out of memory" and "alloc_req_slots runs out of memory"): a traceback cut
# inside them is the pool running out of room at run time, not the pool failing to fit at start
_KV_SLOT_FUNCS = frozenset(
    {
        "alloc_token_slots",
        "alloc_req_slots",
        "alloc_for_extend",
        "alloc_for_decode",
        "alloc_paged_token_slots_extend",
        "alloc_paged_token_slots_decode",
    }
)
_KV_POOL_FILES = ("pool_configurator", "kv_cache_mixin", "kv_cache_configurator")
_POOL_FILE = re.compile(r"mem_cache/(?:\w+_)?memory_pool(?:_\w+)?\.py$")
# a forward pass while serving (or warming up): the scheduler's batch loop and the runner's forward
_FORWARD_FUNCS = frozenset(
    {
        "run_batch",
        "event_loop_normal",
        "event_loop_overlap",
        "forward_batch_generation",
        "forward_batch_speculative_generation",
        "forward_thread_func",
        "forward_thread_func_",
        "forward_extend",
        "forward_decode",
        "_forward_raw",
        "verify",
    }
)
# setting up torch.distributed and the parallel groups (NCCL communicators, the gloo/TCP store):
# a start-up that dies here failed to connect its ranks
_DIST_INIT_FUNCS = frozenset(
    {
        "init_torch_distributed",
        "init_distributed_environment",
        "initialize_model_parallel",
        "ensure_model_parallel_initialized",
        "init_model_parallel_group",
        "init_process_group",
    }
)
# custom all-reduce's registration of the buffers a captured graph uses (register_graph_buffers,
# get_graph_buffer_ipc_meta): it runs only at the end of a graph capture
_GRAPH_BUFFERS = re.compile(r"graph_buffer")
# kernel libraries whose own checks reject a GPU (FlashInfer, sgl-kernel, DeepGEMM, Triton, ...)
_KERNEL_PATHS = re.compile(
    r"/(?:flashinfer|sgl_kernel|sglang_kernel|deep_gemm|deepgemm|triton|flash_attn|tilelang|cutlass"
    r"|flashmla|flash_mla)(?:/|\.)",
    re.I,
)


# a collective between the ranks: torch.distributed's own frames, the tensor-parallel group's
# all-reduce / all-gather (a traceback cut inside one was waiting on the other ranks)
_COLLECTIVE = re.compile(
    r"torch/distributed/|\btensor_model_parallel_all_(?:reduce|gather)\b|\ball_gather_object\b"
)


def frame_tags(path: str, func: str) -> frozenset[str]:
    """What the code of one frame was doing, as far as its file and function tell."""
    p = path.lower()
    f = func.lower()
    tags: set[str] = set()
    capturing = (
        _CAPTURE_FUNC.search(f) is not None
        or "init_cuda_graph" in f
        or "cudagraphrunner" in f
        or "torch/cuda/graphs.py" in p
    )
    capturing = capturing or _GRAPH_BUFFERS.search(f) is not None
    if (capturing and "replay" not in f) or ("cuda_graph_runner" in p and f == "__init__"):
        tags.add(TAG_CAPTURE)
    if "draft" in p or "draft" in f:
        tags.add(TAG_DRAFT)
    if (
        f in _KV_POOL_FUNCS
        or any(name in p for name in _KV_POOL_FILES)
        or (_POOL_FILE.search(p) is not None and f in ("__init__", "_create_buffers"))
    ):
        tags.add(TAG_KV_POOL)
    if f in _KV_SLOT_FUNCS:
        tags.add(TAG_KV_SLOTS)
    if "symm_mem" in p or "symmetric_memory" in p or "symmmem" in f:
        tags.add(TAG_SYMM_MEM)
    if (
        p.endswith("server_args.py")
        or "/arg_groups/" in p
        or "speculative_hook" in p
        or f in ("prepare_server_args", "check_server_args", "from_cli_args")
    ):
        tags.add(TAG_ARGS)
    if "nccl" in p or "nccl" in f or f in _DIST_INIT_FUNCS or _COLLECTIVE.search(f"{p} {f}"):
        tags.add(TAG_NCCL)
    if "model_loader" in p or f in ("load_model", "load_weights", "get_model", "create_weights"):
        tags.add(TAG_LOADING)
    if f in _FORWARD_FUNCS:
        tags.add(TAG_FORWARD)
    if _KERNEL_PATHS.search(p) is not None:
        tags.add(TAG_KERNEL)
    return frozenset(tags)


def raised_in(tags: frozenset[str]) -> str | None:
    """The start-up step a traceback's frame ``tags`` say its error was raised in (``capture``,
    ``kv_pool``, ``loading`` or ``forward``), or ``None`` when they name none."""
    for tag, step in STEPS:
        if tag in tags:
            return step
    return None
