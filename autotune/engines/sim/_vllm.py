"""The simulated-vLLM adapter: ``vllm serve``'s command line, run by ``python -m autotune.sim``.

``engine.kind: sim-vllm`` is vLLM on the simulator: the launch is built by the vLLM adapter's own
code from autotune's table of the release the simulated server speaks (``engine.vllm_version``,
0.33.0 by default), behind ``python -m autotune.sim serve`` and followed by the ``--sim-*``
options; it is judged by vLLM's rules (its knobs, one draft chain, the knobs it lacks refused),
read by vLLM's readiness, crash rules and ``/metrics`` acceptance. Hardware and weight sizes come
from the simulator's profile. Each trial also records the ``vllm serve`` command it stands for
(:meth:`SimVLLMEngine.reference_command`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from autotune._errors import ConfigError
from autotune._launch import LaunchSpec
from autotune._redact import api_key_of, is_secret_env
from autotune.engines._spec import EngineSpec
from autotune.engines.sim._adapter import check_sim_options
from autotune.engines.sim._profile_facts import ProfileFacts
from autotune.engines.vllm._adapter import VLLMEngine, build_serve_args
from autotune.engines.vllm._flags import VLLMFlags, known_flags

if TYPE_CHECKING:
    from autotune._document import Section
    from autotune._knobs import ServerConfig
    from autotune._workload import WorkloadSpec

#: The vLLM releases whose command line the simulated server speaks.
SIM_VLLM_RELEASES = ("0.33.0",)


def _release(spec: EngineSpec) -> str:
    release = spec.vllm_version or SIM_VLLM_RELEASES[0]
    if release not in SIM_VLLM_RELEASES:
        raise ConfigError(
            f"the simulated vLLM server does not speak vLLM {release}",
            location="engine.vllm_version",
            hint="use one of: " + ", ".join(SIM_VLLM_RELEASES),
        )
    return release


class SimVLLMEngine(ProfileFacts, VLLMEngine):
    """Launches the simulated vLLM server with the flags of ``engine.vllm_version``."""

    kind = "sim-vllm"
    default_model_path: ClassVar[str | None] = EngineSpec.model_path

    def __init__(self, spec: EngineSpec, *, flags: VLLMFlags | None = None) -> None:
        self.release = _release(spec)
        table = known_flags(self.release)
        simulated = VLLMFlags(table.version, table.options, source="the simulated vLLM server")
        super().__init__(spec, flags=flags or simulated)

    @classmethod
    def read_section(cls, sec: Section, spec: EngineSpec, *, base: Path) -> EngineSpec:
        """``engine.sim``: a profile, tensor-parallel size and faults the simulator can run;
        the release comes from ``engine.vllm_version``, not from ``engine.sim.dialect``."""
        sim = sec.section("sim")
        if "dialect" in sim.data:
            raise sim.error(
                "the simulated vLLM server takes its release from engine.vllm_version, not "
                "from engine.sim.dialect (SGLang's releases)",
                "dialect",
                hint="remove dialect, or set engine.vllm_version to one of: "
                + ", ".join(SIM_VLLM_RELEASES),
            )
        if spec.vllm_version is not None and spec.vllm_version not in SIM_VLLM_RELEASES:
            raise sec.error(
                f"the simulated vLLM server does not speak vLLM {spec.vllm_version}",
                "vllm_version",
                hint="use one of: " + ", ".join(SIM_VLLM_RELEASES),
            )
        check_sim_options(spec.sim, sim, tp_size=spec.tp_size, dialects=None)
        return spec

    @classmethod
    def spec_note(cls, spec: EngineSpec) -> str | None:
        return f"profile {spec.sim.profile}, vLLM {spec.vllm_version or SIM_VLLM_RELEASES[0]} flags"

    @property
    def python(self) -> str:
        """``engine.python``, else this interpreter (the simulated server runs where autotune is
        installed)."""
        return self.spec.python or sys.executable

    def describe(self) -> str:
        sim = self.spec.sim
        return f"simulated vLLM {self.release} (profile {sim.profile}, time scale {sim.time_scale})"

    def check_installed(self) -> None:
        return None

    def startup_time_scale(self) -> float:
        return float(self.spec.sim.time_scale)

    def serve_time_scale(self) -> float:
        """The simulator's serving clock (``engine.sim.serve_scale``)."""
        return float(self.spec.sim.serve_scale)

    def build_launch(
        self, config: ServerConfig, *, port: int, workload: WorkloadSpec | None = None
    ) -> LaunchSpec:
        args, knob_env = build_serve_args(self.flags(), self.spec, config, port=port)
        sim = self.spec.sim
        argv = [*self.spec.launch_prefix, self.python, "-m", "autotune.sim", "serve", *args]
        argv += self.spec.extra_args
        argv += ["--sim-profile", sim.profile, "--sim-dialect", f"vllm-{self.release}"]
        argv += ["--sim-time-scale", repr(float(sim.time_scale))]
        if sim.serve_scale != 1.0:
            argv += ["--sim-serve-scale", repr(float(sim.serve_scale))]
        argv += ["--sim-noise", repr(float(sim.noise))]
        if sim.seed is not None:
            argv += ["--sim-seed", str(sim.seed)]
        for fault in sim.faults:
            argv += ["--sim-fault", fault]
        return self._launch(argv, knob_env, port)

    def reference_command(
        self, config: ServerConfig, *, port: int, workload: WorkloadSpec | None = None
    ) -> str | None:
        """The ``vllm serve`` command of the imitated release that ``config`` stands for."""
        args, knob_env = build_serve_args(self.flags(), self.spec, config, port=port)
        argv = ["vllm", "serve", *args, *self.spec.extra_args]
        return self._launch(argv, knob_env, port).display()

    def _launch(self, argv: list[str], knob_env: dict[str, str], port: int) -> LaunchSpec:
        env = {**self.spec.env, **knob_env}
        return LaunchSpec(
            argv=tuple(argv),
            env=env,
            port=port,
            host=self.spec.host,
            secret_env=frozenset(name for name in env if is_secret_env(name)),
            api_key=api_key_of(self.spec.extra_args),
        )
