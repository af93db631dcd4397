"""The simulated server against what a real SGLang 0.5.17 did on an H100 (issue 41,
shared/facts/real-sglang.md): NGRAM without a draft model and its acceptance that climbs while
one server stays up, the ``Engine startup timings`` line and ``/server_info`` figures, the
multimodal feature pool that takes 1 GiB from the KV pool, and the deprecated
``--cuda-graph-max-bs``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import pytest

from autotune._knobs import ServerConfig
from autotune.crashes import classify_text
from autotune.engines import EngineSpec, SGLangEngine, SimEngine, SimOptions
from autotune.engines.sglang import SGLANG_CRASH_RULES
from autotune.sim import SimModel, load_profile
from autotune.sim._engine import ServingEngine
from autotune.sim._profile import list_profiles
from autotune.sim._types import StartupPlan
from autotune.sim._virtual import VirtualRun

from ._procs import FAST_PROFILE, SimLauncher, free_port

NGRAM = ServerConfig(
    speculative_algorithm="NGRAM",
    speculative_num_steps=1,
    speculative_eagle_topk=10,
    speculative_num_draft_tokens=12,
)
NGRAM_FLAGS = ("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8")
_POOL_LINE = (
    "Using CUDA IPC for multimodal features: reserving up to 1024 MiB on base GPU 0 across 1 "
    "tokenizer worker(s). This reduces KV cache headroom; a full pool falls back to CPU transport."
)
_TIMINGS = re.compile(
    r"Engine startup timings \(s\): load_weight=([\d.]+), kv_cache_allocation=([\d.]+), "
    r"scheduler_e2e=([\d.]+), cuda_graph=\{prefill=[\d.]+, decode=[\d.]+, "
    r"target_verify=([\d.]+)[^}]*\}, tokenizer_e2e=([\d.]+)$"
)


# --- NGRAM: an n-gram table, on every profile ---------------------------------------------
@pytest.mark.parametrize("name", list_profiles())
def test_ngram_serves_on_every_profile_without_a_draft_model(name: str) -> None:
    model = SimModel.from_profile(name)
    # a fraction every profile serves at (the automatic one starves the seed box's pool under
    # any speculation, as with its EAGLE-3 head)
    config = NGRAM.replace(tp_size=model.profile.hardware.gpu_count, mem_fraction_static=0.88)
    plan = model.plan_startup(config)
    assert plan.crash is None, plan.crash
    assert plan.memory is not None and plan.memory.draft_weights_gib == 0.0
    lines = [line for phase in plan.phases for line in phase.lines]
    assert sum("Load weight end" in line for line in lines) == 1  # the target's only
    assert any("speculative_algorithm='NGRAM'" in line for line in lines)
    verdict = model.evaluate(config)
    assert verdict.status == "ok"
    assert verdict.accept_length is not None and verdict.accept_length > 1.0


def test_ngram_accepts_less_than_an_eagle_head_on_ordinary_text() -> None:
    model = SimModel.from_profile(FAST_PROFILE)
    eagle = model.evaluate(ServerConfig(speculative_algorithm="EAGLE3"))
    ngram = model.evaluate(NGRAM)
    assert eagle.accept_length is not None and ngram.accept_length is not None
    assert 1.0 < ngram.accept_length < eagle.accept_length


def test_ngram_drafts_cost_no_model_forward() -> None:
    # the same tree drafted by a table costs less per cycle than by the profile's EAGLE-3 head
    model = SimModel.from_profile(FAST_PROFILE)
    from autotune.sim._timing import StepTimer

    shape = {"speculative_num_steps": 3, "speculative_eagle_topk": 1}
    table = StepTimer(model.profile, NGRAM.replace(**shape, speculative_num_draft_tokens=4))
    head = StepTimer(
        model.profile,
        ServerConfig(speculative_algorithm="EAGLE3", **shape, speculative_num_draft_tokens=4),
    )
    assert table.cycle_ms(1, 1000.0, 2.0, graph=True) < head.cycle_ms(1, 1000.0, 2.0, graph=True)


def _benchmarks(engine: ServingEngine, plan: StartupPlan, runs: int) -> list[float]:
    model = SimModel.from_profile(FAST_PROFILE)
    workload = model.profile.workload("chat-c64")
    lengths = []
    for _ in range(runs):
        verdict = VirtualRun(engine, workload, model.resolve(NGRAM)).run(plan)
        assert verdict.accept_length is not None
        lengths.append(verdict.accept_length)
    return lengths


def test_ngram_acceptance_climbs_while_one_server_stays_up_and_falls_back_at_a_start() -> None:
    model = SimModel.from_profile(FAST_PROFILE)
    plan = model.plan_startup(NGRAM)
    up = _benchmarks(model.new_engine(NGRAM, plan), plan, 4)
    assert up == sorted(up) and up[-1] > up[0] + 0.05
    restarted = _benchmarks(model.new_engine(NGRAM, plan), plan, 1)
    assert restarted[0] == pytest.approx(up[0])


def test_a_profile_overrides_the_ngram_drafter(tmp_path: Path) -> None:
    source = Path(load_profile(FAST_PROFILE).source).read_text(encoding="utf-8")
    override = "drafts:\n  NGRAM:\n    learning: {cold_share: 1.0}\n    acceptance: {p1: 0.5}\n"
    path = tmp_path / "mine.yaml"
    path.write_text(source.replace("drafts:\n", override, 1), encoding="utf-8")
    profile = load_profile(path)
    draft = profile.draft("NGRAM")
    assert draft is not None and draft.table and draft.weights_gib == 0.0
    assert draft.acceptance.p1 == 0.5 and draft.learning is not None
    assert draft.learning.share(0) == 1.0  # learned from the start: no climb
    assert "EAGLE3" in profile.drafts  # the heads stay
    mine = SimModel(profile).evaluate(NGRAM)
    default = SimModel.from_profile(FAST_PROFILE).evaluate(NGRAM)
    assert mine.accept_length is not None and default.accept_length is not None
    assert mine.accept_length > default.accept_length


def test_a_bad_learning_rate_is_refused_where_the_profile_says_it(tmp_path: Path) -> None:
    from autotune._errors import ConfigError

    source = Path(load_profile(FAST_PROFILE).source).read_text(encoding="utf-8")
    bad = "drafts:\n  NGRAM:\n    learning: {cold_share: 0.0}\n"
    path = tmp_path / "bad.yaml"
    path.write_text(source.replace("drafts:\n", bad, 1), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_profile(path)
    assert info.value.location == "drafts.NGRAM.learning"


# --- a 0.5.17 server, as a process -----------------------------------------------------------
def test_a_0517_ngram_start_says_what_the_real_one_said(sim: SimLauncher) -> None:
    server = sim.start(*NGRAM_FLAGS, "--cuda-graph-max-bs", "8", "--sim-dialect", "0.5.17")
    with httpx.Client(base_url=server.url, timeout=20) as client:
        info = client.get("/server_info").json()
        old = client.get("/get_server_info").json()
    log = server.log()
    lines = log.splitlines()
    assert lines[0] == (
        "'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-max-bs-decode' instead."
    )
    assert info["cuda_graph_max_bs_decode"] == 8
    assert "Multimodal feature transport auto-resolved to cuda_ipc" in log
    assert "reserving up to 1024 MiB" in log
    assert "speculative_algorithm='NGRAM'" in log and "speculative_algorithm='none'" not in log
    assert (info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (10, 8)
    assert info["speculative_num_steps"] == 0  # 8 // 10, as SGLang sets it
    args_line = next(line for line in lines if "server_args=ServerArgs(" in line)
    for shown in ("speculative_num_steps=0", "speculative_eagle_topk=10",
                  "cuda_graph_max_bs_decode=8", "mm_feature_transport='cuda_ipc'"):  # fmt: skip
        assert shown in args_line
    # the timings line, before uvicorn's lines and the ready line, and the same figures served
    timing = [i for i, line in enumerate(lines) if "Engine startup timings" in line]
    started = next(i for i, line in enumerate(lines) if "Started server process" in line)
    assert len(timing) == 1 and timing[0] < started
    found = _TIMINGS.search(lines[timing[0]])
    assert found is not None, lines[timing[0]]
    served = info["startup_time"]
    assert old["startup_time"] == served
    assert float(found.group(1)) == served["load_weight"]
    assert float(found.group(2)) == served["kv_cache_allocation"]
    assert float(found.group(3)) == served["scheduler_e2e"]
    assert float(found.group(4)) == served["cuda_graph"]["target_verify"] > 0
    assert float(found.group(5)) == served["tokenizer_e2e"] >= served["scheduler_e2e"]
    # the tuner reads it as a healthy start, and a line of zeros as nothing at all
    verdict = classify_text(log, SGLANG_CRASH_RULES)
    assert not verdict.is_crash, verdict
    zeros = re.sub(r"=[\d.]+", "=0.00", lines[timing[0]])
    assert not classify_text(zeros + "\n", SGLANG_CRASH_RULES).is_crash


def test_the_multimodal_pool_takes_1_gib_from_the_kv_pool_unless_cpu(sim: SimLauncher) -> None:
    tokens = {}
    for name, extra in (("ipc", ()), ("cpu", ("--mm-feature-transport", "cpu"))):
        server = sim.start("--mem-fraction-static", "0.5", "--sim-dialect", "0.5.17", *extra)
        with httpx.Client(base_url=server.url, timeout=20) as client:
            tokens[name] = client.get("/server_info").json()["max_total_num_tokens"]
        assert ("reserving up to" in server.log()) == (name == "ipc")
    kv_bytes = load_profile(FAST_PROFILE).model.kv_bytes_per_token
    assert tokens["cpu"] - tokens["ipc"] == pytest.approx(2**30 / kv_bytes, abs=1)


def test_the_pool_is_the_size_the_environment_gives() -> None:
    from autotune.sim._args import parse_launch_args, resolve_launch

    launch = parse_launch_args(["--model-path", "m", "--sim-dialect", "0.5.17"])
    env = {"SGLANG_MM_FEATURE_CACHE_MB": "2048"}
    res = resolve_launch(launch, architecture="LlamaForCausalLM", env=env)
    assert res.reserved_gib == 2.0
    for dialect in ("0.5.23", "0.5.3"):  # no pool by default in other releases
        other = parse_launch_args(["--model-path", "m", "--sim-dialect", dialect])
        assert resolve_launch(other, architecture="LlamaForCausalLM", env={}).reserved_gib == 0


def test_the_newest_dialect_has_no_old_graph_flag(sim: SimLauncher) -> None:
    code, log = sim.run("--cuda-graph-max-bs", "8", "--sim-dialect", "0.5.23")
    assert code == 2 and "ambiguous option" in log


def test_the_new_graph_flag_needs_no_warning_in_0517(sim: SimLauncher) -> None:
    server = sim.start("--cuda-graph-max-bs-decode", "8", "--sim-dialect", "0.5.17")
    assert "deprecated" not in server.log()


# --- the tuner's side ------------------------------------------------------------------------
def _spec(kind: str, version: str, **more: object) -> EngineSpec:
    values: dict[str, object] = {"kind": kind, "model_path": "meta-llama/Llama-3.1-8B-Instruct"}
    if kind == "sim":
        values["sim"] = SimOptions(profile=FAST_PROFILE, dialect=version)
    else:
        values["sglang_version"] = version
    values.update(more)
    return EngineSpec(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("version", "flag"),
    [("0.5.17", "--cuda-graph-max-bs-decode"), ("0.5.23", "--cuda-graph-max-bs-decode"),
     ("0.5.13", "--cuda-graph-max-bs"), ("0.5.3", "--cuda-graph-max-bs")],
)  # fmt: skip
def test_the_adapter_spells_the_decode_graph_batch_per_release(version: str, flag: str) -> None:
    argv = (
        SGLangEngine(_spec("sglang", version))
        .build_launch(ServerConfig(cuda_graph_max_bs=8), port=30000)
        .argv
    )
    assert argv[argv.index(flag) + 1] == "8"
    assert flag == "--cuda-graph-max-bs" or "--cuda-graph-max-bs" not in argv


def test_the_sim_takes_the_0517_adapter_command_without_a_warning(sim: SimLauncher) -> None:
    port = free_port()
    options = SimOptions(profile=FAST_PROFILE, dialect="0.5.17", time_scale=0.0001)
    launch = SimEngine(_spec("sim", "0.5.17", sim=options)).build_launch(
        NGRAM.replace(cuda_graph_max_bs=8), port=port
    )
    assert launch.argv[:3] == (sys.executable, "-m", "autotune.sim")
    server = sim.start(*launch.argv[3:], port=port)
    assert "--cuda-graph-max-bs-decode" in launch.argv
    assert "deprecated" not in server.log()
    assert "speculative_algorithm='NGRAM'" in server.log()


@pytest.mark.parametrize(
    ("kind", "version", "extra", "env", "pool"),
    [
        ("sim", "0.5.17", (), {}, 1.0),
        ("sim", "0.5.17", ("--mm-feature-transport", "cpu"), {}, 0.0),
        ("sim", "0.5.23", (), {}, 0.0),
        ("sglang", "0.5.17", (), {}, 1.0),
        ("sglang", "0.5.17.post1", ("--mm-feature-transport=cpu",), {}, 0.0),
        ("sglang", "0.5.17", (), {"SGLANG_MM_FEATURE_CACHE_MB": "2048"}, 2.0),
        ("sglang", "0.5.16", (), {}, 0.0),
        ("sglang", "0.5.23", ("--mm-feature-transport", "cuda_ipc"), {}, 1.0),
    ],
)
def test_the_memory_need_counts_the_multimodal_pool(
    kind: str, version: str, extra: tuple[str, ...], env: dict[str, str], pool: float
) -> None:
    engine = (SimEngine if kind == "sim" else SGLangEngine)(
        _spec(kind, version, extra_args=extra, env=env)
    )
    assert engine.memory_need_gib(ServerConfig(), weights=(14.0, None)) == pytest.approx(
        14.0 + pool
    )


def test_memory_lines_of_a_0517_start_predict_its_kv_pool_crash() -> None:
    model = SimModel.from_profile(FAST_PROFILE)
    engine = SimEngine(_spec("sim", "0.5.17"))
    low = ServerConfig(mem_fraction_static=0.2)
    for reserved in (1.0, 0.0):
        plan = model.plan_startup(ServerConfig(mem_fraction_static=0.5), reserved_gib=reserved)
        lines = [f"[2026-12-07 10:00:00 TP0] {ln}" for ph in plan.phases for ln in ph.lines]
        if reserved:
            lines.insert(0, f"[2026-12-07 10:00:00] {_POOL_LINE}")
        reading = engine.read_memory(lines, ServerConfig(mem_fraction_static=0.5))
        assert reading is not None
        assert reading.reserved_gib == (1.0 if reserved else None)
        refusal = engine.memory_refusal(reading, low)
        crash = model.plan_startup(low, reserved_gib=reserved).crash
        # the refusal says what the start at 0.2 does: with the pool it crashes, without it serves
        assert (refusal is not None) == (crash is not None) == bool(reserved)
        if refusal is not None and crash is not None:
            assert refusal.category == crash.category == "oom_kv_pool"
            assert "multimodal feature pool" in refusal.reason


def test_vllm_ngram_serves_from_the_request_alone() -> None:
    # vLLM's n-gram proposer looks up the request's own tokens: no draft model, and nothing
    # learned across requests
    model = SimModel(load_profile(FAST_PROFILE), engine="vllm")
    config = ServerConfig(speculative_algorithm="NGRAM", speculative_num_steps=3)
    plan = model.plan_startup(config)
    assert plan.crash is None and plan.memory is not None
    assert plan.memory.draft_weights_gib == 0.0
    assert model.new_engine(config, plan).learning is None
    assert model.evaluate(config).status == "ok"
