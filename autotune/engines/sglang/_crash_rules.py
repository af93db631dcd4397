"""What SGLang log lines mean: the patterns behind every crash category.

Each function reads one normalised line (see :mod:`autotune.crashes._lines`) and answers one
question: is it a specific cause, a generic sign of a crash, a hint, a warning, noise? What the
frames of a traceback were doing is told by :func:`frame_tags`. The wording comes from SGLang,
PyTorch, NCCL and argparse themselves. Context that a single line cannot carry (the frames above
an exception, the start-up phase) is passed in by the caller: the generic classifier of
:mod:`autotune.crashes`, through :class:`~autotune.engines.sglang._crashes.SGLangCrashRules`.
"""

from __future__ import annotations

import re

from autotune.crashes import TAG_DRAFT, TAG_LOADING

#: When a log shows several specific causes, the first of these wins. A port taken comes late (a
#: server that died of something else never got to bind it); NCCL failures come last: they are
#: usually the other ranks noticing that one rank died of something else.
CAUSE_PRIORITY: tuple[str, ...] = (
    "oom_kv_pool",
    "oom_cuda_graph",
    "graph_capture_other",
    "oom_runtime",
    "unsupported_arch",
    "bad_args",
    "port_in_use",
    "nccl_error",
)

# Traceback frame tags (what the code a frame belongs to was doing); TAG_DRAFT and TAG_LOADING are
# the classifier's own (it adds them from the start-up phase).
TAG_CAPTURE = "capture"
TAG_KV_POOL = "kv_pool"
TAG_SYMM_MEM = "symm_mem"
TAG_ARGS = "args"
TAG_NCCL = "nccl"

#: Which category an unfinished traceback (frames, no exception line) points to, best first.
TAG_HINTS: tuple[tuple[str, str], ...] = (
    (TAG_KV_POOL, "oom_kv_pool"),
    (TAG_CAPTURE, "graph_capture_other"),
    (TAG_SYMM_MEM, "unsupported_arch"),
    (TAG_ARGS, "bad_args"),
    (TAG_NCCL, "nccl_error"),
)

# graph-capture functions (capture, capture_one_batch_size, _capture_graph, ..._capture_cuda_graph),
# not EAGLE's capture_for_decode or hidden-state capture, which run while serving
_CAPTURE_FUNC = re.compile(r"(?:^|_)capture(?:$|_one|_graph|_init|_end|_begin|_cuda)")

_KV_POOL = re.compile(
    r"Not enough memory\.?\s*Please (?:try to )?increase --mem[-_]fraction[-_]static", re.I
)
_CAPTURE_FAILED = re.compile(
    r"captur\w* (?:the )?cuda ?graphs? failed|cuda graph captur\w* failed"
    r"|failed to capture (?:the )?cuda ?graph",
    re.I,
)
_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation"
    r"|CUBLAS_STATUS_ALLOC_FAILED|CUBLAS_STATUS_NOT_INITIALIZED|HIP out of memory",
    re.I,
)
_OOM_WORDS = re.compile(r"\bout of memory\b", re.I)
_HOST_MEMORY = re.compile(r"CPUAllocator|host memory|oom[-_]kill|pinned memory", re.I)
_KV_RUNTIME = re.compile(r"\b(?:Prefill|Decode|Extend) out of memory\.", re.I)
_CAPTURE_OP = re.compile(
    r"operation not permitted when stream is capturing|cudaErrorStreamCapture\w*"
    r"|operation failed due to a previous error during capture"
    r"|(?:during|while) (?:cuda )?graph captur"
    r"|not (?:allowed|supported|permitted) (?:during|while) (?:cuda )?(?:graph )?captur",
    re.I,
)
_NCCL = re.compile(
    r"\bNCCL (?:error|Error \d+)|\bnccl(?:InternalError|SystemError|UnhandledCudaError"
    r"|InvalidUsage|InvalidArgument|RemoteError)\b"
    r"|Watchdog caught collective operation timeout|NCCL operations have failed or timed out"
    r"|watchdog thread terminated with exception|DistBackendError"
    r"|NCCL communicator was aborted|ncclCommInitRank failed|NCCL (?:work|operation) timed? ?out"
    r"|ProcessGroupNCCL\S*\s.{0,80}(?:timed out|timeout|exception)",
    re.I,
)
#: A port another program holds: uvicorn's bind, torch's TCPStore, ZMQ ("[Errno 98] error while
#: attempting to bind on address ...: address already in use", "code: -98, name: EADDRINUSE").
_PORT_IN_USE = re.compile(
    r"address already in use|\bEADDRINUSE\b|\[Errno 98\]|error while attempting to bind on address",
    re.I,
)
#: An NCCL failure that is a collective running out of time (a rank that died or hung).
_COLLECTIVE_TIMEOUT = re.compile(r"watchdog|timeout|timed out", re.I)
_NCCL_WARN = re.compile(r"\bNCCL WARN\b")
_NCCL_WARN_FAILURE = re.compile(
    r"refused|reset by peer|timed? ?out|abort|fail|error|unreachable|exited|closed|unhandled"
    r"|could not connect|no route",
    re.I,
)
_ARCH = re.compile(
    r"only supports sm_?\d+|no kernel image is available|cudaErrorNoKernelImageForDevice"
    r"|No supported CUDA architectures? found"
    r"|(?:compute|device|cuda|gpu) capability\b[^.;]{0,60}?\b(?:not supported|unsupported"
    r"|is not compatible|not in its|below|at least|or (?:higher|above|newer)|minimum"
    r"|required|requires|too (?:low|old))"
    r"|Minimum capability: ?\d+"
    r"|(?:unsupported|not supported|unknown) (?:gpu|cuda|sm|device) arch"
    r"|\bsm_?\d{2,3}[af]?\b[^.;]{0,40}?\b(?:not supported|unsupported|is not compatible)"
    r"|(?:not supported|unsupported|only (?:supported|available)) on (?:this|the current|your)"
    r" (?:gpu|device|architecture|hardware)"
    r"|(?:only supports?|requires?|only supported on|only available on|needs) (?:an? )?"
    r"(?:Ampere|Hopper|Blackwell|Ada|Turing|Volta|sm_?\s*(?:>=?|\+)?\s*\d{2,3}"
    r"|GPUs? with compute capability)"
    r"|multicast (?:operations are|is) not supported|architecture table"
    r"|out of resource: shared memory",
    re.I,
)
_MODEL_ARCH = re.compile(r"Model architectures?\b|architectures? \[", re.I)
_ERRORISH = re.compile(r"error|fail|what\(\)|fatal|abort|exception|^\s*\[E\d", re.I)
_ARGPARSE = re.compile(
    r"\berror: (?:unrecognized arguments?|argument -|ambiguous option|the following arguments"
    r" are required|one of the arguments|invalid choice|expected one argument"
    r"|unrecognized option)"
    r"|\bNo such option: -|\bGot unexpected extra argument"
)
_USAGE = re.compile(r"^\s*usage: \S+")
_ARG_EXCEPTIONS = frozenset(
    {
        "AssertionError",
        "ValueError",
        "TypeError",
        "NotImplementedError",
        "ArgumentError",
        "ArgumentTypeError",
    }
)
_ARG_WORDS = re.compile(
    r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b"
    r"|\bspeculative[ _-]\w+"
    r"|\b(?:cuda_graph_\w+|mem_fraction_static|tp_size|pp_size|dp_size|ep_size"
    r"|max_running_requests|attention_backend|page_size|chunked_prefill_size)\b"
)
_STRONG = re.compile(
    r"hit an exception|Received sigquit from a child process|Initialization failed"
    r"|scheduler is dead|Child process unexpectedly failed"
    r"|Segmentation fault|core dumped|Fatal Python error|Segfault encountered"
    r"|terminate called after throwing"
    r"|srun: error: .*(?:Exited with exit code [1-9]|Killed|Out Of Memory|terminated|CANCELLED)"
    r"|slurmstepd: error: .*(?:oom[-_]kill|CANCELLED|Killed|Out Of Memory)"
    r"|\bexited with (?:exit )?code [1-9]|^\s*Killed\s*$|\d+ Killed\s"
)
_WARNING = re.compile(r"\bWARNING\b|\bWARN\b|Warning:|\w+Warning\b|^\s*\[W[\d ]|^\s*W\d{4} ")
_NOISE = (
    " NCCL INFO ",
    "Using a slow tokenizer",
    "warnings.warn(",
    "KV cache pool is full. Retract requests",
    "out of memory happened",
)

# Lowercase words of which a line must contain at least one to mean anything here (matched on
# the lowercased line: much faster than a case-insensitive search over every log line).
_TRIGGER = re.compile(
    r"memory|captur|nccl|error|exception|traceback|file \"|capabilit|sm_?\d|architectur"
    r"|kernel image|usage:|ready to roll|batch|sigquit|initializ|dead|kill|fault|abort"
    r"|terminat|mem_fraction|mem-fraction|what\(\)|warn|load weight|exit|fatal|not supported"
    r"|only support|multicast|resource|address|unrecognized|ambiguous|watchdog|require"
    r"|option|segment|dump|\[e\d|fail|interrupt|cuda graph|kv cache|eaddrinuse|errno 98"
)


def may_matter(line: str) -> bool:
    """False for the many lines that contain none of the words any pattern here looks for."""
    return _TRIGGER.search(line.lower()) is not None


def is_noise(line: str) -> bool:
    """Lines known to be harmless however alarming they look (NCCL INFO, tokenizer warnings)."""
    return any(marker in line for marker in _NOISE)


def is_warning(line: str) -> bool:
    """A warning-level line: it can hint at a cause but never decides a crash."""
    return _WARNING.search(line) is not None


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
    if (capturing and "replay" not in f) or ("cuda_graph_runner" in p and f == "__init__"):
        tags.add(TAG_CAPTURE)
    if "draft" in p or "draft" in f:
        tags.add(TAG_DRAFT)
    if f in ("init_memory_pool", "profile_max_num_token") or "pool_configurator" in p:
        tags.add(TAG_KV_POOL)
    if "symm_mem" in p or "symmetric_memory" in p or "symmmem" in f:
        tags.add(TAG_SYMM_MEM)
    if (
        p.endswith("server_args.py")
        or "/arg_groups/" in p
        or "speculative_hook" in p
        or f in ("prepare_server_args", "check_server_args", "from_cli_args")
    ):
        tags.add(TAG_ARGS)
    if "nccl" in p or "nccl" in f:
        tags.add(TAG_NCCL)
    if "model_loader" in p or f in ("load_model", "load_weights", "get_model", "create_weights"):
        tags.add(TAG_LOADING)
    return frozenset(tags)


def specific_cause(
    line: str,
    exception: tuple[str, str] | None,
    tags: frozenset[str],
    capture_phase: bool,
) -> tuple[str, int] | None:
    """The crash category a non-warning line names by itself or with its traceback's frames.

    Returns ``(category, position of the deciding text)``. ``tags`` are the frame tags of the
    traceback the line ends; ``capture_phase`` says that CUDA-graph capture had begun and not
    ended. A failure inside graph capture that is not a memory shortage is
    ``graph_capture_other`` whatever its text (SGLang wraps it as "Capture cuda graph failed").
    """
    in_capture_tb = exception is not None and TAG_CAPTURE in tags
    m = _KV_POOL.search(line)
    if m is not None:
        return "oom_kv_pool", m.start()
    if exception is not None and not _HOST_MEMORY.search(line):
        message = exception[1].lower()
        if message.startswith("not enough memory") or (
            TAG_KV_POOL in tags and "not enough memory" in message
        ):
            return "oom_kv_pool", 0
    m = _CAPTURE_FAILED.search(line)
    if m is not None:
        oom = _OOM.search(line) is not None or _OOM_WORDS.search(line) is not None
        return ("oom_cuda_graph" if oom else "graph_capture_other"), m.start()
    m = _KV_RUNTIME.search(line)
    if m is not None:
        return "oom_runtime", m.start()
    m = _OOM.search(line)
    if m is None and exception is not None and not _HOST_MEMORY.search(line):
        m = _OOM_WORDS.search(line)
    if m is not None:
        return _oom_category(tags, capture_phase), m.start()
    m = _CAPTURE_OP.search(line)
    if m is not None:
        return "graph_capture_other", m.start()
    m = _PORT_IN_USE.search(line)
    if m is not None:
        return "port_in_use", m.start()
    m = _NCCL.search(line)
    if m is not None:
        return ("graph_capture_other" if in_capture_tb else "nccl_error"), m.start()
    if exception is not None or _ERRORISH.search(line):
        m = _ARCH.search(line)
        if m is not None and not _MODEL_ARCH.search(line):
            return ("graph_capture_other" if in_capture_tb else "unsupported_arch"), m.start()
    m = _ARGPARSE.search(line)
    if m is not None:
        return "bad_args", m.start()
    if exception is not None:
        return _from_context(exception, tags)
    return None


def _oom_category(tags: frozenset[str], capture_phase: bool) -> str:
    if TAG_CAPTURE in tags:
        return "oom_cuda_graph"
    if tags & {TAG_LOADING, TAG_KV_POOL}:
        return "oom_runtime"
    return "oom_cuda_graph" if capture_phase else "oom_runtime"


def _from_context(exception: tuple[str, str], tags: frozenset[str]) -> tuple[str, int] | None:
    kind, message = exception
    if TAG_CAPTURE in tags:
        return "graph_capture_other", 0
    lower = message.lower()
    if TAG_SYMM_MEM in tags and (
        kind == "KeyError" or "not supported" in lower or "capability" in lower
    ):
        return "unsupported_arch", 0
    if TAG_NCCL in tags:
        return "nccl_error", 0
    if kind in _ARG_EXCEPTIONS:
        if TAG_ARGS in tags:
            return "bad_args", 0
        if TAG_LOADING not in tags and _ARG_WORDS.search(message):
            return "bad_args", 0
    return None


def is_collective_timeout(evidence: str) -> bool:
    """An NCCL verdict's evidence that names a time-out (the watchdog, a collective timed out)."""
    return _COLLECTIVE_TIMEOUT.search(evidence) is not None


def is_strong_crash(line: str) -> bool:
    """A line that only a dying server prints ("Scheduler hit an exception", sigquit, ...)."""
    return _STRONG.search(line) is not None


def hint_of(line: str) -> tuple[str, int] | None:
    """A category a line suggests without deciding it (NCCL WARN, argparse usage, arch notes)."""
    if _NCCL_WARN.search(line) and _NCCL_WARN_FAILURE.search(line):
        return "nccl_error", 0
    m = _USAGE.match(line)
    if m is not None:
        return "bad_args", 0
    m = _ARCH.search(line)
    if m is not None and not _MODEL_ARCH.search(line):
        return "unsupported_arch", m.start()
    return None
