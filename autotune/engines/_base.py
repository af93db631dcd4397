"""The interface every engine adapter implements."""

from __future__ import annotations

import abc
from dataclasses import dataclass

from autotune._knobs import ServerConfig
from autotune.bench._workload import WorkloadSpec
from autotune.engines._spec import EngineSpec, LaunchSpec

#: SGLang's own ready line, printed after the warm-up request succeeded.
READY_LINE = "The server is fired up and ready to roll!"


@dataclass(frozen=True)
class Infeasible:
    """Why a configuration cannot start, judged before launch.

    ``category`` is a crash category (``oom_kv_pool``, ``unsupported_arch``, ``bad_args``, ...)
    or ``infeasible``; ``knob`` names the knob that decides it when one does.
    """

    reason: str
    category: str = "infeasible"
    knob: str | None = None


@dataclass(frozen=True)
class Hardware:
    """What the engine reports about the GPUs it will run on (None where unknown)."""

    gpu_name: str | None = None
    gpu_count: int | None = None
    memory_gib: float | None = None
    compute_capability: tuple[int, int] | None = None
    interconnect: str | None = None  # "nvlink" or "pcie"


class Engine(abc.ABC):
    """An engine adapter: builds launches, judges configurations, recognises readiness.

    Subclasses: :class:`autotune.engines.SGLangEngine` (the real server) and
    :class:`autotune.engines.SimEngine` (the simulated one, same command line and HTTP).
    """

    kind: str = ""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec

    @abc.abstractmethod
    def build_launch(
        self, config: ServerConfig, *, port: int, workload: WorkloadSpec | None = None
    ) -> LaunchSpec:
        """The argv and environment that start a server with ``config`` on ``port``.

        Raises:
            EngineError: a knob that this engine release cannot express.
        """

    @abc.abstractmethod
    def describe(self) -> str:
        """One line naming the engine and its release, for logs and reports."""

    def check_installed(self) -> None:
        """Raise :class:`EngineError` with advice if the engine cannot be launched at all."""

    def precheck(self, config: ServerConfig) -> Infeasible | None:
        """Why ``config`` cannot start, when that is known before launch; else ``None``."""
        return None

    def hardware(self) -> Hardware:
        """The GPUs the engine will use, as far as they are known."""
        return Hardware()

    def is_ready_line(self, line: str) -> bool:
        return READY_LINE in line
