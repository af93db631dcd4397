"""vLLM's dynamic speculative decoding as a per-load schedule: one server, K by batch size.

With ``num_speculative_tokens_per_batch_size`` in ``--speculative-config`` (vLLM PR #32374,
releases from 0.25.1) vLLM drafts, at each step, the number of tokens its schedule gives for the
number of requests scheduled: a list of inclusive ``[first, last, K]`` batch-size ranges, K 0
meaning no drafting, each K at most ``num_speculative_tokens`` (the largest, for which the
buffers and CUDA graphs are sized). The winners of a load mix then become one launch: the
winner's chain length from each load point's concurrency up to the next point's, 0 where no
speculation wins.

What it cannot express: releases without it (0.25.0 and older), two different methods or
draft models among the winners, a method it does not schedule (n-gram), and knobs a server
has once (memory, CUDA-graph sizes), which come from the server-wide configuration.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from autotune._knobs import ServerConfig
from autotune.engines._base import LoadSchedule

#: The ``--speculative-config`` key of the schedule and the first release that reads it.
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
FIRST_RELEASE = (0, 25, 1)
#: The methods whose drafting follows the schedule.
SCHEDULED_METHODS = ("eagle3", "eagle", "mtp", "draft_model")
#: The last batch size of the last range when the configuration sets no --max-num-seqs: vLLM
#: clamps it to the batches it runs.
LAST_BATCH = 4096


def release_refusal(version: str | None) -> str | None:
    """Why the vLLM release ``version`` has no batch-size schedule (None: it has)."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if found is None:
        return (
            f"the vLLM release is not known here ({version or 'no version'}): a batch-size "
            f"schedule of speculative tokens ({SCHEDULE_KEY}) came with vLLM "
            f"{'.'.join(map(str, FIRST_RELEASE))}"
        )
    release = tuple(int(x or 0) for x in found.groups())
    if release < FIRST_RELEASE:
        return (
            f"vLLM {version} has no {SCHEDULE_KEY}: a batch-size schedule of speculative "
            f"tokens came with vLLM {'.'.join(map(str, FIRST_RELEASE))} (PR #32374)"
        )
    return None


def schedule_refusal(
    version: str | None, config: ServerConfig, method: Callable[[ServerConfig], str | None]
) -> str | None:
    """Why ``config`` cannot be one batch size's choice of a schedule (``method``: its
    ``--speculative-config`` method)."""
    refused = release_refusal(version)
    if refused is not None or not config.speculative:
        return refused
    name = method(config)
    if name not in SCHEDULED_METHODS:
        methods = ", ".join(SCHEDULED_METHODS)
        return f"vLLM schedules speculative tokens by batch size for {methods}, not {name}"
    if config.speculative_num_steps is None:
        return "no number of speculative tokens to schedule"
    return None


def batch_schedule(
    version: str | None,
    choices: Sequence[tuple[int, ServerConfig]],
    base: ServerConfig,
    *,
    method: Callable[[ServerConfig], str | None],
    launch: Callable[[ServerConfig], tuple[list[str], Callable[[Sequence[str]], str]]],
) -> LoadSchedule:
    """The launch that follows ``choices`` (batch size, configuration) with vLLM's schedule.

    ``base`` (speculative) gives the server-wide knobs and the method; ``launch`` gives a
    configuration's argv and how to spell an argv as a command.
    """
    refused = release_refusal(version)
    if refused is not None:
        return LoadSchedule(reason=refused)
    for size, config in choices:
        why = schedule_refusal(version, config, method)
        if why is not None:
            return LoadSchedule(reason=f"the choice at batch size {size}: {why}")
    speculative = [c for _, c in choices if c.speculative]
    if not speculative:
        return LoadSchedule(reason="speculation wins at no load: launch without it")
    why = schedule_refusal(version, base, method)
    if why is not None or not base.speculative:
        return LoadSchedule(reason=f"the server-wide configuration: {why or 'not speculative'}")
    methods = {method(c) for c in [base, *speculative]}
    if len(methods) > 1:
        return LoadSchedule(
            reason="the winners use different methods ("
            + ", ".join(sorted(map(str, methods)))
            + ")"
        )
    ordered = sorted(choices, key=lambda c: c[0])
    last = max(ordered[-1][0], base.max_running_requests or LAST_BATCH)
    ranges = []
    for i, (size, config) in enumerate(ordered):
        first = 1 if i == 0 else size
        end = ordered[i + 1][0] - 1 if i + 1 < len(ordered) else last
        ranges.append([first, end, _tokens(config)])
    most = max(r[2] for r in ranges)
    widest = base.replace(speculative_num_steps=most, speculative_num_draft_tokens=None)
    argv, spell = launch(widest)
    at = argv.index("--speculative-config") + 1
    spec_config = json.loads(argv[at])
    spec_config[SCHEDULE_KEY] = ranges
    argv[at] = json.dumps(spec_config)
    note = (
        f"vLLM drafts the K of the range that holds the number of scheduled requests "
        f"([first, last, K], K 0: no drafting); num_speculative_tokens {most} is the largest K; "
        "the other knobs are those of the server-wide configuration"
    )
    return LoadSchedule(command=spell(argv), note=note)


def _tokens(config: ServerConfig) -> int:
    return int(config.speculative_num_steps or 0) if config.speculative else 0
