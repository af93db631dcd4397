"""What a user should do about each verdict on an SGLang log, worded from the log's own evidence
and in SGLang's flags."""

from __future__ import annotations

import re

from autotune.crashes import CUSTOM_ALL_REDUCE, TAG_LOADING, AdviceContext
from autotune.engines.sglang import _crash_memory as memory
from autotune.engines.sglang._crash_rules import (
    TAG_KERNEL,
    TAG_KV_SLOTS,
    TAG_SYMM_MEM,
    is_collective_timeout,
)

_AMBIGUOUS = re.compile(r"ambiguous option: (--?[\w-]+)(?:=\S*)? could match (.+)")
_UNRECOGNIZED = re.compile(r"unrecognized arguments?: (.+)")
_BAD_VALUE = re.compile(r"argument (--?[\w-]+(?:/--?[\w-]+)*): (.+)")
_REQUIRED = re.compile(r"the following arguments are required: (.+)")


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
    if CUSTOM_ALL_REDUCE.search(ctx.evidence or ""):
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
    return (
        "SGLang rejected this combination of settings at start-up: change the values the "
        "evidence names (for EAGLE, set steps, top-k and draft tokens together or not at all)"
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


def _ready(ctx: AdviceContext) -> str:
    return "the server started and answered its warm-up request"


def _running(ctx: AdviceContext) -> str:
    return "the server is serving requests"


def _starting(ctx: AdviceContext) -> str:
    where = f" (last step seen: {ctx.phase})" if ctx.phase else ""
    return f"nothing decisive yet: the server is still starting{where}"


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
    "ready": _ready,
    "running": _running,
    "starting": _starting,
}
