"""The digital twin of a box: a belief over the simulator's profile, fitted from trials.

``Twin.prior(BoxFacts(...), space)`` starts from what the GPUs, the interconnect, the model's
config and the draft's size tell; ``twin.observe(config, record)`` fits it to each trial;
``twin.predict(configs)`` gives every particle's objective and the crash odds, with the
arithmetic of the likeliest crash; ``twin.to_yaml()`` writes the fitted profile
(``autotune twin export``), which ``autotune sim serve --sim-profile`` serves.
"""

from __future__ import annotations

from autotune.twin._facts import BoxFacts
from autotune.twin._gpus import GPU_TABLE, GpuSpec, gpu_spec
from autotune.twin._prediction import TwinPrediction
from autotune.twin._prior import ERROR_GROUPS, Coefficient
from autotune.twin._truth import truth_values
from autotune.twin._twin import PARTICLES, TrialFacts, Twin

__all__ = [
    "ERROR_GROUPS",
    "GPU_TABLE",
    "PARTICLES",
    "BoxFacts",
    "Coefficient",
    "GpuSpec",
    "TrialFacts",
    "Twin",
    "TwinPrediction",
    "gpu_spec",
    "truth_values",
]
