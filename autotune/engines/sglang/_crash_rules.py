"""What SGLang log lines mean: the patterns behind every crash category.

Each function reads one normalised line (see :mod:`autotune.crashes._lines`) and answers one
question: is it a specific cause, a generic sign of a crash, a hint, a warning, noise? Where in
the code a traceback's error was raised is told by :mod:`._crash_frames`, the memory messages
(the KV pool in every wording, which way an out-of-memory error points) are read by
:mod:`._crash_memory`. The wording comes from SGLang, PyTorch, NCCL, argparse and the kernel
libraries themselves. Context that a single line cannot carry (the frames above
an exception, the start-up phase) is passed in by the caller: the generic classifier of
:mod:`autotune.crashes`, through :class:`~autotune.engines.sglang._crashes.SGLangCrashRules`.
"""

from __future__ import annotations

import re

from autotune.crashes import CUDA_ERROR, TAG_LOADING, LineMarks
from autotune.engines.sglang import _crash_memory as memory
from autotune.engines.sglang._crash_frames import TAG_ARGS as TAG_ARGS
from autotune.engines.sglang._crash_frames import TAG_CAPTURE as TAG_CAPTURE
from autotune.engines.sglang._crash_frames import TAG_FORWARD as TAG_FORWARD
from autotune.engines.sglang._crash_frames import TAG_HINTS as TAG_HINTS
from autotune.engines.sglang._crash_frames import TAG_KERNEL as TAG_KERNEL
from autotune.engines.sglang._crash_frames import TAG_KV_POOL as TAG_KV_POOL
from autotune.engines.sglang._crash_frames import TAG_KV_SLOTS as TAG_KV_SLOTS
from autotune.engines.sglang._crash_frames import TAG_NCCL as TAG_NCCL
from autotune.engines.sglang._crash_frames import TAG_SYMM_MEM as TAG_SYMM_MEM
from autotune.engines.sglang._crash_frames import frame_tags as frame_tags

_CAPTURE_FAILED = re.compile(
    r"captur\w* (?:the )?cuda ?graphs? failed|cuda graph captur\w* failed"
    r"|failed to capture (?:the )?cuda ?graph",
    re.I,
)
_CAPTURE_OP = re.compile(
    r"operation not permitted when stream is capturing|cudaErrorStreamCapture\w*"
    r"|operation failed due to a previous error during capture"
    r"|(?:during|while) (?:cuda )?graph captur"
    r"|not (?:allowed|supported|permitted) (?:during|while) (?:cuda )?(?:graph )?captur",
    re.I,
)
# custom all-reduce registering a captured graph's buffers (only done at a capture's end), named
# in a quoted call rather than a frame ("torch.ops.sgl_kernel.get_graph_buffer_ipc_meta"); in an
# info-level record it is the logger's tag ("INFO custom_all_reduce.register_graph_buffers:
# Registering 595 cuda graph addresses"), a healthy step
_GRAPH_BUFFER_CALL = re.compile(r"\b(?:register|get)_graph_buffers?\w*", re.I)
_INFO_RECORD = re.compile(r"^\s*(?:INFO|DEBUG)\b")
_NCCL = re.compile(
    r"\bNCCL (?:error|Error \d+)|\bnccl(?:InternalError|SystemError|UnhandledCudaError"
    r"|InvalidUsage|InvalidArgument|RemoteError)\b"
    r"|Watchdog caught collective operation timeout|NCCL operations have failed or timed out"
    r"|watchdog thread terminated with exception|DistBackendError"
    r"|NCCL communicator was aborted|ncclCommInitRank failed|NCCL (?:work|operation) timed? ?out"
    r"|ProcessGroupNCCL\S*\s.{0,80}(?:timed out|timeout|exception)"
    # NVSHMEM (DeepEP's communication library) failing to connect the GPUs: "connect EPS failed",
    # "nvshmem setup connections failed", "NVSHMEM API called before NVSHMEM initialization"
    r"|\bnvshmem\w*\b[^.;]{0,60}?\b(?:failed|error)\b|\bconnect EPS failed"
    r"|NVSHMEM API called before NVSHMEM initialization",
    re.I,
)
# torch's NCCL watchdog reporting a CUDA error of the GPU (an illegal memory access): the watchdog
# is only the messenger, the failure is the CUDA error
_WATCHDOG_CUDA_ERROR = re.compile(
    r"watchdog thread terminated with exception:\s*(?:\[[^\]]*\]\s*)*CUDA error(?!.*nccl)", re.I
)
# "terminate called after throwing an instance of 'c10::DistBackendError'": a dying process; the
# what() line after it carries the cause
_TERMINATE = re.compile(r"terminate called after throwing")
#: A port another program holds: uvicorn's bind, torch's TCPStore, ZMQ ("[Errno 98] error while
#: attempting to bind on address ...: address already in use", "code: -98, name: EADDRINUSE").
_PORT_IN_USE = re.compile(
    r"address already in use|\bEADDRINUSE\b|\[Errno 98\]|error while attempting to bind on address",
    re.I,
)
#: An NCCL failure that is a collective running out of time (a rank that died or hung).
_COLLECTIVE_TIMEOUT = re.compile(r"watchdog|timeout|timed out", re.I)
#: The server's own words for a port another process holds ("port_base at 11434 is not available in
#: 30 seconds. port_base is used by a process already."), read on an error line.
_PORT_TAKEN = re.compile(
    r"\bport\w*\b[^.;]{0,40}?\b(?:is not available|is (?:already )?in use"
    r"|(?:is )?used by (?:a|another) process)",
    re.I,
)
_NCCL_WARN = re.compile(r"\bNCCL WARN\b")
_NCCL_WARN_FAILURE = re.compile(
    r"refused|reset by peer|timed? ?out|abort|fail|error|unreachable|exited|closed|unhandled"
    r"|could not connect|no route",
    re.I,
)
_ARCH = re.compile(
    r"only supports sm[ _]?\d+|no kernel image is available|cudaErrorNoKernelImageForDevice"
    r"|\bunsupported (?:compute|cuda|gpu|device) capabilit"
    r"|No supported CUDA architectures? found"
    r"|(?:compute|device|cuda|gpu) capability\b[^.;]{0,60}?\b(?:not supported|unsupported"
    r"|is not compatible|not in its|below|at least|or (?:higher|above|newer)|minimum"
    r"|required|requires|too (?:low|old))"
    r"|Min(?:imum)? capability: ?\d+"
    # a kernel's check that lists the SM families it runs on ("Only SM 10.x and 11.x are
    # supported", "only sm90 is supported"): printed only when it refuses the GPU
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
    r"|(?:unsupported|not supported|unknown) (?:gpu|cuda|sm|device) arch"
    # a kernel library's own check: "Unsupported architecture" (FlashInfer's TllmGenFmhaRunner,
    # DeepGEMM's assertions), not a model class ("Unsupported architecture: FooForCausalLM")
    r"|\bunsupported (?:compute )?architecture\b(?!s?\s*[:=]?\s*\[?['\"]?\w*For[A-Z])"
    r"|\bunsupported target\b[^.;]{0,80}\bsm_?\d{2,3}"
    r"|(?:not supported|unsupported|not available) (?:on|for) (?:sm_?|SM ?)\d{2,3}[af]?\b"
    r"|\bsm_?\d{2,3}[af]?\b[^.;]{0,40}?\b(?:not supported|unsupported|is not compatible)"
    r"|(?:not supported|unsupported|only (?:supported|available)) (?:on|in|for) (?:this|the current"
    r"|your) (?:gpu|device|architecture|arch|hardware)"
    r"|(?:only supports?|requires?|only supported on|only available on|needs) (?:an? )?"
    r"(?:Ampere|Hopper|Blackwell|Ada|Turing|Volta|sm_?\s*(?:>=?|\+)?\s*\d{2,3}"
    r"|GPUs? with compute capability)"
    r"|multicast (?:operations are|is) not supported|architecture table"
    r"|out of resource: shared memory"
    # sgl_kernel's loader, which picks the build of its ops library for the GPU's SM and finds
    # none that loads ("[sgl_kernel] CRITICAL: Could not load any common_ops library!")
    r"|could not load any common_ops librar"
    # Triton's bundled PTX assembler failing for the GPU's SM (a toolchain older than the GPU):
    # "ptxas -lineinfo -v --gpu-name=sm_120 ... returned non-zero exit status 255"
    r"|\bptxas\b[^'\"]{0,200}--gpu-name[= ]sm_?\d{2,3}[af]?\b[^'\"]{0,300}['\"]? returned non-zero",
    re.I,
)
# what a kernel library's own check says when it rejects the GPU (raised in its frames)
# a check that names the lowest SM it runs on ("SGlang only supports sm 75 and above"): printed
# only when it refuses the GPU, so it decides without an error word on the line
_ARCH_REFUSAL = re.compile(
    r"\bonly supports? sm[ _]?\d{2,3}[af]?\+?(?:\s+and\s+(?:above|higher|newer|later))", re.I
)
_KERNEL_ARCH_WORDS = re.compile(r"\barch|\bsm_?\d{2,3}|\bSM ?\d{2,3}\b|compute capability", re.I)
_MODEL_ARCH = re.compile(r"Model architectures?\b|architectures? \[", re.I)
_ERRORISH = re.compile(r"error|fail|what\(\)|fatal|abort|exception|^\s*\[E\d", re.I)
_ARGPARSE = re.compile(
    r"\berror: (?:unrecognized arguments?|argument -|ambiguous option|the following arguments"
    r" are required|one of the arguments|invalid choice|expected one argument"
    r"|unrecognized option)"
    r"|\bNo such option: -|\bGot unexpected extra argument"
)
_USAGE = re.compile(r"^\s*usage: \S+")
#: SGLang's own line when its piecewise CUDA graph fails to capture or run ("Piecewise CUDA Graph
#: failed with error: ..."): the capture's cause, whatever the error says (memory was read first).
_PIECEWISE_FAILED = re.compile(r"\bPiecewise CUDA Graph failed\b", re.I)
#: A check that refuses a setting's value and lists the ones it takes ("Invalid kv_cache_dtype:
#: float16. Valid values are: (...)"), read on an exception line.
_ARG_VALUE = re.compile(
    r"\binvalid [a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|\bvalid (?:values|choices|options) are\b"
    r"|\bmust be one of\b",
    re.I,
)
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
    # ROCm's fatal GPU fault (the HSA runtime aborts the process)
    r"|Memory access fault by GPU node"
    r"|terminate called after throwing"
    r"|srun: error: .*(?:Exited with exit code [1-9]|Killed|Out Of Memory|terminated|CANCELLED)"
    r"|slurmstepd: error: .*(?:oom[-_]kill|CANCELLED|Killed|Out Of Memory)"
    r"|\bexited with (?:exit )?code [1-9]|^\s*Killed\s*$|\d+ Killed\s"
    # the server's argparse printing its usage: it refused the command line and exits (the error
    # line after the usage block may be cut off)
    r"|^\s*usage: (?:\S*launch_server(?:\.py)?|sglang(?: serve)?|python3? -m sglang\S*)\s"
)
_NOISE = (
    " NCCL INFO ",
    "Using a slow tokenizer",
    "warnings.warn(",
)
#: (SGLang's retraction of requests when its KV pool is full, "Decode out of memory happened.
#: #retracted_reqs: 1", is not noise but a sign of serving: its progress step is "running")

_TRIGGER = re.compile(
    r"memory|captur|nccl|error|exception|traceback|file \"|capabilit|sm_?\d|architectur"
    r"|kernel image|usage:|ready to roll|batch|sigquit|initializ|dead|kill|fault|abort"
    r"|terminat|mem_fraction|mem-fraction|what\(\)|warn|load weight|exit|fatal|not supported"
    r"|only support|multicast|resource|address|unrecognized|ambiguous|watchdog|require"
    r"|option|segment|dump|\[e\d|fail|interrupt|cuda graph|kv cache|eaddrinuse|errno 98"
    r"|profiled value|max_total_num_tokens|kv pool|minimum viable|graph_buffer|common_ops"
    r"|gfx\d|^\s*torch\.(?:cuda\.)?o\w{0,15}\s*$|nvshmem|connect eps"
)
#: The words of SGLang's log for the classifier's cheap questions about every line.
MARKS = LineMarks(trigger=_TRIGGER, noise=_NOISE, strong=_STRONG)


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
    if _TERMINATE.search(line):
        return None
    at = memory.kv_pool_message(line, exception, tags)
    if at is not None:
        return "oom_kv_pool", at
    found = _memory_cause(line, exception, tags, capture_phase)
    if found is not None:
        return found
    in_capture_tb = exception is not None and TAG_CAPTURE in tags
    m = _PIECEWISE_FAILED.search(line)
    if m is not None:
        return "graph_capture_other", m.start()
    m = _CAPTURE_OP.search(line)
    if m is None and not _INFO_RECORD.match(line):
        m = _GRAPH_BUFFER_CALL.search(line)
    if m is not None:
        return "graph_capture_other", m.start()
    m = _PORT_IN_USE.search(line)
    if m is None and (exception is not None or _ERRORISH.search(line)):
        m = _PORT_TAKEN.search(line)
    if m is not None:
        return "port_in_use", m.start()
    m = _NCCL.search(line)
    if m is not None and not _WATCHDOG_CUDA_ERROR.search(line):
        return ("graph_capture_other" if in_capture_tb else "nccl_error"), m.start()
    if exception is not None or _ERRORISH.search(line):
        m = _ARCH.search(line)
        if m is not None and not _MODEL_ARCH.search(line):
            return ("graph_capture_other" if in_capture_tb else "unsupported_arch"), m.start()
    m = _ARCH_REFUSAL.search(line)
    if m is not None:
        return "unsupported_arch", m.start()
    m = _ARGPARSE.search(line)
    if m is None and exception is not None and exception[0] in _ARG_EXCEPTIONS:
        m = _ARG_VALUE.search(line)
    if m is not None:
        return "bad_args", m.start()
    # any other CUDA error while CUDA graphs were being captured (not while loading weights) is
    # that capture failing, as when SGLang wraps it in "Capture cuda graph failed"
    m = CUDA_ERROR.search(line)
    if m is not None and capture_phase and TAG_LOADING not in tags:
        return "graph_capture_other", m.start()
    if exception is not None:
        return _from_context(exception, tags)
    return None


def _memory_cause(
    line: str,
    exception: tuple[str, str] | None,
    tags: frozenset[str],
    capture_phase: bool,
) -> tuple[str, int] | None:
    """A capture that failed (out of memory or not), the KV pool out of slots while serving, or a
    GPU out-of-memory error, whose category follows where it was raised."""
    m = _CAPTURE_FAILED.search(line)
    if m is not None:
        oom = memory.OOM.search(line) is not None or memory.OOM_WORDS.search(line) is not None
        return ("oom_cuda_graph" if oom else "graph_capture_other"), m.start()
    m = memory.KV_RUNTIME.search(line)
    if m is not None:
        return "oom_runtime", m.start()
    m = memory.OOM.search(line)
    if m is None and exception is not None and not memory.HOST_MEMORY.search(line):
        m = memory.OOM_WORDS.search(line)
    if m is not None:
        return memory.oom_category(tags, capture_phase), m.start()
    return None


def _from_context(exception: tuple[str, str], tags: frozenset[str]) -> tuple[str, int] | None:
    kind, message = exception
    if TAG_CAPTURE in tags:
        return "graph_capture_other", 0
    lower = message.lower()
    if TAG_SYMM_MEM in tags and (
        kind == "KeyError" or "not supported" in lower or "capability" in lower
    ):
        return "unsupported_arch", 0
    if TAG_KERNEL in tags and _KERNEL_ARCH_WORDS.search(message):
        return "unsupported_arch", 0
    if TAG_NCCL in tags:
        return "nccl_error", 0
    if kind in _ARG_EXCEPTIONS:
        if TAG_ARGS in tags:
            return "bad_args", 0
        if not tags & {TAG_LOADING, TAG_FORWARD} and _ARG_WORDS.search(message):
            return "bad_args", 0
    return None


def is_collective_timeout(evidence: str) -> bool:
    """An NCCL verdict's evidence that names a time-out (the watchdog, a collective timed out)."""
    return _COLLECTIVE_TIMEOUT.search(evidence) is not None


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
