"""Faults the simulated server can inject, for testing how a tuner copes with a misbehaving server.

Given with ``--sim-fault SPEC`` (repeatable):

``hang_startup``
    stop after weight loading and never become ready (the process stays alive).
``slow_start:<factor>``
    multiply every start-up duration by ``factor``.
``crash_mid_benchmark:<n>``
    after ``n`` completed requests, print a CUDA error traceback and exit with a non-zero code.
``stall_stream:<n>``
    the ``n``-th request sends its first chunk, then nothing more, and keeps the connection open.
``refuse_connections``
    print the ready line but never open the HTTP socket: every connection is refused.
``garbage:<n>``
    the ``n``-th request gets a malformed body (an SSE event that is not JSON, or broken JSON).
``http_500:<n>``
    every ``n``-th request is answered with HTTP 500.
``drop_connection:<n>``
    the ``n``-th request's connection is closed in the middle of the response.
``endless_line:<n>``
    the ``n``-th streamed request sends its first chunk, then one line that never ends (``data:``
    and a run of characters with no line end) until the client goes away or the server stops.

Requests are numbered from 1 in arrival order over ``/generate``, ``/v1/completions`` and
``/v1/chat/completions``; the internal warm-up and ``/health_generate`` do not count.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autotune._errors import ConfigError

FAULT_NAMES: tuple[str, ...] = (
    "hang_startup",
    "slow_start",
    "crash_mid_benchmark",
    "stall_stream",
    "refuse_connections",
    "garbage",
    "http_500",
    "drop_connection",
    "endless_line",
)
_FLAGS = ("hang_startup", "refuse_connections")
_COUNTS = (
    "crash_mid_benchmark",
    "stall_stream",
    "garbage",
    "http_500",
    "drop_connection",
    "endless_line",
)

#: The event that ends a stream of server-sent events.
DONE = b"data: [DONE]\n\n"
#: A body chunk that tells the response to close the connection where it is.
DROP = b""
#: What happens to one request (see :meth:`FaultPlan.action_for`).
ACTIONS = ("http_500", "stall", "garbage", "drop", "endless")
#: One write of the ``endless_line`` fault.
ENDLESS_PIECE = b"x" * 65536


@dataclass(frozen=True)
class FaultPlan:
    """The faults of one server run; the default injects none."""

    hang_startup: bool = False
    slow_start: float = 1.0
    crash_mid_benchmark: int | None = None
    stall_stream: int | None = None
    refuse_connections: bool = False
    garbage: int | None = None
    http_500: int | None = None
    drop_connection: int | None = None
    endless_line: int | None = None

    @classmethod
    def parse(cls, specs: Sequence[str]) -> FaultPlan:
        """Read ``--sim-fault`` values.

        Raises:
            ConfigError: an unknown fault name or a missing or bad argument.
        """
        values: dict[str, Any] = {}
        for spec in specs:
            name, value = parse_fault(spec)
            values[name] = value
        return replace(cls(), **values)

    @property
    def active(self) -> bool:
        return self != FaultPlan()

    def action_for(self, index: int) -> str | None:
        """What the ``index``-th counted request (from 1) suffers, if anything."""
        if self.http_500 is not None and index % self.http_500 == 0:
            return "http_500"
        if self.stall_stream == index:
            return "stall"
        if self.garbage == index:
            return "garbage"
        if self.drop_connection == index:
            return "drop"
        if self.endless_line == index:
            return "endless"
        return None

    def crashes_after(self, completed: int) -> bool:
        """Whether the server dies once ``completed`` requests have finished."""
        return self.crash_mid_benchmark is not None and completed >= self.crash_mid_benchmark


def parse_fault(spec: str) -> tuple[str, bool | int | float]:
    """One ``--sim-fault`` value as ``(field, value)``.

    Raises:
        ConfigError: naming the spec and what is allowed.
    """
    name, sep, arg = spec.strip().partition(":")
    hint = "faults: hang_startup, slow_start:<factor>, crash_mid_benchmark:<n>, " + (
        "stall_stream:<n>, refuse_connections, garbage:<n>, http_500:<n>, drop_connection:<n>, "
        "endless_line:<n>"
    )
    if name not in FAULT_NAMES:
        raise ConfigError(f"unknown fault {spec!r}", source="--sim-fault", hint=hint)
    if name in _FLAGS:
        if sep:
            raise ConfigError(f"fault {name!r} takes no argument, got {spec!r}", hint=hint)
        return name, True
    if not arg:
        raise ConfigError(f"fault {name!r} needs an argument, e.g. {name}:3", hint=hint)
    if name == "slow_start":
        try:
            factor = float(arg)
        except ValueError:
            factor = math.nan
        if not (factor > 0 and math.isfinite(factor)):
            raise ConfigError(
                f"slow_start needs a positive factor, got {arg!r}", hint="e.g. slow_start:3"
            )
        return name, factor
    try:
        count = int(arg)
    except ValueError:
        count = 0
    if count < 1:
        raise ConfigError(f"{name} needs a request count >= 1, got {arg!r}", hint=f"e.g. {name}:5")
    return name, count


async def inject_fault(
    action: str,
    chunks: AsyncIterator[bytes],
    *,
    streaming: bool,
    cancel: Callable[[], None],
    closed: asyncio.Event,
) -> AsyncIterator[bytes]:
    """The body of a request that suffers ``action`` (``stall``, ``garbage``, ``drop`` or
    ``endless``).

    A streamed response sends its first chunk intact, then stalls until the server shuts down,
    sends an event that is not JSON, ends the connection (``DROP``), or sends one line that never
    ends; a whole response stalls, comes back as broken JSON, or is cut off half way (``endless``
    sends a whole response intact).
    """
    first = await anext(chunks, b"")
    cancel()
    if action == "stall":
        if streaming:
            yield first
        await closed.wait()
    elif action == "endless":
        yield first
        if streaming:
            yield b"data: "
            while not closed.is_set():  # until the client goes away (the reply is cancelled)
                yield ENDLESS_PIECE
                await asyncio.sleep(0)
    elif action == "garbage":
        if streaming:
            yield first
            yield b'data: {"text": "\xff\xfe\x00 garbled", "meta_info": {"id": \n\n'
            yield DONE
        else:
            yield first[: max(1, len(first) // 2)] + b"\xff\xfe"
    else:
        yield first if streaming else first[: len(first) // 2]
        yield DROP


def cuda_crash_lines(site_packages: str) -> tuple[str, ...]:
    """What a scheduler that hit a CUDA error while serving prints (rank line first)."""
    sched = f"{site_packages}/sglang/srt/managers/scheduler.py"
    return (
        "Scheduler hit an exception: Traceback (most recent call last):",
        f'  File "{sched}", line 2937, in run_scheduler_process',
        "    scheduler.event_loop_overlap()",
        f'  File "{sched}", line 1104, in event_loop_overlap',
        "    batch_result = self.run_batch(batch)",
        "                   ^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{sched}", line 2214, in run_batch',
        "    batch_result = self.model_worker.forward_batch_generation(",
        f'  File "{site_packages}/sglang/srt/managers/tp_worker.py", line 412, '
        "in forward_batch_generation",
        "    logits_output, can_run_cuda_graph = self.model_runner.forward(",
        f'  File "{site_packages}/sglang/srt/model_executor/model_runner.py", line 2391, '
        "in forward",
        "    output = self._forward_raw(",
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        "",
    )
