"""The interface every engine adapter implements."""

from __future__ import annotations

import abc
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from autotune._knobs import SPECULATIVE_NUMBERS, Infeasible
from autotune._launch import LaunchSpec
from autotune.engines._memory import MemoryReading
from autotune.engines._spec import EngineSpec

if TYPE_CHECKING:
    from autotune._document import Section
    from autotune._knobs import ServerConfig
    from autotune._workload import WorkloadSpec
    from autotune.crashes import CrashRules
    from autotune.engines._serving import ServerApi
    from autotune.server import Readiness


@dataclass(frozen=True)
class LoadSchedule:
    """How one server follows a per-load choice of speculative settings: the launch command and
    the files it names (name -> content), or why this engine release cannot express it."""

    command: str | None = None
    files: Mapping[str, str] = field(default_factory=dict)
    #: Why the choice cannot be launched as one server (``None``: ``command`` launches it).
    reason: str | None = None
    #: What the command keeps from one choice for all loads (knobs a server has once).
    note: str | None = None

    @property
    def expressible(self) -> bool:
        return self.reason is None and self.command is not None


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
    #: The engine whose command line and rules this adapter speaks, for messages ("SGLang").
    family: ClassVar[str] = "the engine"
    #: ``engine.model_path`` when the space leaves it out; ``None``: the space must name it.
    default_model_path: ClassVar[str | None] = None
    #: The speculative numbers this engine takes, all set or none (SGLang's three; vLLM's one
    #: chain length); a space that sets some of them must set them all.
    speculative_numbers: ClassVar[tuple[str, ...]] = SPECULATIVE_NUMBERS
    #: The engine kind that simulates this engine, and whose rules the simulator's model applies
    #: (:class:`autotune.sim.SimModel`'s ``engine``): for the search benchmark, which runs a
    #: space on the simulator's model.
    simulator: ClassVar[tuple[str, str]] = ("sim", "sglang")
    #: Whether the server runs the checkpoint at ``model_path`` (False: a simulated server, whose
    #: figures come from its profile whatever files the path holds; any draft algorithm of the
    #: profile then runs on a stand-in model, as ``autotune smoke`` uses it).
    runs_checkpoint: ClassVar[bool] = True
    #: Whether the twin (``autotune.twin``: a model of an SGLang server on a box) models this
    #: engine's server, so that its sampler can guide a study of it.
    twin_models: ClassVar[bool] = False

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec

    # --- the space file's engine section (class-level: no engine is built to read a space) -----
    @classmethod
    def read_section(cls, sec: Section, spec: EngineSpec, *, base: Path) -> EngineSpec:
        """This engine's own checks of the engine section ``sec``, read generically as ``spec``.

        Returns ``spec`` completed (paths resolved from ``base``, the space file's folder).

        Raises:
            ConfigError: located at the key of ``sec`` that this engine cannot run.
        """
        return spec

    @classmethod
    def fills_speculative_numbers(cls, algorithm: str) -> bool:
        """Whether the engine fills in whichever of :attr:`speculative_numbers` a launch leaves
        out under ``algorithm`` (so a space may set some of them); False: all set or none."""
        return False

    @classmethod
    def owned_flag(cls, arg: str) -> tuple[str, str] | None:
        """The launch flag that the ``extra_args`` word ``arg`` would set although the tuner sets
        it itself, and the space key that decides it (``("--port", "engine.port")``); else None.
        """
        return None

    @classmethod
    def spec_note(cls, spec: EngineSpec) -> str | None:
        """A few words on what ``spec`` says of this engine, for a space's summary."""
        return None

    @classmethod
    def facts_profile(cls, spec: EngineSpec) -> str | None:
        """The simulator profile that holds the facts of the box ``spec``'s server runs on (a
        simulated server's); None: a real server, whose box's facts the user gives."""
        return None

    @classmethod
    def with_release(cls, spec: EngineSpec, release: str) -> EngineSpec | None:
        """``spec`` pinned to the engine release ``release`` (spelled from autotune's tables
        instead of asking the installed engine); ``None``: this engine takes no release."""
        return None

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

    # --- the engine's rules and what it chooses by itself ----------------------------------
    def check_rules(self, config: ServerConfig) -> Infeasible | None:
        """Why the engine would refuse ``config``'s arguments or run it as something else
        (a rewritten or ignored value); ``None`` when it runs as given."""
        return None

    @abc.abstractmethod
    def draft_token_bounds(self, steps: int, topk: int) -> tuple[int, int]:
        """The fewest and most draft tokens the engine runs as given with ``steps`` speculative
        steps of top-k ``topk`` (equal bounds: the count is fixed by the other two)."""

    def lacks_draft_model(self, algorithm: str) -> bool:
        """Whether ``algorithm`` loads a draft model that the engine section does not name."""
        return False

    def automatic_choice(self) -> Mapping[str, Any] | None:
        """The knobs the engine picks by itself for this target when speculation is on and they
        are left unset (``None``: not known)."""
        return None

    def incompatibility(self, config: ServerConfig, hardware: Hardware) -> Infeasible | None:
        """Why ``config`` is known to crash on ``hardware`` though its arguments are accepted."""
        return None

    def server_defaults(
        self, hardware: Hardware, tp: int, *, speculative: bool = False
    ) -> Mapping[str, int]:
        """The value the engine picks by itself for each knob a launch leaves unset on
        ``hardware`` at tensor parallelism ``tp``, with speculative decoding on or off (knob ->
        value; a knob not named: not known)."""
        return {}

    def workload_note(self, config: ServerConfig, workload: WorkloadSpec) -> str | None:
        """What the engine does by itself with ``config`` that ``workload`` runs into and the
        user should be told of (a cap it sets on running requests); else ``None``."""
        return None

    def reference_command(
        self, config: ServerConfig, *, port: int, workload: WorkloadSpec | None = None
    ) -> str | None:
        """The real engine's command line that a trial of ``config`` stands for, when it is
        not the one launched (a simulated engine's); ``None``: the launch itself is it."""
        return None

    def unsupported_values(self, knob: str, values: Iterable[Any]) -> dict[Any, str]:
        """The values of ``knob`` this engine release cannot express, each with the reason.

        A study calls it at start for every tuned knob, so that a space choice the release lacks
        is refused before any trial (``{}``: all can be launched).
        """
        return {}

    # --- one server that follows a load mix ----------------------------------------------
    def schedule_refusal(self, config: ServerConfig) -> str | None:
        """Why ``config`` cannot be one load's choice in a :meth:`load_schedule` (``None``: it
        can)."""
        return f"{self.describe()} cannot change its speculative settings with the load"

    def load_schedule(
        self, choices: Sequence[tuple[int, ServerConfig]], base: ServerConfig
    ) -> LoadSchedule:
        """One launch that runs each ``(batch size, configuration)`` choice at that many
        running requests; ``base`` gives the knobs a server has once (memory, CUDA graphs).

        The default: this engine cannot (``reason`` says so)."""
        return LoadSchedule(
            reason=f"{self.describe()} cannot change its speculative settings with the load"
        )

    def startup_time_scale(self) -> float:
        """Wall seconds of this engine's start-up per second the box it stands for takes: 1 for
        a real engine (the simulator's time scale for the simulated one), so that GPU hours are
        counted as on that box."""
        return 1.0

    def serve_time_scale(self) -> float:
        """Wall seconds of this engine's serving per second the box it stands for takes: 1 for
        a real engine (the simulator's serving clock for the simulated one, below 1 where it
        serves faster than its box), so that the benchmark reads its figures in that box's
        time."""
        return 1.0

    def hardware(self) -> Hardware:
        """The GPUs the engine will use, as far as they are known."""
        return Hardware()

    def architecture(self) -> str | None:
        """The target model's architecture (``DeepseekV3ForCausalLM``, ...), ``None`` if unknown.

        Read from the checkpoint's ``config.json`` under ``model_path`` when it is a folder.
        """
        config_json = Path(self.spec.model_path) / "config.json"
        try:
            data = json.loads(config_json.read_text())
            archs = data.get("architectures") or []
            return str(archs[0]) if archs else None
        except (OSError, ValueError, AttributeError):
            return None

    def weights_gib(self, algorithm: str | None = None) -> tuple[float | None, float | None]:
        """GiB of the target model's and the draft model's weights on all GPUs together (a
        checkpoint's size; a draft copied to every GPU counts once per GPU). None: unknown.

        ``algorithm`` is the speculative algorithm whose draft is meant (``None``: the one the
        engine is set up for). For memory estimates before launch.
        """
        return None, None

    def memory_need_gib(
        self,
        config: ServerConfig,
        *,
        weights: tuple[float | None, float | None] | None = None,
    ) -> float | None:
        """GiB per GPU that the static memory of ``config`` must hold before any KV cache: the
        weights (``weights``, else :meth:`weights_gib` of its algorithm) shared over its
        tensor-parallel ranks, the draft's only where :meth:`draft_in_static`. ``None``: the
        target's size is unknown.
        """
        target, draft = (
            weights if weights is not None else self.weights_gib(config.speculative_algorithm)
        )
        if target is None:
            return None
        tp = max(1, config.tp_size)
        need = target / tp
        if config.speculative and draft is not None and self.draft_in_static():
            need += draft / tp
        return need

    def read_memory(self, lines: Iterable[str], config: ServerConfig) -> MemoryReading | None:
        """The memory figures that a start of ``config`` printed in its log ``lines`` (per GPU:
        weights, KV pool, CUDA graphs, what was left); ``None``: the log gives none."""
        return None

    def memory_refusal(self, reading: MemoryReading, config: ServerConfig) -> Infeasible | None:
        """Why ``config`` would run out of memory at start-up (its KV pool, its CUDA graphs),
        predicted from another start's ``reading``, with the arithmetic in the reason; ``None``
        when the prediction is not clear beyond the engine's margin."""
        return None

    def draft_in_static(self) -> bool:
        """Whether the draft model's weights come out of the static memory the engine sizes its
        KV pool in (``mem_fraction_static``), as in SGLang from 0.5.14 and in the simulator.
        When they do not, a KV pool that fails at a fraction fails there with any draft."""
        return True

    @abc.abstractmethod
    def readiness(self) -> Readiness:
        """How this engine's server says it is ready: its ready line(s) and the HTTP probes
        that confirm it (for :func:`autotune.server.wait_for_startup`)."""

    @abc.abstractmethod
    def crash_rules(self) -> CrashRules:
        """How this engine's server log is read for crashes: the patterns of its crash lines,
        its start-up progress and its advice, for :class:`autotune.crashes.LiveClassifier`."""

    @abc.abstractmethod
    def server_api(self) -> ServerApi:
        """What the benchmark needs of this engine's HTTP API: its cache-flush and statistics
        routes, and how answers and statistics report speculative acceptance."""
