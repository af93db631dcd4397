"""What a user should do about each verdict on an SGLang log, worded from the log's own evidence
and in SGLang's flags.

:func:`advise` gives the sentence, :func:`moves` the knobs it moves and which way: both read the
same evidence, so that the direction the tests check is the direction the user is told. Advice
for a verdict read from frames alone (a traceback cut before its exception,
:data:`~autotune.crashes.TAG_UNFINISHED`) names no cause the frames do not show.
"""

from __future__ import annotations

import re

from autotune.crashes import (
    CUSTOM_ALL_REDUCE,
    TAG_INNERMOST,
    TAG_LOADING,
    TAG_UNFINISHED,
    AdviceContext,
    Move,
)
from autotune.engines.sglang import _crash_memory as memory
from autotune.engines.sglang._crash_rules import (
    TAG_KERNEL,
    TAG_KV_SLOTS,
    TAG_SYMM_MEM,
    is_collective_timeout,
)

_KV_SLOTS_TEXT = re.compile(r"(?:Prefill|Decode|Extend) out of memory\.?", re.I)

_AMBIGUOUS = re.compile(r"ambiguous option: (--?[\w-]+)(?:=\S*)? could match (.+)")
_UNRECOGNIZED = re.compile(r"unrecognized arguments?: (.+)")
_BAD_VALUE = re.compile(r"argument (--?[\w-]+(?:/--?[\w-]+)*): (.+)")
_REQUIRED = re.compile(r"the following arguments are required: (.+)")
# a flag or a setting's name in an error message: "--enable-deterministic-inference",
# "kv_cache_dtype", "speculative_num_steps"
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*)")
_SETTING = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+){1,5})\b")
#: NCCL failing to set up its shared-memory transport: a segment in /dev/shm it cannot create (a
#: container's 64 MB default), reported as a system error
_SHM = re.compile(
    r"/dev/shm|shared memory segment|ncclShmOpen|unhandled system error|ncclSystemError", re.I
)
_PIECEWISE = re.compile(r"piecewise|\bPCG\b", re.I)
_FRAME_LINE = re.compile(r'^\s*File "')


def named_argument(evidence: str) -> str | None:
    """The flag (``--foo-bar``) or setting (``foo_bar``) an argument error's line names."""
    m = _FLAG.search(evidence)
    if m is not None:
        return m.group(1)
    m = _SETTING.search(evidence)
    return m.group(1) if m is not None else None


def _knob(name: str) -> str:
    """A flag or setting name as a knob: ``--num-steps`` -> ``num_steps``."""
    return name.lstrip("-").replace("-", "_")


def _decided_by_line(ctx: AdviceContext) -> bool:
    """The verdict's evidence is a message, not a frame of a traceback cut before its error."""
    return TAG_UNFINISHED not in ctx.tags and not _FRAME_LINE.match(ctx.evidence or "")


def _raised_in_custom_all_reduce(ctx: AdviceContext) -> bool:
    """Custom all-reduce is where the capture failed: named in the error line, or the innermost
    frame of a cut traceback (not one it passed through, such as its capture context manager)."""
    if not CUSTOM_ALL_REDUCE.search(ctx.evidence or ""):
        return False
    return _decided_by_line(ctx) or TAG_INNERMOST in ctx.tags


def moves(ctx: AdviceContext) -> tuple[Move, ...]:
    """The knobs :func:`advise` moves for this verdict and which way."""
    evidence = ctx.evidence or ""
    category = ctx.category
    if category == "oom_kv_pool":
        if memory.is_cuda_oom(evidence):
            return (("mem_fraction_static", "lower"),)
        suggested = ctx.settings.get(memory.SUGGESTED)
        if suggested and _at_least(ctx.settings.get("mem_fraction_static"), suggested):
            return (("tp_size", "raise"),)
        return (("mem_fraction_static", "raise"),)
    if category == "oom_cuda_graph":
        return (("cuda_graph_max_bs", "lower"), ("mem_fraction_static", "lower"))
    if category == "oom_runtime":
        if "alloc_req_slots" in evidence:
            return (("max_running_requests", "lower"),)
        if _KV_SLOTS_TEXT.search(evidence) or TAG_KV_SLOTS in ctx.tags:
            return (("max_running_requests", "lower"), ("mem_fraction_static", "raise"))
        if TAG_LOADING in ctx.tags:
            return (("tp_size", "raise"),)
        return (
            ("mem_fraction_static", "lower"),
            ("max_running_requests", "lower"),
            ("chunked_prefill_size", "lower"),
        )
    if category == "unsupported_arch":
        lower = evidence.lower()
        if "shared memory" in lower:
            return (("speculative_eagle_topk", "lower"), ("attention_backend", "change"))
        if TAG_SYMM_MEM in ctx.tags or "symm" in lower or "multicast" in lower:
            return (("enable_torch_symm_mem", "disable"),)
        return (("attention_backend", "change"),)
    if category == "graph_capture_other":
        if _raised_in_custom_all_reduce(ctx):
            return (("custom_all_reduce", "disable"),)
        if not _decided_by_line(ctx):
            return ()
        if _PIECEWISE.search(evidence):
            return (("piecewise_cuda_graph", "disable"),)
        return (("cuda_graph", "disable"),)
    if category == "nccl_error":
        if re.search(r"nvshmem|connect EPS", evidence, re.I):
            return (("moe_a2a_backend", "change"),)
        if _SHM.search(evidence):
            return (("dev_shm", "check"),)
        return ()
    if category == "bad_args":
        name = named_argument(evidence)
        return ((_knob(name), "fix"),) if name else ()
    if category == "port_in_use":
        return (("port", "change"),)
    return ()


def advise(ctx: AdviceContext) -> str:
    """One or two sentences: what happened, in terms of the settings, and what to change."""
    handler = _HANDLERS.get(ctx.category)
    if handler is None:
        return "no advice for this verdict"
    return handler(ctx)


def _value(ctx: AdviceContext) -> str:
    value = ctx.settings.get("mem_fraction_static")
    return f"current value {value}" if value else "current value not shown"


def _kv_pool(ctx: AdviceContext) -> str:
    evidence = ctx.evidence or ""
    if memory.is_cuda_oom(evidence):
        # the pool SGLang sized from the fraction did not fit the memory actually free
        return (
            f"lower --mem-fraction-static ({_value(ctx)}): the KV pool sized from it ran out of "
            "GPU memory while being allocated (the draft model's pool on top of the target's, or "
            "memory another process holds); free the GPU or leave more outside the static pool"
        )
    suggested = ctx.settings.get(memory.SUGGESTED)
    if suggested and _at_least(ctx.settings.get("mem_fraction_static"), suggested):
        return (
            f"raising --mem-fraction-static will not help: the weights leave no GPU memory for the "
            f"KV pool at {ctx.settings['mem_fraction_static']}, above the {suggested} SGLang "
            "suggests; use a higher --tp-size, a quantised checkpoint or a smaller draft model"
        )
    if suggested:
        minimum = ctx.settings.get(memory.MINIMUM)
        floor = f"SGLang's minimum viable value {minimum}, " if minimum else ""
        return (
            f"raise --mem-fraction-static above {suggested} ({floor}{_value(ctx)}): the loaded "
            "weights, draft weights included, leave no GPU memory for the KV pool"
        )
    if memory.is_nonpositive_pool(evidence):
        return (
            f"raise --mem-fraction-static ({_value(ctx)}): the KV pool profiled after the weights "
            "came out empty (zero or fewer tokens), so the weights leave no room for it"
        )
    return (
        "raise --mem-fraction-static: the KV pool did not fit after the target and draft "
        f"weights ({_value(ctx)})"
    )


def _at_least(value: str | None, floor: str) -> bool:
    """``value`` (a fraction the log shows) is at or above ``floor``."""
    try:
        return value is not None and float(value) >= float(floor)
    except ValueError:
        return False


def _cuda_graph(ctx: AdviceContext) -> str:
    which = "the EAGLE draft model's" if ctx.draft else "the"
    return (
        "lower --cuda-graph-max-bs (--cuda-graph-max-bs-decode on newer SGLang) or lower "
        f"--mem-fraction-static ({_value(ctx)}): capturing {which} CUDA graphs ran out of the "
        "memory left outside the static pool"
    )


def _runtime(ctx: AdviceContext) -> str:
    evidence = ctx.evidence or ""
    if re.search(r"alloc_req_slots runs out of memory", evidence):
        return (
            "lower --max-running-requests: the pool of request slots ran out while serving "
            "(--mem-fraction-static does not size it)"
        )
    if (
        re.search(r"(?:Prefill|Decode|Extend) out of memory\.", evidence)
        or TAG_KV_SLOTS in ctx.tags
    ):
        return (
            "lower --max-running-requests or raise --mem-fraction-static: the KV pool ran out "
            "of token slots while serving"
        )
    if TAG_LOADING in ctx.tags:
        return (
            "the weights did not fit while loading: use a higher --tp-size, a quantised "
            "checkpoint or a smaller draft model (--mem-fraction-static does not help here)"
        )
    return (
        f"lower --mem-fraction-static ({_value(ctx)}) to leave room for activations, or lower "
        "--max-running-requests / --chunked-prefill-size: the GPU ran out of memory outside "
        "graph capture (prefill, warm-up or decode)"
    )


def _arch(ctx: AdviceContext) -> str:
    evidence = (ctx.evidence or "").lower()
    if "shared memory" in evidence:
        return (
            "a kernel needs more shared memory than this GPU offers: lower "
            "--speculative-eagle-topk / --speculative-num-draft-tokens or choose another "
            "--attention-backend"
        )
    if TAG_SYMM_MEM in ctx.tags or "symm" in evidence or "multicast" in evidence:
        return (
            "torch symmetric memory does not support this GPU (or this world size): drop "
            "--enable-torch-symm-mem and pick another all-reduce mode"
        )
    if TAG_KERNEL in ctx.tags or "unsupported architecture" in evidence:
        return (
            "a kernel library (FlashInfer, sgl-kernel, DeepGEMM, Triton) has no kernel for this "
            "GPU architecture on the path that failed: choose another --attention-backend, MoE or "
            "GEMM backend or quantisation, or install a build of the library for this GPU"
        )
    return (
        "this GPU architecture is not supported by the code path that failed: drop the option "
        "that needs it (an all-reduce mode such as FlashInfer fusion or torch symmetric memory, "
        "an attention backend or a quantisation built for other GPUs) or use an SGLang build "
        "compiled for this GPU"
    )


def _capture_other(ctx: AdviceContext) -> str:
    which = "the EAGLE draft model's " if ctx.draft else ""
    if not _decided_by_line(ctx) and not _raised_in_custom_all_reduce(ctx):
        return (
            f"{which}CUDA-graph capture failed, but the log ends before its error line, so "
            "the cause (out of memory or not) is not shown: find the exception at the end of the "
            "server's full log before changing a setting"
        )
    if _PIECEWISE.search(ctx.evidence or "") and not CUSTOM_ALL_REDUCE.search(ctx.evidence or ""):
        return (
            f"{which}piecewise CUDA-graph capture failed for a reason other than memory: run "
            "with --disable-piecewise-cuda-graph (memory settings will not help)"
        )
    if _raised_in_custom_all_reduce(ctx):
        return (
            f"{which}CUDA-graph capture failed in custom all-reduce (its CUDA kernels or the "
            "registration of the captured graphs' buffers), so memory settings will not help: "
            "run with --disable-custom-all-reduce, or without CUDA graphs"
        )
    return (
        f"{which}CUDA-graph capture failed for a reason other than memory, so lowering "
        "--mem-fraction-static or the graph batch size will not help: drop the option that "
        "breaks capture (an all-reduce mode such as FlashInfer fusion or NCCL_ALGO=Tree, an "
        "attention backend) or run this configuration without CUDA graphs"
    )


def _nccl(ctx: AdviceContext) -> str:
    if _SHM.search(ctx.evidence or "") and not re.search(r"nvshmem", ctx.evidence or "", re.I):
        return (
            "NCCL could not set up its transport between the GPUs on this host (a system call "
            "failed; most often it cannot create its segment in /dev/shm): give the container "
            "more shared memory (docker --shm-size or --ipc=host) and rerun with NCCL_DEBUG=INFO; "
            "this is not a memory, graph or all-reduce setting"
        )
    if re.search(r"nvshmem|connect EPS", ctx.evidence or "", re.I):
        return (
            "NVSHMEM (DeepEP's communication library) could not connect the GPUs: check the "
            "InfiniBand/RDMA devices the ranks use (--disaggregation-ib-device, NVSHMEM_HCA_LIST) "
            "and that every node reaches the others, or run without DeepEP (another "
            "--moe-a2a-backend); this is not a memory or graph setting"
        )
    if is_collective_timeout(ctx.evidence or ""):
        return (
            "a collective operation timed out (a rank died or hung): look for the first failing "
            "rank earlier in the log; if there is none, try another all-reduce mode "
            "(NCCL_ALGO=Tree does not work with CUDA graphs)"
        )
    return (
        "NCCL failed between the GPUs: try another all-reduce mode (--disable-custom-all-reduce, "
        "no NCCL_ALGO), check that every rank can reach the others (--dist-init-addr, firewall, "
        "NCCL_SOCKET_IFNAME) and that no other process holds the GPUs; rerun with "
        "NCCL_DEBUG=INFO for details"
    )


def _bad_args(ctx: AdviceContext) -> str:
    evidence = ctx.evidence or ""
    m = _AMBIGUOUS.search(evidence)
    if m is not None:
        return (
            f"this SGLang release has no flag {m.group(1)} (it could match {m.group(2).strip()}): "
            "use the spelling of the installed release"
        )
    m = _UNRECOGNIZED.search(evidence)
    if m is not None:
        return (
            f"this SGLang release does not know {m.group(1).strip()}: remove it or use the "
            "spelling of the installed release (python -m sglang.launch_server --help)"
        )
    m = _REQUIRED.search(evidence)
    if m is not None:
        return f"add the missing argument(s) {m.group(1).strip()} to the launch command"
    m = _BAD_VALUE.search(evidence)
    if m is not None:
        return f"fix the value of {m.group(1)}: {m.group(2).strip()}"
    name = named_argument(evidence)
    if name is not None:
        return f"SGLang rejected the value of {name} at start-up: fix {name} as the evidence says"
    return (
        "SGLang refused its arguments at start-up, and the log does not show which one: run "
        "the launch command by hand to see the error line"
    )


def _port_in_use(ctx: AdviceContext) -> str:
    return "the port is already in use: stop the process holding it or choose another port"


def _other(ctx: AdviceContext) -> str:
    evidence = ctx.evidence or ""
    if re.search(r"Model architectures?\b.*not supported", evidence):
        return "this SGLang release cannot serve the model's architecture: check --model-path"
    if re.search(r"oom[-_]kill|Out Of Memory|^Killed|\d+ Killed\s", evidence):
        return "the process was killed, most likely for lack of host (CPU) memory"
    return (
        "the server crashed for a reason the tuned settings do not explain: read the evidence "
        "line and the traceback around it"
    )


def _unknown(ctx: AdviceContext) -> str:
    found = f"the last error line is {ctx.evidence!r}" if ctx.evidence else "it shows no error"
    if ctx.exit_code is None:
        how = "the server is gone"
    elif ctx.exit_code < 0:
        how = f"the server was killed by signal {-ctx.exit_code}"
    else:
        how = f"the server exited with code {ctx.exit_code}"
    return (
        f"{how} and nothing in the log says why ({found}): read the full log around that line "
        "(and dmesg / the container's events for a kill); no setting is implicated by it"
    )


def _ready(ctx: AdviceContext) -> str:
    return "the server started and answered its warm-up request"


def _running(ctx: AdviceContext) -> str:
    return "the server is serving requests"


def _starting(ctx: AdviceContext) -> str:
    where = f" (last step seen: {ctx.phase})" if ctx.phase else ""
    return (
        f"nothing decisive yet: the server is still starting{where}; if its process has "
        "exited, its exit status (logs classify --exit-code) makes this an unknown_crash"
    )


def _undecided(ctx: AdviceContext) -> str:
    return (
        "nothing to judge: the log shows no start-up step of SGLang's, no sign of a crash and no "
        "exit status (an excerpt too short, or not a server's log); give the whole server log, "
        "and its process's exit status (logs classify --exit-code) if it has exited"
    )


_HANDLERS = {
    "oom_kv_pool": _kv_pool,
    "oom_cuda_graph": _cuda_graph,
    "oom_runtime": _runtime,
    "unsupported_arch": _arch,
    "graph_capture_other": _capture_other,
    "nccl_error": _nccl,
    "bad_args": _bad_args,
    "port_in_use": _port_in_use,
    "other_crash": _other,
    "unknown_crash": _unknown,
    "ready": _ready,
    "running": _running,
    "starting": _starting,
    "undecided": _undecided,
}
