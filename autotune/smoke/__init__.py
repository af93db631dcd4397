"""``autotune smoke``: a tiny model made on the box, run through a space's own engine and launch.

:func:`run_smoke` checks, in a minute or two, what every trial of a study relies on: the engine is
installed where the server runs, a server starts and becomes ready, the benchmark client measures
it (with the space's speculative algorithm where a tiny model allows it), the whole process tree
stops and its GPU memory comes back, and a start whose KV pool cannot fit is read as such from
the live log. :func:`make_tiny_model` makes the model (random weights, a tokenizer trained on local
text) with numpy alone.
"""

from __future__ import annotations

from autotune.smoke._run import (
    SMOKE_WORKLOAD,
    STEPS,
    SmokeReport,
    SmokeStep,
    run_smoke,
    smoke_config,
)
from autotune.smoke._tiny import TinyModel, TinyModelSpec, learn_merges, make_tiny_model

__all__ = [
    "SMOKE_WORKLOAD",
    "STEPS",
    "SmokeReport",
    "SmokeStep",
    "TinyModel",
    "TinyModelSpec",
    "learn_merges",
    "make_tiny_model",
    "run_smoke",
    "smoke_config",
]
