"""The simulated-SGLang adapter: the same command line as SGLang, run by ``python -m autotune.sim``.

The simulated server accepts SGLang's flag names in one of three release dialects
(``engine.sim.dialect``: ``0.5.23``, ``0.5.17`` or ``0.5.3``), so the launch is built by the
SGLang adapter's own code from autotune's table of that release, followed by the ``--sim-*``
options, and judged by SGLang's own rules (:class:`autotune.engines.sglang.SGLangRules`).
Hardware and weight sizes come from the simulator's profile. Each trial also records the SGLang
command it stands for (:meth:`SimEngine.reference_command`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._errors import ConfigError
from autotune._knobs import Infeasible
from autotune.engines._spec import EngineSpec
from autotune.engines.sglang._adapter import (
    SGLangEngine,
    build_server_args,
    first_missing,
    unsupported_in,
)
from autotune.engines.sglang._dialects import FlagSet, known_flagset
from autotune.engines.sglang._rules import SGLangRules
from autotune.engines.sim._profile_facts import ProfileFacts

if TYPE_CHECKING:
    from autotune._document import Section
    from autotune._knobs import ServerConfig
    from autotune._launch import LaunchSpec
    from autotune._workload import WorkloadSpec
    from autotune.engines._spec import SimOptions

#: The SGLang releases whose command line the simulated server speaks.
SIM_DIALECTS = ("0.5.23", "0.5.17", "0.5.3")
_NO_ADAPTIVE = (
    "the simulated server does not model adaptive speculation (speculative_adaptive): "
    "tune it against a real SGLang"
)


def check_sim_options(
    options: SimOptions,
    sec: Section,
    *,
    tp_size: int,
    dialects: tuple[str, ...] | None = SIM_DIALECTS,
) -> None:
    """Refuse, where the space file says it, a simulator section the simulator cannot run.

    The dialect must be one of ``dialects`` (``None``: not checked here), the profile one the
    simulator loads, the
    tensor-parallel size at most the profile's GPU count, and every fault one of
    the simulator's faults with a valid argument.

    Raises:
        ConfigError: located at ``engine.sim.<key>`` (with the line, through ``sec``).
    """
    from autotune.sim import load_profile, parse_fault

    if dialects is not None and options.dialect not in dialects:
        raise sec.error(
            f"the simulated server has no dialect {options.dialect!r}",
            "dialect",
            hint="choose one of: " + ", ".join(dialects),
        )
    try:
        profile = load_profile(options.profile)
    except ConfigError as e:
        raise sec.error(e.message, "profile", hint=e.hint) from None
    except (OSError, ValueError) as e:  # e.g. a NUL in the path
        raise sec.error(f"cannot load the simulator profile: {e}", "profile") from None
    gpus = profile.hardware.gpu_count
    if tp_size > gpus:
        raise sec.doc.error(
            f"tp_size {tp_size} is more than the {gpus} GPU(s) of simulator profile "
            f"{options.profile!r}",
            (*sec.path[:-1], "tp_size"),
            hint=f"use tp_size <= {gpus}, or a profile with more GPUs",
        )
    for i, spec in enumerate(options.faults):
        try:
            parse_fault(spec)
        except ConfigError as e:
            message = e.message.removeprefix("--sim-fault: ")
            raise sec.doc.error(message, (*sec.path, "faults", i), hint=e.hint) from None


class SimEngine(ProfileFacts, SGLangRules):
    """Launches the simulated SGLang server with the flags of ``engine.sim.dialect``."""

    kind = "sim"
    default_model_path = EngineSpec.model_path

    def __init__(self, spec: EngineSpec) -> None:
        super().__init__(spec)
        dialect = spec.sim.dialect
        if dialect not in SIM_DIALECTS:
            raise ConfigError(
                f"the simulated server has no dialect {dialect!r}",
                location="engine.sim.dialect",
                hint="choose one of: " + ", ".join(SIM_DIALECTS),
            )
        self._flags = known_flagset(dialect)
        self._sglang: SGLangEngine | None = None

    @classmethod
    def read_section(cls, sec: Section, spec: EngineSpec, *, base: Path) -> EngineSpec:
        """``engine.sim``: a dialect, profile, tensor-parallel size and faults it can run."""
        check_sim_options(spec.sim, sec.section("sim"), tp_size=spec.tp_size)
        return spec

    @classmethod
    def spec_note(cls, spec: EngineSpec) -> str | None:
        return f"profile {spec.sim.profile}, SGLang {spec.sim.dialect} flags"

    @property
    def python(self) -> str:
        """``engine.python``, else this interpreter, behind a launch prefix too (the simulated
        server runs where autotune is installed: a container that shares its files)."""
        return self.spec.python or sys.executable

    def flagset(self) -> FlagSet:
        """The flag set of the SGLang release the simulated server imitates."""
        return self._flags

    def startup_time_scale(self) -> float:
        assert self.spec.sim is not None
        return float(self.spec.sim.time_scale)

    def serve_time_scale(self) -> float:
        """The simulator's serving clock (``engine.sim.serve_scale``)."""
        return float(self.spec.sim.serve_scale)

    def describe(self) -> str:
        sim = self.spec.sim
        return (
            f"simulated SGLang {sim.dialect} (profile {sim.profile}, time scale {sim.time_scale})"
        )

    def build_launch(
        self, config: ServerConfig, *, port: int, workload: WorkloadSpec | None = None
    ) -> LaunchSpec:
        args, knob_env = build_server_args(
            self._flags, self.spec, config, port=port, workload=workload
        )
        sim = self.spec.sim
        argv = [*self.spec.launch_prefix, self.python, "-m", "autotune.sim", *args]
        argv += self.spec.extra_args
        argv += ["--sim-profile", sim.profile, "--sim-dialect", sim.dialect]
        argv += ["--sim-time-scale", repr(float(sim.time_scale))]
        if sim.serve_scale != 1.0:
            argv += ["--sim-serve-scale", repr(float(sim.serve_scale))]
        argv += ["--sim-noise", repr(float(sim.noise))]
        if sim.seed is not None:
            argv += ["--sim-seed", str(sim.seed)]
        for fault in sim.faults:
            argv += ["--sim-fault", fault]
        return self.spec.launch(argv, knob_env, port)

    def precheck(self, config: ServerConfig) -> Infeasible | None:
        if config.speculative_adaptive:
            return Infeasible(_NO_ADAPTIVE, "bad_args", "speculative_adaptive")
        return first_missing(self._flags, self.spec, config)

    def reference_command(
        self, config: ServerConfig, *, port: int, workload: WorkloadSpec | None = None
    ) -> str | None:
        """The ``sglang.launch_server`` command of the imitated release that ``config`` stands
        for (it names ``python3``: the interpreter of an SGLang installation is not known)."""
        if self._sglang is None:
            spec = dataclasses.replace(self.spec, python="python3")
            self._sglang = SGLangEngine(spec, flags=self._flags)
        return self._sglang.build_launch(config, port=port, workload=workload).display()

    def unsupported_values(self, knob: str, values: Iterable[Any]) -> dict[Any, str]:
        refused = unsupported_in(self._flags, self.spec, knob, values)
        if knob == "speculative_adaptive":
            refused.update({v: _NO_ADAPTIVE for v in values if v is True})
        return refused
