"""SGLang's memory messages: a KV pool that does not fit, in every wording, and which way an
out-of-memory error points.

Two failures look alike and need opposite fixes. *The pool does not fit the budget*: after the
weights (target and draft) are loaded, ``--mem-fraction-static`` leaves no room for the KV pool;
SGLang says so ("Not enough memory. Please try to increase --mem-fraction-static", since 2026
"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88. Raise
--mem-fraction-static above 0.912 (minimum viable = ... = 0.9113)"), or only shows a profiled
pool size that is zero or negative; the fraction must go up. *The pool does not fit the GPU*:
the pool SGLang sized from the fraction is more than the memory actually free when it is
allocated (another process holds memory, the draft model's pool comes on top of the target's),
and a CUDA out-of-memory error is raised inside the allocation; the fraction must come down.
Which one a CUDA out-of-memory error is depends on where it was raised (:mod:`._crash_frames`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from autotune.engines.sglang._crash_frames import raised_in

#: Setting names for the fractions SGLang's 2026 message suggests (``settings`` of a verdict).
SUGGESTED = "suggested_mem_fraction_static"
MINIMUM = "minimum_mem_fraction_static"

_KV_POOL = re.compile(
    r"Not enough memory\.?\s*Please (?:try to )?increase --mem[-_]fraction[-_]static"
    r"|leaves? no (?:GPU |device )?memory for the KV(?: cache| pool)"
    r"|Not enough memory to allocate (?:the )?KV(?: cache| pool)",
    re.I,
)
# a profiled KV pool of zero or fewer tokens ("max_total_tokens=131072 is larger than the profiled
# value -561981", "max_total_num_tokens=-3270"): the pool cannot exist, whatever follows
_KV_NONPOSITIVE = re.compile(
    r"profiled value (?:of )?(?:-\d+|0)\b"
    r"|\bmax_total_num_tokens\s*[=:]\s*(?:-\d+|0)\b"
    r"|\bprofile_max_num_token\w*\(?\)?\s*[=:]\s*(?:-\d+|0)\b",
    re.I,
)
_SUGGESTED = re.compile(r"Raise --mem[-_]fraction[-_]static (?:above|to at least) ([0-9]*\.[0-9]+)")
_MINIMUM = re.compile(r"minimum viable\b[^)\n]*?([0-9]*\.[0-9]+)\s*\)")

OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation"
    r"|CUBLAS_STATUS_ALLOC_FAILED|CUBLAS_STATUS_NOT_INITIALIZED|HIP out of memory"
    # a traceback whose last line was cut inside the exception's name: "torch.O" can only be
    # torch's OutOfMemoryError (no other exception in torch's or torch.cuda's namespace starts so)
    r"|^\s*torch\.(?:cuda\.)?O(?:u(?:t(?:O(?:f(?:M(?:e(?:m(?:o(?:r(?:y(?:E(?:r(?:r(?:o)?)?)?)?)?)?)?)?)?)?)?)?)?)?\s*$",
    re.I,
)
OOM_WORDS = re.compile(r"\bout of memory\b", re.I)
HOST_MEMORY = re.compile(r"CPUAllocator|host memory|oom[-_]kill|pinned memory", re.I)
KV_RUNTIME = re.compile(r"\b(?:Prefill|Decode|Extend) out of memory\.", re.I)


def kv_pool_message(
    line: str, exception: tuple[str, str] | None, tags: frozenset[str]
) -> int | None:
    """Where a line says that the KV pool does not fit the ``--mem-fraction-static`` budget (any
    wording, or a non-positive profiled size), or ``None``."""
    m = _KV_POOL.search(line) or _KV_NONPOSITIVE.search(line)
    if m is not None:
        return m.start()
    if exception is not None and not HOST_MEMORY.search(line):
        message = exception[1].lower()
        if message.startswith("not enough memory") or (
            raised_in(tags) == "kv_pool" and "not enough memory" in message
        ):
            return 0
    return None


def is_nonpositive_pool(line: str) -> bool:
    """A line showing a profiled KV pool of zero or fewer tokens."""
    return _KV_NONPOSITIVE.search(line) is not None


def is_cuda_oom(text: str) -> bool:
    """Text of a CUDA (or HIP) out-of-memory error."""
    return OOM.search(text) is not None


def oom_category(tags: frozenset[str], capture_phase: bool) -> str:
    """The category of a GPU out-of-memory error raised where the frame ``tags`` say, while
    CUDA-graph capture was (``capture_phase``) or was not under way."""
    step = raised_in(tags)
    if step == "capture":
        return "oom_cuda_graph"
    if step == "kv_pool":
        return "oom_kv_pool"
    if step in ("loading", "forward"):
        return "oom_runtime"
    return "oom_cuda_graph" if capture_phase else "oom_runtime"


def fraction_settings(line: str) -> Mapping[str, str]:
    """The fractions SGLang's KV-budget message suggests: the value to raise
    ``--mem-fraction-static`` above, and the minimum viable one."""
    found: dict[str, str] = {}
    m = _SUGGESTED.search(line)
    if m is not None:
        found[SUGGESTED] = m.group(1)
    m = _MINIMUM.search(line)
    if m is not None:
        found[MINIMUM] = m.group(1)
    return found
