"""The search benchmark's work spread over processes: ``autotune bench search --jobs N``.

A brute-force optimum evaluates every configuration of a space (half a million for the shipped
spaces) and a benchmark runs tens of whole studies; both are independent pieces of pure
computation. :func:`fork_map` runs them in ``N`` forked worker processes, each taking every
``N``-th item, and returns the results in the items' order, as :func:`map` would. Forking shares
the parent's model, space and engine without pickling them; each worker's results come back
through a pipe. Each worker keeps to one thread of PyTorch (the GP sampler's), so ``N`` workers
use ``N`` cores.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from autotune._errors import AutotuneError

T = TypeVar("T")
R = TypeVar("R")


class WorkerError(AutotuneError):
    """A worker process of the search benchmark failed."""


def usable_jobs(jobs: int) -> int:
    """``jobs``, or 1 where processes cannot be forked (the work then runs in this process)."""
    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return jobs


def fork_map(fn: Callable[[T], R], items: Sequence[T], jobs: int) -> list[R]:
    """``[fn(x) for x in items]``, computed by up to ``jobs`` forked processes.

    Raises:
        WorkerError: a worker raised (its traceback in the message) or died without answering.
    """
    jobs = min(usable_jobs(jobs), len(items))
    if jobs <= 1:
        return [fn(x) for x in items]
    ctx = multiprocessing.get_context("fork")
    workers = []
    for part in range(jobs):
        receive, send = ctx.Pipe(duplex=False)
        process = ctx.Process(target=_work, args=(fn, items, part, jobs, send), daemon=True)
        process.start()
        send.close()
        workers.append((process, receive))
    results: list[Any] = [None] * len(items)
    failure: str | None = None
    try:
        for part, (process, receive) in enumerate(workers):
            try:
                status, payload = receive.recv()
            except EOFError:
                process.join()
                failure = failure or (
                    f"worker {part} of {jobs} died without answering (exit code {process.exitcode})"
                )
                continue
            if status == "error":
                failure = failure or f"worker {part} of {jobs} failed:\n{payload}"
                continue
            for index, result in payload:
                results[index] = result
    finally:
        for process, receive in workers:
            receive.close()
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
    if failure is not None:
        raise WorkerError(failure, hint="run with --jobs 1 to see the failure in this process")
    return results


def _work(
    fn: Callable[[Any], Any], items: Sequence[Any], part: int, parts: int, send: Connection
) -> None:
    """A worker: items ``part``, ``part + parts``, ... and their results, sent in one message."""
    _one_thread()
    try:
        out = [(i, fn(items[i])) for i in range(part, len(items), parts)]
        send.send(("ok", out))
    except BaseException:
        send.send(("error", traceback.format_exc()))
    finally:
        send.close()
        # leave without the parent's exit handlers (they belong to the parent)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _one_thread() -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
