"""What vLLM log lines mean: the patterns behind every crash category.

The wording comes from vLLM's own messages (its KV-cache check in ``v1/core``, its worker's
memory check, its engine-core start-up), from PyTorch (CUDA out of memory, CUDA errors), NCCL
and argparse. Each function reads one normalised line; context a line cannot carry (the frames
of its traceback, whether CUDA-graph capture is under way) is passed in by the generic
classifier of :mod:`autotune.crashes`.
"""

from __future__ import annotations

import re

from autotune.crashes import CUDA_ERROR, TAG_LOADING, LineMarks

TAG_CAPTURE = "capture"
TAG_PROFILE = "profile"
TAG_NCCL = "nccl"
TAG_ARGS = "args"
TAG_KV_CACHE = "kv_cache"

#: The category an unfinished traceback points to by its frame tags, best first.
TAG_HINTS: tuple[tuple[str, str], ...] = (
    (TAG_KV_CACHE, "oom_kv_pool"),
    (TAG_CAPTURE, "graph_capture_other"),
    (TAG_NCCL, "nccl_error"),
    (TAG_ARGS, "bad_args"),
)

#: vLLM's KV-cache check: no memory left for one block, or not enough for one max-length request
#: (v1 ``kv_cache_utils`` / ``kv_cache_planning``; the older engine's wording too).
KV_CACHE = re.compile(
    r"No available memory for the cache blocks"
    r"|larger than the available KV cache memory"
    r"|is larger than the maximum number of tokens that can be stored in KV cache"
    r"|Insufficient memory for the KV cache|num_gpu_blocks\s*(?:=|is)\s*0\b"
    # the engine's own count of KV-cache blocks (older engine) or tokens (v1) at zero
    r"|# GPU blocks: 0\b|GPU KV cache size: 0 tokens",
    re.I,
)
#: The memory profile leaving the KV cache nothing, or less than nothing: vLLM's "Available KV cache
#: memory: -1.08 GiB", the older engine's "the rest of the memory reserved for KV Cache is 0.00GiB"
#: and "kv_cache_size=-0.52GiB", vLLM-Ascend's worker "Available memory: 0, total memory: ...".
#: No cache block fits in such a budget, so the start-up fails whatever follows (the ValueError
#: that says so is often cut off an excerpt).
KV_NONPOSITIVE = re.compile(
    r"(?:\bAvailable (?:KV cache )?memory:|reserved for KV Cache is|\bkv_cache_size\s*=)"
    r"\s*(?:-\s*\d|0(?:\.0+)?(?![.\d]))",
    re.I,
)
#: The part of a KV-cache message that says the model's length is what does not fit.
MAX_MODEL_LEN = re.compile(r"max seq len|max_model_len|maximum number of tokens", re.I)
#: The instance's share asks for more than the GPU has free (another process holds memory).
FREE_MEMORY = re.compile(
    r"Free memory on device .{0,120}?is less than (?:desired GPU memory utilization"
    r"|the engine's budget)",
    re.I,
)
OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation"
    r"|CUBLAS_STATUS_ALLOC_FAILED|HIP out of memory"
    # a traceback whose last line was cut inside the exception's name: "torch.O" can only be
    # torch's OutOfMemoryError (no other exception in torch's or torch.cuda's namespace starts so)
    r"|^\s*torch\.(?:cuda\.)?O(?:u(?:t(?:O(?:f(?:M(?:e(?:m(?:o(?:r(?:y(?:E(?:r(?:r(?:o)?)?)?)?)?)?)?)?)?)?)?)?)?)?\s*$",
    re.I,
)
_HOST_MEMORY = re.compile(r"CPUAllocator|host memory|oom[-_]kill|pinned memory", re.I)
_CAPTURE_OP = re.compile(
    r"operation not permitted when stream is capturing|cudaErrorStreamCapture\w*"
    r"|operation failed due to a previous error during capture",
    re.I,
)
NCCL = re.compile(
    r"\bNCCL (?:error|Error \d+)|\bnccl(?:InternalError|SystemError|UnhandledCudaError"
    r"|InvalidUsage|InvalidArgument|RemoteError)\b"
    r"|Watchdog caught collective operation timeout|DistBackendError"
    r"|ncclCommInitRank failed|ProcessGroupNCCL\S*\s.{0,80}(?:timed out|timeout|exception)"
    # NVSHMEM (DeepEP's communication library) failing to connect the GPUs: "connect EPS failed",
    # "nvshmem setup connections failed", "NVSHMEM API called before NVSHMEM initialization"
    r"|\bnvshmem\w*\b[^.;]{0,60}?\b(?:failed|error)\b|\bconnect EPS failed"
    r"|NVSHMEM API called before NVSHMEM initialization",
    re.I,
)
_PORT_IN_USE = re.compile(
    r"address already in use|\bEADDRINUSE\b|\[Errno 98\]|error while attempting to bind", re.I
)
#: The server's own words for a port another process holds ("port_base at 11434 is not available in
#: 30 seconds. port_base is used by a process already."), read on an error line.
_PORT_TAKEN = re.compile(
    r"\bport\w*\b[^.;]{0,40}?\b(?:is not available|is (?:already )?in use"
    r"|(?:is )?used by (?:a|another) process)",
    re.I,
)
_ARCH = re.compile(
    r"no kernel image is available|cudaErrorNoKernelImageForDevice"
    r"|(?:compute|device|cuda|gpu) capability\b[^.;]{0,60}?\b(?:not supported|unsupported"
    r"|is not compatible|below|at least|or (?:higher|above|newer)|minimum|required|requires)"
    r"|(?:not supported|unsupported) (?:on|for) (?:sm_?|SM ?)\d{2,3}[af]?\b"
    r"|\bsm_?\d{2,3}[af]?\b[^.;]{0,40}?\b(?:not supported|unsupported|is not compatible)"
    r"|only supports? (?:Ampere|Hopper|Blackwell|sm[ _]?\d{2,3})"
    r"|\bunsupported (?:compute|cuda|gpu|device) capabilit"
    r"|Bfloat16 is only supported on GPUs with compute capability"
    # a quantization method's or kernel's minimum ("Minimum capability: 90. Current capability:
    # 86.", compressed-tensors' "Min capability: 80.") and a check that lists the SM families it
    # runs on ("Only SM 10.x and 11.x are supported")
    r"|\bMin(?:imum)? capability: ?\d+"
    r"|\bonly sm[ _]?\d{1,3}(?:\.x|\.\d+)?[af]?(?:(?:,|\s+and|\s+or)\s+(?:sm[ _]?)?\d{1,3}"
    r"(?:\.x|\.\d+)?[af]?)*\s+(?:is|are) supported"
    # a kernel's assertion naming the SMs it expects ("expected sm90 or sm100")
    r"|\bexpected (?:an? )?sm_?\d{2,3}[af]?\b(?:(?:,|\s+or|\s+and)\s+sm_?\d{2,3}[af]?\b)*"
    # AMD's architecture names: "supports ROCm gfx950 only", "Unsupported GPU architecture
    # detected gfx1100", "Unknown GPU architecture: gfx1151", "gfx942 is not supported"
    r"|\bsupports? (?:ROCm |AMD )?gfx\d{2,4}\w*(?:(?:,|\s+or|\s+and)\s+gfx\d{2,4}\w*)* only\b"
    r"|\bonly supports? (?:ROCm |AMD )?gfx\d{2,4}"
    r"|\bgfx\d{2,4}\w*\b[^.;]{0,40}?\b(?:not supported|unsupported|is not compatible)"
    r"|(?:unsupported|unknown) (?:gpu |amd |device )?architecture(?: detected)?:? ['\"]?gfx\d"
    # Triton's bundled PTX assembler failing for the GPU's SM (a toolchain older than the GPU):
    # "ptxas -lineinfo -v --gpu-name=sm_120 ... returned non-zero exit status 255"
    r"|\bptxas\b[^'\"]{0,200}--gpu-name[= ]sm_?\d{2,3}[af]?\b[^'\"]{0,300}['\"]? returned non-zero",
    re.I,
)
_ARGPARSE = re.compile(
    r"\berror: (?:unrecognized arguments?|argument -|ambiguous option|the following arguments"
    r" are required|invalid choice|expected one argument)"
)
#: pydantic's report on one of vLLM's config classes ("1 validation error for SpeculativeConfig").
_VALIDATION = re.compile(r"\d+ validation errors? for \w*Config\b|\bValue error, ", re.I)
#: A check that refuses a setting's value and lists the ones it takes ("Invalid kv_cache_dtype:
#: float16. Valid values are: (...)"), read on an exception line.
ARG_VALUE = re.compile(
    r"\binvalid [a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|\bvalid (?:values|choices|options) are\b"
    r"|\bmust be one of\b",
    re.I,
)
_ARG_EXCEPTIONS = frozenset({"ValueError", "TypeError", "NotImplementedError", "ArgumentError"})
#: Exceptions a check of a setting's value raises.
_ARG_CHECKS = _ARG_EXCEPTIONS | {"AssertionError", "ArgumentTypeError"}
_ARG_WORDS = re.compile(
    r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b|\bspeculative\w*|\bnum_speculative_tokens\b"
    r"|\b(?:gpu_memory_utilization|max_num_seqs|max_num_batched_tokens|tensor_parallel_size"
    r"|block_size|max_model_len|draft_tensor_parallel_size|cudagraph_capture_sizes)\b"
)
_STRONG = re.compile(
    r"Engine core initialization failed|EngineCore failed to start|EngineDeadError"
    r"|Engine process failed to start|Worker proc \S+ died|WorkerProc initialization failed"
    r"|WorkerProc failed to start"
    r"|died unexpectedly|Segmentation fault|core dumped|Fatal Python error"
    r"|Memory access fault by GPU node"
    r"|Error executing method"
    r"|terminate called after throwing|^\s*Killed\s*$"
)
_NOISE = (" NCCL INFO ", "warnings.warn(", "Using a slow tokenizer")
_TRIGGER = re.compile(
    r"memory|captur|nccl|error|exception|traceback|file \"|capabilit|sm_?\d|kernel image"
    r"|usage:|startup complete|throughput|initializ|dead|died|kill|fault|abort|terminat"
    r"|what\(\)|warn|loading|exit|fatal|not supported|only support|address|unrecognized"
    r"|ambiguous|watchdog|require|segment|dump|\[e\d|fail|interrupt|kv cache|cache blocks"
    r"|errno 98|eaddrinuse|validation|graph|gpu blocks|gfx\d|^\s*torch\.(?:cuda\.)?o\w{0,15}\s*$"
    r"|nvshmem|connect eps"
)
#: The words of vLLM's log for the classifier's cheap questions about every line.
MARKS = LineMarks(trigger=_TRIGGER, noise=_NOISE, strong=_STRONG)


# setting up torch.distributed and the parallel groups (the NCCL communicators among them): a
# start-up that dies here failed to connect its ranks
_DIST_INIT_FUNCS = frozenset(
    {
        "init_distributed_environment",
        "init_worker_distributed_environment",
        "initialize_model_parallel",
        "ensure_model_parallel_initialized",
        "init_model_parallel_group",
        "init_process_group",
    }
)


# a collective between the ranks: torch.distributed's own frames, the tensor-parallel group's
# all-reduce / all-gather (a traceback cut inside one was waiting on the other ranks)
_COLLECTIVE_FRAME = re.compile(
    r"torch/distributed/|\btensor_model_parallel_all_(?:reduce|gather)\b|\ball_gather_object\b"
)


def frame_tags(path: str, func: str) -> frozenset[str]:
    """What one traceback frame of vLLM was doing, by its file and function."""
    tags: set[str] = set()
    where = f"{path} {func}".lower()
    if "capture" in func.lower() or "cudagraph" in where or "cuda_graph" in where:
        tags.add(TAG_CAPTURE)
    if func in ("profile_run", "determine_available_memory", "_dummy_sampler_run"):
        tags.add(TAG_PROFILE)
    if func in ("load_model", "load_weights") or "model_loader" in path:
        tags.add(TAG_LOADING)
    if "nccl" in where or func in _DIST_INIT_FUNCS or _COLLECTIVE_FRAME.search(where):
        tags.add(TAG_NCCL)
    if (
        "arg_utils" in path
        or "/config/" in path
        or func in ("create_engine_config", "parse_args", "check_parse_args")
    ):
        tags.add(TAG_ARGS)
    if "kv_cache_utils" in path or "kv_cache_planning" in path:
        tags.add(TAG_KV_CACHE)
    return frozenset(tags)


def specific_cause(
    line: str,
    exception: tuple[str, str] | None,
    tags: frozenset[str],
    capture_phase: bool,
) -> tuple[str, int] | None:
    """The crash category a non-warning line names by itself or with its traceback's frames,
    and where in the line the deciding text starts."""
    m = KV_CACHE.search(line) or KV_NONPOSITIVE.search(line)
    if m is not None:
        return "oom_kv_pool", m.start()
    m = FREE_MEMORY.search(line)
    if m is not None:
        return "oom_runtime", m.start()
    m = OOM.search(line)
    if m is None and exception is not None and not _HOST_MEMORY.search(line):
        m = re.search(r"\bout of memory\b", line, re.I)
    if m is not None:
        if TAG_CAPTURE in tags or (capture_phase and not tags & {TAG_PROFILE, TAG_LOADING}):
            return "oom_cuda_graph", m.start()
        return "oom_runtime", m.start()
    m = _CAPTURE_OP.search(line)
    if m is not None:
        return "graph_capture_other", m.start()
    m = _PORT_IN_USE.search(line)
    if m is None and (exception is not None or re.search(r"error|fail", line, re.I)):
        m = _PORT_TAKEN.search(line)
    if m is not None:
        return "port_in_use", m.start()
    m = NCCL.search(line)
    if m is not None:
        return "nccl_error", m.start()
    m = _ARCH.search(line)
    if m is not None and (exception is not None or re.search(r"error|fail", line, re.I)):
        return "unsupported_arch", m.start()
    m = _ARGPARSE.search(line) or _VALIDATION.search(line)
    if m is None and exception is not None and exception[0] in _ARG_CHECKS:
        m = ARG_VALUE.search(line)
    if m is not None:
        return "bad_args", m.start()
    # any other CUDA error while CUDA graphs were being captured (not in the profiling run nor the
    # weights' loading) is that capture failing: an illegal access in a kernel run for capture,
    # custom all-reduce failing to register the captured graphs' buffers
    m = CUDA_ERROR.search(line)
    if m is not None and capture_phase and not tags & {TAG_PROFILE, TAG_LOADING}:
        return "graph_capture_other", m.start()
    if exception is not None:
        return _from_context(exception, tags, capture_phase)
    return None


def _from_context(
    exception: tuple[str, str], tags: frozenset[str], capture_phase: bool
) -> tuple[str, int] | None:
    kind, message = exception
    if TAG_CAPTURE in tags:
        return "graph_capture_other", 0
    if TAG_NCCL in tags:
        return "nccl_error", 0
    if kind in _ARG_EXCEPTIONS:
        if TAG_ARGS in tags:
            return "bad_args", 0
        if not tags & {TAG_LOADING, TAG_PROFILE} and _ARG_WORDS.search(message):
            return "bad_args", 0
    return None


def hint_of(line: str) -> tuple[str, int] | None:
    """A category a line suggests without deciding it (argparse usage, an arch note)."""
    if re.match(r"^\s*usage: \S+", line):
        return "bad_args", 0
    m = _ARCH.search(line)
    if m is not None:
        return "unsupported_arch", m.start()
    return None
