"""What a space file says about the engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autotune._launch import LaunchSpec, Timeouts
from autotune._redact import api_key_of, is_secret_env


@dataclass(frozen=True)
class SimOptions:
    """Options of the simulated engine (``--sim-*`` flags of ``python -m autotune.sim``)."""

    profile: str = "rtxpro6000x8-kimi-k2.5"
    dialect: str = "0.5.23"
    time_scale: float = 0.01
    #: Wall seconds of serving per second of the box it models (``--sim-serve-scale``): below 1
    #: the simulated box serves on a faster clock, and the tuner's client reads its times back
    #: in the box's seconds (:meth:`Engine.serve_time_scale`).
    serve_scale: float = 1.0
    noise: float = 0.02
    seed: int | None = None
    faults: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineSpec:
    """The engine section of a space: which engine, which model, how to launch it.

    ``python`` is the interpreter that runs ``-m sglang.launch_server`` (a virtual environment's
    ``bin/python``); ``launch_prefix`` goes in front of the whole command (``docker exec NAME``,
    ``srun ...``). ``extra_args`` and ``env`` are passed as given; they are never joined into a
    shell string.
    """

    kind: str = "sim"
    model_path: str = "moonshotai/Kimi-K2.5"
    draft_model_path: str | None = None
    tp_size: int = 1
    host: str = "127.0.0.1"
    #: ``engine.expose``: the space allows a host other than a loopback address.
    expose: bool = False
    port: int = 30000
    python: str | None = None
    launch_prefix: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    sglang_version: str | None = None
    #: The vLLM release whose flags to speak (autotune's table); ``None``: read the installed one.
    vllm_version: str | None = None
    check_paths: bool = True
    timeouts: Timeouts = field(default_factory=Timeouts)
    sim: SimOptions = SimOptions()

    def launch(self, argv: Sequence[str], knob_env: Mapping[str, str], port: int) -> LaunchSpec:
        """The launch of ``argv`` (the launch prefix first) with :attr:`env` under the knobs'
        environment, its secret names marked, the server's ``--api-key`` from
        :attr:`extra_args`, and the prefix the server runs and is stopped through."""
        env = {**self.env, **knob_env}
        return LaunchSpec(
            argv=tuple(argv),
            env=env,
            port=port,
            host=self.host,
            secret_env=frozenset(name for name in env if is_secret_env(name)),
            api_key=api_key_of(self.extra_args),
            prefix=tuple(self.launch_prefix),
        )
