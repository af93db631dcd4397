"""autotune: Bayesian optimisation of SGLang's speculative-decoding settings.

The public interface is small; the parts live in private modules of their subpackages
(``autotune.space``, ``autotune.engines``, ``autotune.server``, ``autotune.crashes``,
``autotune.bench``, ``autotune.study``, ``autotune.report``, ``autotune.sim``).
"""

from __future__ import annotations

from autotune._errors import (
    AutotuneError,
    BenchmarkError,
    ConfigError,
    EngineError,
    Interrupted,
    ServerError,
    StorageError,
)
from autotune._knobs import ALLREDUCE_MODES, SPECULATIVE_ALGORITHMS, ServerConfig

__version__ = "0.1.0"

__all__ = [
    "ALLREDUCE_MODES",
    "SPECULATIVE_ALGORITHMS",
    "AutotuneError",
    "BenchmarkError",
    "ConfigError",
    "EngineError",
    "Interrupted",
    "ServerConfig",
    "ServerError",
    "StorageError",
    "__version__",
]
