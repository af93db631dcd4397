"""The simulated-SGLang adapter: SGLang's command line of the sim's dialect plus ``--sim-*``."""

from __future__ import annotations

import sys

import pytest

from autotune._errors import ConfigError
from autotune._knobs import ALLREDUCE_MODES, ServerConfig
from autotune._workload import WorkloadSpec
from autotune.engines import EngineSpec, SGLangEngine, SimEngine, SimOptions, create_engine

EAGLE = ServerConfig(
    speculative_algorithm="EAGLE3",
    speculative_num_steps=2,
    speculative_eagle_topk=4,
    speculative_num_draft_tokens=4,
    cuda_graph_max_bs=128,
    mem_fraction_static=0.88,
    allreduce="nccl_tree",
    tp_size=8,
)


def spec(dialect: str = "0.5.23", **more: object) -> EngineSpec:
    values: dict[str, object] = {
        "kind": "sim",
        "model_path": "moonshotai/Kimi-K2.5",
        "draft_model_path": "/data/eagle3",
        "tp_size": 8,
        "sim": SimOptions(dialect=dialect, time_scale=0.25, noise=0.0),
    }
    values.update(more)
    return EngineSpec(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("dialect", ["0.5.23", "0.5.17", "0.5.3"])
def test_the_sim_gets_exactly_the_sglang_flags_of_its_dialect(dialect: str) -> None:
    workload = WorkloadSpec(concurrency=64)
    sim = SimEngine(spec(dialect)).build_launch(EAGLE, port=31001, workload=workload)
    real = SGLangEngine(spec(dialect, kind="sglang", sglang_version=dialect)).build_launch(
        EAGLE, port=31001, workload=workload
    )
    assert sim.argv[:3] == (sys.executable, "-m", "autotune.sim")
    first_sim_option = sim.argv.index("--sim-profile")
    assert sim.argv[3:first_sim_option] == real.argv[3:]
    assert dict(sim.env) == dict(real.env) == {"NCCL_ALGO": "Tree"}


def test_sim_options_follow_the_sglang_flags() -> None:
    options = SimOptions(
        profile="h100-llama-3.1-8b",
        dialect="0.5.3",
        time_scale=0.5,
        noise=0.1,
        seed=11,
        faults=("slow_start:3", "http_500:2"),
    )
    adapter = SimEngine(spec(sim=options, extra_args=("--decode-log-interval", "10")))
    argv = adapter.build_launch(ServerConfig(), port=1).argv
    tail = argv[argv.index("--decode-log-interval") :]
    assert tail == (
        "--decode-log-interval",
        "10",
        "--sim-profile",
        "h100-llama-3.1-8b",
        "--sim-dialect",
        "0.5.3",
        "--sim-time-scale",
        "0.5",
        "--sim-noise",
        "0.1",
        "--sim-seed",
        "11",
        "--sim-fault",
        "slow_start:3",
        "--sim-fault",
        "http_500:2",
    )
    assert "--sim-seed" not in SimEngine(spec()).build_launch(ServerConfig(), port=1).argv


def test_the_interpreter_is_the_engine_python_when_given() -> None:
    adapter = SimEngine(spec(python="/opt/py/bin/python"))
    launch = adapter.build_launch(ServerConfig(), port=1)
    assert launch.argv[:3] == ("/opt/py/bin/python", "-m", "autotune.sim")
    assert launch.prefix == ()


def test_the_launch_prefix_comes_first_and_is_marked_as_such() -> None:
    adapter = SimEngine(spec(python="/opt/py/bin/python", launch_prefix=("podman", "exec", "b")))
    launch = adapter.build_launch(ServerConfig(), port=1)
    assert launch.argv[:4] == ("podman", "exec", "b", "/opt/py/bin/python")
    assert launch.prefix == ("podman", "exec", "b")


def test_an_unknown_dialect_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"no dialect '0\.4'"):
        SimEngine(spec("0.4"))


@pytest.mark.parametrize("dialect", ["0.5.23", "0.5.3"])
@pytest.mark.parametrize("mode", ALLREDUCE_MODES)
def test_the_simulated_server_reads_back_the_recorded_configuration(
    dialect: str, mode: str
) -> None:
    """The simulator's own parser and SGLang's rules map the command line back to the config."""
    from autotune.sim import load_profile
    from autotune.sim._args import parse_launch_args, resolve_launch

    adapter = create_engine(spec(dialect))
    config = EAGLE.replace(allreduce=mode, max_running_requests=None)
    launch = adapter.build_launch(config, port=31001, workload=WorkloadSpec(concurrency=64))
    architecture = load_profile(adapter.spec.sim.profile).model.architecture
    parsed = parse_launch_args(list(launch.argv[3:]))
    resolved = resolve_launch(parsed, architecture=architecture, env=launch.env)
    assert resolved.config == config.replace(max_running_requests=64)
    assert parsed.sim.dialect == dialect
    assert parsed.deprecations == ()


def test_hardware_and_weights_come_from_the_profile() -> None:
    from autotune.sim import load_profile

    adapter = SimEngine(spec())
    profile = load_profile(adapter.spec.sim.profile)
    hw = adapter.hardware()
    assert hw.gpu_name == profile.hardware.gpu_name
    assert hw.gpu_count == profile.hardware.gpu_count
    assert hw.memory_gib == profile.hardware.memory_gib
    assert hw.compute_capability == tuple(profile.hardware.compute_capability)
    assert hw.interconnect == profile.hardware.interconnect
    target, draft = adapter.weights_gib("EAGLE3")
    assert target == profile.model.weights_gib
    # weights on all GPUs together: the profile's draft head is per GPU, on every rank
    per_gpu = profile.draft_weights_gib("EAGLE3")
    assert per_gpu is not None and draft == per_gpu * adapter.spec.tp_size
    assert adapter.weights_gib("STANDALONE")[1] is None


def test_an_unknown_profile_is_a_config_error() -> None:
    adapter = SimEngine(spec(sim=SimOptions(profile="no-such-profile")))
    with pytest.raises(ConfigError, match="no-such-profile"):
        adapter.hardware()


def test_adaptive_speculation_is_refused_by_the_simulated_server() -> None:
    adapter = SimEngine(spec())
    chain = ServerConfig(
        speculative_algorithm="EAGLE3",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
    )
    refused = adapter.precheck(chain.replace(speculative_adaptive=True))
    assert refused is not None and refused.knob == "speculative_adaptive"
    assert "does not model adaptive speculation" in refused.reason
    assert adapter.precheck(chain.replace(speculative_adaptive=False)) is None
    assert set(adapter.unsupported_values("speculative_adaptive", [True, False])) == {True}
