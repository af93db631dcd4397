"""The interface every engine adapter implements."""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune._errors import ConfigError
from autotune.engines._spec import ENGINE_KINDS, EngineSpec, LaunchSpec

if TYPE_CHECKING:
    from autotune._knobs import ServerConfig
    from autotune.bench._workload import WorkloadSpec

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
        return None

    def precheck(self, config: ServerConfig) -> Infeasible | None:
        """Why ``config`` cannot start, when that is known before launch; else ``None``."""
        return None

    def unsupported_values(self, knob: str, values: Iterable[Any]) -> dict[Any, str]:
        """The values of ``knob`` this engine release cannot express, each with the reason.

        A study calls it at start for every tuned knob, so that a space choice the release lacks
        is refused before any trial (``{}``: all can be launched).
        """
        return {}

    def hardware(self) -> Hardware:
        """The GPUs the engine will use, as far as they are known."""
        return Hardware()

    def weights_gib(self, algorithm: str | None = None) -> tuple[float | None, float | None]:
        """Sizes in GiB of the target model's and the draft model's weights (None: unknown).

        ``algorithm`` is the speculative algorithm whose draft is meant (``None``: the one the
        engine is set up for). For memory estimates before launch.
        """
        return None, None

    def is_ready_line(self, line: str) -> bool:
        return READY_LINE in line


def create_engine(spec: EngineSpec) -> Engine:
    """The adapter for ``spec.kind``: :class:`SGLangEngine` or :class:`SimEngine`.

    Raises:
        ConfigError: an unknown engine kind.
    """
    if spec.kind == "sglang":
        from autotune.engines._sglang import SGLangEngine

        return SGLangEngine(spec)
    if spec.kind == "sim":
        from autotune.engines._sim import SimEngine

        return SimEngine(spec)
    raise ConfigError(
        f"unknown engine kind {spec.kind!r}",
        location="engine.kind",
        hint="choose one of: " + ", ".join(ENGINE_KINDS),
    )
