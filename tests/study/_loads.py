"""A small load-mix study on the simulated H100 server, shared by the study and report tests.

The space is ``eagle3-h100-mix.yaml`` cut to run in seconds: three load points (concurrency 1, 4
and 8, weights 0.5, 0.3, 0.2), two repeats per point, top-k 1 configurations of different
depths enqueued after the baseline so that the winners can differ by load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._helpers import StudyRun, small_space, start_study

#: The load mix of the study: (label, weight).
MIX: tuple[tuple[str, float], ...] = (("c1", 0.5), ("c4", 0.3), ("c8", 0.2))
MIX_TRIALS = 5

_CHAINS = [
    {
        "speculative_num_steps": steps,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": steps + 1,
        "cuda_graph_max_bs": 64,
        "mem_fraction_static": 0.85,
    }
    for steps in (1, 3, 6)
]


def mix_space(dest: Path, **edit: Any) -> Path:
    """The small load-mix space (``edit``: top-level sections replaced)."""
    loads = [
        {"concurrency": 1, "weight": 0.5, "num_prompts": 2},
        {"concurrency": 4, "weight": 0.3},
        {"concurrency": 8, "weight": 0.2},
    ]
    return small_space(
        dest,
        "eagle3-h100-mix.yaml",
        time_scale=0.001,
        workload={"repeats": 2},
        configs=_CHAINS,
        edit={"objective": {"metric": "output_tok_s", "loads": loads}, **edit},
    )


def run_mix_study(root: Path, name: str = "mix") -> StudyRun:
    """``autotune study start`` on :func:`mix_space` (the baseline, three chains, one more)."""
    space = mix_space(root)
    return start_study(space, name, MIX_TRIALS, root / "studies", "--seed", "2")
