"""SGLang's adaptive speculation as a per-load schedule: one server, steps chosen by batch size.

With ``--speculative-adaptive`` SGLang chooses the number of speculative steps at run time among
candidate steps, per batch-size slot of ``--speculative-adaptive-config`` (a JSON file such as
``{"1": {"candidate_steps": [1, 3, 5, 7]}, "64": {"candidate_steps": [0]}}``; a batch is routed
to the largest slot at or below its size, and 0 steps runs without drafting). A slot with one
candidate fixes the steps at that batch size, so the winners of a load mix become one launch: the
winner's steps at each concurrency, 0 where no speculation wins.

What it cannot express (``sglang/srt/speculative/adaptive_spec_params.py`` of 0.5.23,
``adaptive_unsupported_reason``): top-k other than 1 (SGLang falls back to static speculation),
algorithms other than EAGLE and EAGLE3, two different algorithms or draft trees beyond the
step count; and releases without the flag (0.5.3 and older, PR #21599).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from autotune._knobs import ServerConfig
from autotune.engines._base import LoadSchedule
from autotune.engines.sglang._dialects import FlagSet

#: The flags of adaptive speculation, and the name the schedule gives its config file.
ADAPTIVE_FLAG = "--speculative-adaptive"
ADAPTIVE_CONFIG_FLAG = "--speculative-adaptive-config"
CONFIG_FILE = "adaptive-spec.json"
#: The algorithms SGLang's adaptive speculation runs.
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")


def release_refusal(flags: FlagSet) -> str | None:
    """Why this release has no adaptive speculation (None: it has)."""
    if flags.has(ADAPTIVE_FLAG) and flags.has(ADAPTIVE_CONFIG_FLAG):
        return None
    return (
        f"{flags.release} ({flags.source}) has no {ADAPTIVE_FLAG}: adaptive speculation, "
        "which follows the load with one server, came with SGLang PR #21599"
    )


def adaptive_refusal(flags: FlagSet, config: ServerConfig) -> str | None:
    """Why ``config`` cannot be one batch size's choice of an adaptive schedule."""
    refused = release_refusal(flags)
    if refused is not None or not config.speculative:
        return refused
    algorithm = (config.speculative_algorithm or "").upper()
    if algorithm not in ADAPTIVE_ALGORITHMS:
        return f"adaptive speculation runs EAGLE and EAGLE3 only, not {algorithm}"
    topk = config.speculative_eagle_topk
    if topk is not None and topk != 1:
        return f"adaptive speculation runs top-k 1 only (this configuration: top-k {topk})"
    if config.speculative_num_steps is None:
        return "the steps are SGLang's automatic choice: no step count to schedule"
    return None


def adaptive_schedule(
    flags: FlagSet,
    choices: Sequence[tuple[int, ServerConfig]],
    base: ServerConfig,
    *,
    command: Callable[[ServerConfig], str],
) -> LoadSchedule:
    """The launch that follows ``choices`` (batch size, configuration) with adaptive speculation.

    ``base`` (speculative, top-k 1) gives the server-wide knobs and the start-up steps;
    ``command`` spells a configuration's launch command.
    """
    refused = release_refusal(flags)
    if refused is not None:
        return LoadSchedule(reason=refused)
    for size, config in choices:
        why = adaptive_refusal(flags, config)
        if why is not None:
            return LoadSchedule(reason=f"the choice at batch size {size}: {why}")
    speculative = [c for _, c in choices if c.speculative]
    if not speculative:
        return LoadSchedule(reason="speculation wins at no load: launch without it")
    why = adaptive_refusal(flags, base)
    if why is not None or not base.speculative:
        return LoadSchedule(reason=f"the server-wide configuration: {why or 'not speculative'}")
    algorithms = {(c.speculative_algorithm or "").upper() for c in speculative}
    if len(algorithms) > 1:
        return LoadSchedule(
            reason="the winners use different algorithms (" + ", ".join(sorted(algorithms)) + ")"
        )
    slots = {str(size): {"candidate_steps": [_steps(c)]} for size, c in sorted(choices)}
    start = base.speculative_num_steps
    if start not in {_steps(c) for _, c in choices}:
        return LoadSchedule(
            reason=f"the server-wide configuration's {start} steps are no batch size's choice "
            "(SGLang starts at one of the candidate steps)"
        )
    static = base.replace(speculative_adaptive=None)  # the flag is written once, below
    text = command(static) + f" {ADAPTIVE_FLAG} {ADAPTIVE_CONFIG_FLAG} {CONFIG_FILE}"
    note = (
        f"SGLang starts at {start} step(s) (draft tokens steps + 1) and uses the steps of the "
        "largest batch size listed at or below the running batch; the other knobs are those of "
        "the server-wide configuration"
    )
    return LoadSchedule(command=text, files={CONFIG_FILE: json.dumps(slots)}, note=note)


def _steps(config: ServerConfig) -> int:
    return int(config.speculative_num_steps or 0) if config.speculative else 0
