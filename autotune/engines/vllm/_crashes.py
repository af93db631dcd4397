"""vLLM's crash rules: how its server log is read by the generic classifier.

:class:`VLLMCrashRules` hands the classifier of :mod:`autotune.crashes` the patterns of
:mod:`autotune.engines.vllm._crash_rules`, the healthy progress lines of a vLLM start-up (weights
loaded, memory profiled, KV cache sized, CUDA graphs captured, uvicorn serving, throughput lines)
and advice in vLLM's own knobs: ``gpu_memory_utilization``, ``max_model_len``,
``max_num_seqs``, ``max_num_batched_tokens``, the CUDA-graph capture size and ``--enforce-eager``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from autotune.crashes import (
    CUSTOM_ALL_REDUCE,
    TAG_UNFINISHED,
    AdviceContext,
    LineRules,
    ModuleCrashRules,
    Move,
    Progress,
)
from autotune.engines.vllm import _crash_rules as rules

_READY = "Application startup complete"
_RUNNING = re.compile(r"Avg prompt throughput:|Avg generation throughput:")
_CAPTURE_BEGIN = re.compile(r"Capturing CUDA graphs?\b|Capturing cudagraphs", re.I)
_CAPTURE_END = re.compile(r"Graph capturing finished", re.I)
_UTILIZATION = re.compile(
    r"gpu_memory_utilization['\"]?\s*[=:]\s*([0-9]*\.?[0-9]+)"
    r"|--gpu-memory-utilization[= ]+([0-9]*\.?[0-9]+)"
    r"|Desired GPU memory utilization is \(([0-9]*\.?[0-9]+)"
)
_STEPS = (
    # the first lines of every launch: the API server, then the engine core process, starting
    ("vLLM API server version", "API server starting"),
    ("Waiting for init message from front-end", "engine core starting"),
    ("Starting to load model", "loading weights"),
    ("Loading weights took", "weights loaded"),
    ("Model loading took", "weights loaded"),
    ("Memory profiling takes", "memory profiled"),
    ("Available KV cache memory", "KV cache sized"),
    ("GPU KV cache size", "KV cache allocated"),
    ("init engine (profile, create kv cache, warmup model) took", "engine initialised"),
)


#: vLLM's own line prefixes, which the shared normalisation leaves on: its process tags
#: ("(VllmWorker rank=3 pid=1090) ", "(EngineCore_DP0 pid=6880) ") and its logger's
#: "ERROR 06-05 06:18:13 [multiproc_executor.py:470] " (any of them, repeated).
_VLLM_PREFIX = re.compile(
    r"^(?:\((?:[\w.-]+ )*(?:rank=\d+ )?pid=\d+(?:, ip=[\d.]+)?\) ?"
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?"
    r" (?:\[[^\]]+\]|[\w.]+:\d+\]) ?)+"
)


def strip_prefix(line: str) -> str:
    """``line`` without vLLM's process tag and logger prefix, its traceback text left."""
    m = _VLLM_PREFIX.match(line)
    return line[m.end() :] if m else line


class VLLMCrashRules(ModuleCrashRules):
    """The rule set of a vLLM server's log.

    Traceback frames and exception lines are read after vLLM's own prefixes (see
    :func:`strip_prefix`), so that a worker's traceback logged line by line through vLLM's logger
    keeps its frames (and with them what the failing code was doing).
    """

    lines: ClassVar[LineRules] = rules
    tag_hints = rules.TAG_HINTS
    steps = _STEPS

    def parse_frame(self, line: str) -> tuple[str, str] | None:
        return super().parse_frame(strip_prefix(line))

    def is_source_code(self, line: str) -> bool:
        return super().is_source_code(strip_prefix(line))

    def is_source_marks(self, line: str) -> bool:
        return super().is_source_marks(strip_prefix(line))

    def parse_exception(self, line: str) -> tuple[str, str] | None:
        return super().parse_exception(strip_prefix(line))

    def is_traceback_start(self, line: str) -> bool:
        return super().is_traceback_start(strip_prefix(line))

    def settings(self, line: str) -> Mapping[str, str]:
        m = _UTILIZATION.search(line)
        if m is None:
            return {}
        return {"gpu_memory_utilization": next(g for g in m.groups() if g)}

    def progress(self, line: str) -> Progress | None:
        if _READY in line:
            return Progress("ready", "ready")
        if _RUNNING.search(line):
            return Progress("running")
        if _CAPTURE_END.search(line):
            return Progress("capture_end", "CUDA graphs captured")
        if _CAPTURE_BEGIN.search(line):
            return Progress("capture_begin", "capturing CUDA graphs")
        if rules.KV_NONPOSITIVE.search(line):
            return None  # a KV-cache budget of zero or less is no step but the failure itself
        return self.step(line)

    def advise(self, ctx: AdviceContext) -> str:
        return advise(ctx)

    def moves(self, ctx: AdviceContext) -> tuple[Move, ...]:
        return moves(ctx)


#: NCCL failing to set up its shared-memory transport (a segment in /dev/shm it cannot create),
#: reported as a system error
_SHM = re.compile(
    r"/dev/shm|shared memory segment|ncclShmOpen|unhandled system error|ncclSystemError", re.I
)
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*)")
_SETTING = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+){1,5})\b")
_FRAME_LINE = re.compile(r'^\s*File "')


def _named_argument(evidence: str) -> str | None:
    m = _FLAG.search(evidence) or _SETTING.search(evidence)
    return m.group(1) if m is not None else None


def _decided_by_line(ctx: AdviceContext) -> bool:
    evidence = strip_prefix(ctx.evidence or "")
    return TAG_UNFINISHED not in ctx.tags and not _FRAME_LINE.match(evidence)


def moves(ctx: AdviceContext) -> tuple[Move, ...]:
    """The knobs :func:`advise` moves for this verdict and which way."""
    evidence = ctx.evidence or ""
    category = ctx.category
    if category == "oom_kv_pool":
        if rules.MAX_MODEL_LEN.search(evidence) and "No available memory" not in evidence:
            return (("gpu_memory_utilization", "raise"), ("max_model_len", "lower"))
        return (("gpu_memory_utilization", "raise"),)
    if category == "oom_cuda_graph":
        return (("cudagraph_capture_size", "lower"), ("max_num_seqs", "lower"))
    if category == "oom_runtime":
        if rules.FREE_MEMORY.search(evidence):
            return (("gpu_memory_utilization", "lower"),)
        return (("max_num_batched_tokens", "lower"), ("max_num_seqs", "lower"))
    if category == "graph_capture_other":
        if not _decided_by_line(ctx):
            return ()
        if CUSTOM_ALL_REDUCE.search(evidence):
            return (("custom_all_reduce", "disable"),)
        return (("enforce_eager", "enable"),)
    if category == "unsupported_arch":
        if re.search(r"bfloat16|float16|dtype", evidence, re.I):
            return (("dtype", "change"),)
        return (("attention_backend", "change"),)
    if category == "nccl_error":
        return (("dev_shm", "check"),) if _SHM.search(evidence) else ()
    if category == "bad_args":
        name = _named_argument(evidence)
        return ((name.lstrip("-").replace("-", "_"), "fix"),) if name else ()
    if category == "port_in_use":
        return (("port", "change"),)
    return ()


def advise(ctx: AdviceContext) -> str:
    """One or two sentences in vLLM's knobs: what happened and what to change."""
    util = ctx.settings.get("gpu_memory_utilization")
    at = f" (gpu_memory_utilization {util})" if util else ""
    evidence = ctx.evidence or ""
    category = ctx.category
    if category == "oom_kv_pool":
        if rules.MAX_MODEL_LEN.search(evidence) and "No available memory" not in evidence:
            return (
                f"The KV cache left after weights, activations and CUDA graphs{at} cannot hold "
                "one request of the model's max_model_len: raise gpu_memory_utilization or lower "
                "--max-model-len."
            )
        return (
            f"Nothing was left for the KV cache blocks{at}: the weights, the profiling run's "
            "activations and the CUDA graphs took the whole share; raise gpu_memory_utilization "
            "(or lower max_num_batched_tokens, the CUDA-graph capture size)."
        )
    if category == "oom_cuda_graph":
        return (
            f"The GPU ran out of memory while capturing CUDA graphs{at}: lower the CUDA-graph "
            "capture size or max_num_seqs, lower gpu_memory_utilization to leave room outside the "
            "instance's share, or run with --enforce-eager."
        )
    if category == "oom_runtime":
        if rules.FREE_MEMORY.search(evidence):
            return (
                f"The GPU has less free memory than the instance's share{at}: another process "
                "holds GPU memory; lower gpu_memory_utilization or free the GPU."
            )
        return (
            f"The GPU ran out of memory outside the KV cache{at} (loading weights, or the "
            "profiling run's activations): lower max_num_batched_tokens or max_num_seqs, raise "
            "tensor_parallel_size, or lower gpu_memory_utilization if other processes share the "
            "GPU."
        )
    if category == "graph_capture_other":
        if not _decided_by_line(ctx):
            return (
                "CUDA-graph capture failed, but the log ends before its error line, so the cause "
                "(out of memory or not) is not shown: find the exception at the end of the full "
                "log before changing a setting."
            )
        if CUSTOM_ALL_REDUCE.search(evidence):
            return (
                "CUDA-graph capture failed in custom all-reduce (not for memory): run with "
                "--disable-custom-all-reduce, or --enforce-eager."
            )
        return "CUDA-graph capture failed (not for memory): run with --enforce-eager to confirm."
    if category == "unsupported_arch":
        if re.search(r"bfloat16|float16|dtype", evidence, re.I):
            return "This GPU does not support the model's dtype: run with --dtype half."
        return "A kernel does not support this GPU: choose another attention backend or method."
    if category == "nccl_error":
        if _SHM.search(evidence):
            return (
                "NCCL could not set up its transport on this host (a system call failed; most "
                "often it cannot create its segment in /dev/shm): give the container more shared "
                "memory (--shm-size or --ipc=host) and rerun with NCCL_DEBUG=INFO."
            )
        return (
            "NCCL failed between the GPUs: if another rank crashed first its cause is the real "
            "one; otherwise try allreduce nccl (--disable-custom-all-reduce) or NCCL_P2P_DISABLE=1."
        )
    if category == "bad_args":
        name = _named_argument(evidence)
        if name:
            return f"vLLM refused its arguments: fix {name} as the deciding line says."
        return "vLLM refused its arguments: fix the flag or value the deciding line names."
    if category == "port_in_use":
        return "The port is taken by another program: free it or choose engine.port."
    if category == "starting":
        return (
            f"The server had not finished starting (last step: {ctx.phase or 'unknown'}); if its "
            "process has exited, its exit status (logs classify --exit-code) makes this an "
            "unknown_crash."
        )
    if category in ("ready", "running"):
        return "The server started and served; no crash in this log."
    if category == "undecided":
        return (
            "Nothing to judge: the log shows no start-up step of vLLM's, no sign of a crash and "
            "no exit status (an excerpt too short, or not a server's log); give the whole server "
            "log, and its process's exit status (logs classify --exit-code) if it has exited."
        )
    if category == "unknown_crash":
        found = f"the last error line is {evidence!r}" if evidence else "it shows no error"
        if ctx.exit_code is None:
            how = "The server is gone"
        elif ctx.exit_code < 0:
            how = f"The server was killed by signal {-ctx.exit_code}"
        else:
            how = f"The server exited with code {ctx.exit_code}"
        return (
            f"{how} and nothing in the log says why ({found}): read the full log around that "
            "line; no setting is implicated by it."
        )
    return "The server died without a known cause: read the deciding line and the log around it."


#: The one :class:`VLLMCrashRules` (it holds no state).
VLLM_CRASH_RULES = VLLMCrashRules()
