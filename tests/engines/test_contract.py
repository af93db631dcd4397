"""The engine contract: one suite that every adapter in the registry passes.

As Optuna runs one storage suite over every storage, these tests are parametrised over
:func:`autotune.engines.engine_kinds`: an adapter registered there is run through all of them.
Each kind needs a :class:`EngineCase` in :data:`CASES` (an adapter that needs no installed engine,
and what its server logs and answers); a registered kind without one fails
``test_every_registered_engine_has_a_case`` and every other test, naming what to add.

The contract: a launch is built for a configuration and a port with the secrets kept out of what
is displayed; the engine's rules refuse a draft tree it would not run as given and accept every
draft-token count within its bounds (what the sampler repairs to); a knob value the release lacks
is named by ``unsupported_values`` and refused by ``precheck`` and ``build_launch``; the ready line
is recognised and the probes are listed; a crash log is classified to its category with advice;
a request's ``meta_info`` yields its acceptance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from autotune._errors import ConfigError, EngineError
from autotune._knobs import ALLREDUCE_MODES, SPECULATIVE_ALGORITHMS, ServerConfig
from autotune.crashes import CRASH_CATEGORIES, classify_text
from autotune.engines import Engine, EngineSpec, SimOptions, create_engine, engine_kinds

DATA = Path(__file__).resolve().parents[1] / "crashes" / "data" / "sglang_logs"
VLLM_DATA = Path(__file__).resolve().parent / "vllm" / "data" / "logs"
PORT = 31234
API_KEY = "sk-contract-secret-123"
HF_TOKEN = "hf_contract_secret_456"

#: A speculative configuration every adapter can launch.
CONFIG = ServerConfig(
    speculative_algorithm="EAGLE3",
    speculative_num_steps=3,
    speculative_eagle_topk=2,
    speculative_num_draft_tokens=6,
    mem_fraction_static=0.83,
    cuda_graph_max_bs=24,
    max_running_requests=40,
)


@dataclass(frozen=True)
class EngineCase:
    """What the suite needs of one engine kind.

    ``spec`` builds an adapter that needs no installed engine; ``lacking`` one of a release that
    cannot express some knob value (``None``: none known). ``ready_lines`` are lines the engine's
    server logs when ready, ``crash_logs`` give ``(log text, category)`` pairs as its server logs
    them, ``meta_info`` one streamed answer's statistics with the accept length they mean.
    """

    spec: EngineSpec
    lacking: EngineSpec | None
    ready_lines: Callable[[], Sequence[str]]
    crash_logs: Callable[[], Sequence[tuple[str, str]]]
    meta_info: Mapping[str, Any] = field(default_factory=dict)
    completion_tokens: int = 0
    accept_length: float = 0.0
    #: A speculative configuration the engine launches as given, and the knobs of it whose
    #: values stand as words of its launch.
    config: ServerConfig = field(default_factory=lambda: CONFIG)
    launch_knobs: tuple[str, ...] = (
        "speculative_num_steps",
        "speculative_num_draft_tokens",
        "mem_fraction_static",
    )
    #: EAGLE top-k values the engine drafts with (a chain-only engine: ``(1,)``).
    topks: tuple[int, ...] = (1, 2, 4)
    #: ``(before, after, accept length)``: the server's statistics bodies around a run, by
    #: path, and the acceptance they mean (``None``: the engine reports per request).
    server_stats: tuple[Mapping[str, str], Mapping[str, str], float] | None = None


def _sglang_ready_lines() -> list[str]:
    return [line for line in (DATA / "09_ready.log").read_text().splitlines() if "ready" in line]


def _sglang_crash_logs() -> list[tuple[str, str]]:
    logs = ("05_oom_kv_pool", "02_oom_cuda_graph", "15_oom_runtime", "14_bad_args")
    return [(path.read_text(errors="replace"), path.stem[3:]) for path in map(_log, logs)]


def _log(stem: str) -> Path:
    return DATA / f"{stem}.log"


def _sim_ready_lines() -> list[str]:
    from autotune.sim.__main__ import READY_LINE

    return [f"[2026-01-01 00:00:00] {READY_LINE}"]


def _sim_crash_logs() -> list[tuple[str, str]]:
    """Start-ups the simulator plans to crash, logged as it logs them, with the category the
    simulator meant."""
    from autotune.sim import load_profile
    from autotune.sim._startup import StartupPlanner

    planner = StartupPlanner(load_profile(SimOptions().profile))
    out = []
    for mem in (0.3, 0.97):
        plan = planner.plan(ServerConfig(tp_size=8, mem_fraction_static=mem), {})
        assert plan.crash is not None
        lines = [line for phase in plan.phases for line in phase.lines]
        lines += [line for chunk in plan.crash.lines for line in chunk.split("\n")]
        text = "".join(f"[2026-01-01 00:00:00 TP0] {line}\n" for line in lines)
        out.append((text, plan.crash.category))
    return out


#: SGLang's ``meta_info`` of a finished speculative ``/generate`` stream (the simulator's too).
SGLANG_META = {
    "prompt_tokens": 12,
    "completion_tokens": 64,
    "spec_verify_ct": 20,
    "spec_accept_rate": 0.5,
    "finish_reason": {"type": "length", "length": 64},
}

CASES: dict[str, EngineCase] = {
    "sglang": EngineCase(
        spec=EngineSpec(
            kind="sglang",
            sglang_version="0.5.23",
            model_path="/models/target",
            draft_model_path="/models/draft",
            check_paths=False,
        ),
        lacking=EngineSpec(kind="sglang", sglang_version="0.5.2", check_paths=False),
        ready_lines=_sglang_ready_lines,
        crash_logs=_sglang_crash_logs,
        meta_info=SGLANG_META,
        completion_tokens=64,
        accept_length=64 / 20,
    ),
    "sim": EngineCase(
        spec=EngineSpec(kind="sim", model_path="moonshotai/Kimi-K2.5", tp_size=8),
        lacking=None,
        ready_lines=_sim_ready_lines,
        crash_logs=_sim_crash_logs,
        meta_info=SGLANG_META,
        completion_tokens=64,
        accept_length=64 / 20,
    ),
}


def _vllm_ready_lines() -> list[str]:
    return ["INFO:     Application startup complete."]


def _vllm_crash_logs() -> list[tuple[str, str]]:
    """Real vLLM logs from public issue threads (see tests/engines/vllm/data/logs.json)."""
    logs = ("01_oom_kv_pool", "16_oom_runtime", "10_bad_args", "13_unsupported_arch")
    return [(VLLM_DATA.joinpath(f"{stem}.log").read_text(), stem[3:]) for stem in logs]


def _vllm_metrics(drafts: int, proposed: int, accepted: int) -> str:
    labels = '{engine="0",model_name="target"}'
    return (
        f"vllm:spec_decode_num_drafts_total{labels} {drafts}.0\n"
        f"vllm:spec_decode_num_draft_tokens_total{labels} {proposed}.0\n"
        f"vllm:spec_decode_num_accepted_tokens_total{labels} {accepted}.0\n"
    )


CASES["vllm"] = EngineCase(
    spec=EngineSpec(
        kind="vllm",
        vllm_version="0.33.0",
        model_path="/models/target",
        draft_model_path="/models/draft",
        check_paths=False,
    ),
    lacking=EngineSpec(kind="vllm", vllm_version="0.10.2", check_paths=False),
    ready_lines=_vllm_ready_lines,
    crash_logs=_vllm_crash_logs,
    config=ServerConfig(
        speculative_algorithm="EAGLE3",
        speculative_num_steps=3,
        gpu_memory_utilization=0.83,
        cuda_graph_max_bs=24,
        max_running_requests=40,
    ),
    launch_knobs=("gpu_memory_utilization", "cuda_graph_max_bs", "max_running_requests"),
    topks=(1,),
    # 100 chains of 3 drafted tokens, 180 of them accepted: 1 + 180 / 100 per verify pass
    server_stats=(
        {"/metrics": _vllm_metrics(20, 60, 30)},
        {"/metrics": _vllm_metrics(120, 360, 210)},
        2.8,
    ),
)


def _sim_vllm_crash_logs() -> list[tuple[str, str]]:
    """Start-ups the simulated vLLM server plans to crash, logged as it logs them, with the
    category the simulator meant: no KV cache block, max_model_len beyond the KV cache, the
    drafter's CUDA graphs outside the share."""
    import io

    from autotune.sim import SimModel, load_profile
    from autotune.sim._vllm_log import VLLMLog

    model = SimModel(load_profile("h100-llama-3.1-8b"), engine="vllm")
    out = []
    for utilization in (0.2, 0.4, 0.99):
        config = ServerConfig(
            speculative_algorithm="EAGLE3",
            speculative_num_steps=4,
            gpu_memory_utilization=utilization,
            cuda_graph_max_bs=512,
        )
        plan = model.plan_startup(config)
        assert plan.crash is not None, utilization
        text = io.StringIO()
        log = VLLMLog(text, pid=4242)
        for record in [line for phase in plan.phases for line in phase.lines]:
            log.record(record)
        for record in plan.crash.lines:
            log.record(record)
        out.append((text.getvalue(), plan.crash.category))
    return out


CASES["sim-vllm"] = dataclasses.replace(
    CASES["vllm"],
    spec=EngineSpec(
        kind="sim-vllm",
        model_path="meta-llama/Llama-3.1-8B-Instruct",
        draft_model_path="/models/draft",
        sim=SimOptions(profile="h100-llama-3.1-8b"),
    ),
    lacking=None,
    ready_lines=lambda: ["(APIServer pid=4242) INFO:     Application startup complete."],
    crash_logs=_sim_vllm_crash_logs,
)


def case_of(kind: str) -> EngineCase:
    found = CASES.get(kind)
    if found is None:
        pytest.fail(
            f"engine kind {kind!r} is registered but has no EngineCase in {__file__}: add one "
            "(an adapter spec needing no install, its ready lines, crash logs and meta_info)"
        )
    return found


@pytest.fixture(params=engine_kinds())
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def case(kind: str) -> EngineCase:
    return case_of(kind)


@pytest.fixture
def engine(case: EngineCase) -> Engine:
    return create_engine(case.spec)


def test_every_registered_engine_has_a_case() -> None:
    assert set(engine_kinds()) <= set(CASES), "add an EngineCase for every registered kind"
    assert engine_kinds(), "no engine is registered"


def test_the_adapter_is_the_registered_kind(kind: str, engine: Engine) -> None:
    assert engine.kind == kind
    assert engine.describe().strip()


# --- launch --------------------------------------------------------------------------------------
def test_launch_is_built_for_the_config_and_port(case: EngineCase, engine: Engine) -> None:
    config = case.config
    launch = engine.build_launch(config, port=PORT)
    assert launch.port == PORT and launch.url.endswith(f":{PORT}")
    assert str(PORT) in launch.argv
    assert engine.spec.model_path in launch.argv
    words = set(launch.argv) | set(launch.env.values())
    for knob in case.launch_knobs:
        assert str(getattr(config, knob)) in words, f"{knob} is not in the launch"
    other = engine.build_launch(config, port=PORT + 1)
    assert str(PORT + 1) in other.argv and str(PORT) not in other.argv


def test_launch_keeps_secrets_out_of_its_display(case: EngineCase) -> None:
    spec = dataclasses.replace(
        case.spec,
        extra_args=("--api-key", API_KEY),
        env={"HF_TOKEN": HF_TOKEN, "NCCL_DEBUG": "WARN"},
    )
    launch = create_engine(spec).build_launch(case.config, port=PORT)
    shown = launch.display()
    assert API_KEY not in shown and HF_TOKEN not in shown and API_KEY not in repr(launch)
    assert "NCCL_DEBUG=WARN" in shown  # what is not secret stays visible
    assert {API_KEY, HF_TOKEN} <= launch.secrets()
    assert launch.api_key == API_KEY and launch.auth_headers
    passed = launch.display(redact=False)
    assert API_KEY in passed and HF_TOKEN in passed  # redacted in display only


# --- rules -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("steps", "topk"), [(2, 1), (3, 2), (4, 4)])
def test_draft_tree_rule_refuses_outside_its_bounds(
    case: EngineCase, engine: Engine, steps: int, topk: int
) -> None:
    if topk not in case.topks:  # a top-k the engine has no tree for is refused as such
        config = ServerConfig(
            speculative_algorithm="EAGLE3", speculative_num_steps=steps, speculative_eagle_topk=topk
        )
        refusal = engine.check_rules(config)
        assert refusal is not None and refusal.knob == "speculative_eagle_topk", refusal
        assert engine.unsupported_values("speculative_eagle_topk", [topk])
        return
    low, high = engine.draft_token_bounds(steps, topk)
    assert 1 <= low <= high

    def tree(tokens: int) -> ServerConfig:
        return ServerConfig(
            speculative_algorithm="EAGLE3",
            speculative_num_steps=steps,
            speculative_eagle_topk=topk,
            speculative_num_draft_tokens=tokens,
        )

    for tokens in {low, high, (low + high) // 2}:  # what the sampler repairs to
        assert engine.check_rules(tree(tokens)) is None, tokens
    for tokens in (high + 1, high + 8):
        refusal = engine.check_rules(tree(tokens))
        assert refusal is not None and refusal.knob == "speculative_num_draft_tokens"
        assert refusal.reason and refusal.category in ("bad_args", "infeasible")


def test_speculative_numbers_without_an_algorithm_are_refused(engine: Engine) -> None:
    refusal = engine.check_rules(ServerConfig(speculative_num_steps=3))
    assert refusal is not None and refusal.knob == "speculative_num_steps"


# --- knobs the engine lacks --------------------------------------------------------------------
def test_unknown_values_and_knobs_are_refused(engine: Engine) -> None:
    refused = engine.unsupported_values("speculative_algorithm", ["EAGLE3", "NO-SUCH-ALGO"])
    assert set(refused) == {"NO-SUCH-ALGO"} and refused["NO-SUCH-ALGO"]
    with pytest.raises(ConfigError):
        engine.unsupported_values("no_such_knob", [1])


@pytest.mark.parametrize(
    ("knob", "values"),
    [("allreduce", ALLREDUCE_MODES), ("speculative_algorithm", SPECULATIVE_ALGORITHMS)],
)
def test_unsupported_values_agree_with_precheck_and_launch(
    case: EngineCase, knob: str, values: Sequence[Any]
) -> None:
    specs = [case.spec] + ([case.lacking] if case.lacking is not None else [])
    for spec in specs:
        engine = create_engine(spec)
        refused = engine.unsupported_values(knob, values)
        for value in values:
            params: dict[str, Any] = {knob: value, "tp_size": 2}
            if knob == "speculative_algorithm" and value != "none":
                params.update(speculative_num_steps=3, speculative_eagle_topk=1)
                params["speculative_num_draft_tokens"] = 4
            config = ServerConfig.from_params(params)
            verdict = engine.precheck(config)
            if value in refused:
                assert verdict is not None and verdict.knob == knob, (spec, value)
                with pytest.raises(EngineError):
                    engine.build_launch(config, port=PORT)
            else:
                assert verdict is None, (spec, value, verdict)


def test_a_release_that_lacks_a_knob_value_names_it(case: EngineCase) -> None:
    if case.lacking is None:
        pytest.skip("no release of this engine is known to lack a knob value")
    engine = create_engine(case.lacking)
    refused = engine.unsupported_values("allreduce", ALLREDUCE_MODES)
    assert refused and all(reason for reason in refused.values())


# --- readiness ---------------------------------------------------------------------------------
def test_readiness_recognises_the_ready_line_and_lists_probes(
    case: EngineCase, engine: Engine
) -> None:
    readiness = engine.readiness()
    assert readiness.ready_lines and readiness.probes
    lines = case.ready_lines()
    assert lines and all(readiness.is_ready_line(line) for line in lines)
    for not_ready in ("Load weight begin. avail mem=70.00 GB", "Capture cuda graph begin.", ""):
        assert not readiness.is_ready_line(not_ready)
    for probe in readiness.probes:
        assert probe.path.startswith("/")


# --- crash reading -----------------------------------------------------------------------------
def test_crash_logs_are_classified_to_their_category(case: EngineCase, engine: Engine) -> None:
    rules = engine.crash_rules()
    logs = case.crash_logs()
    assert logs
    for text, category in logs:
        assert category in CRASH_CATEGORIES
        verdict = classify_text(text, rules)
        assert (verdict.category, verdict.is_crash) == (category, True), text[-300:]
        assert verdict.evidence and verdict.line_number and verdict.advice


def test_a_ready_log_is_no_crash(case: EngineCase, engine: Engine) -> None:
    text = "".join(f"{line}\n" for line in case.ready_lines())
    verdict = classify_text(text, engine.crash_rules())
    assert verdict.category == "ready" and not verdict.is_crash


# --- acceptance --------------------------------------------------------------------------------
def test_meta_info_yields_acceptance(case: EngineCase, engine: Engine) -> None:
    api = engine.server_api()
    if not case.meta_info:
        assert api.from_meta_info({"completion_tokens": 64}).verify_ct is None
        pytest.skip("this engine's answers carry no per-request speculative statistics")
    stats = api.from_meta_info(case.meta_info)
    acceptance = api.of_requests([(case.completion_tokens, stats)])
    assert acceptance is not None and acceptance.source == "request_meta_info"
    assert acceptance.accept_length == pytest.approx(case.accept_length)
    assert api.of_requests([(case.completion_tokens, api.from_meta_info({}))]) is None


def test_server_statistics_routes_are_paths(engine: Engine) -> None:
    api = engine.server_api()
    for path in (*api.stats_before, *api.stats_after, api.flush_cache_path or "/"):
        assert path.startswith("/")
    assert api.from_server({}, {}) is None  # no answers: nothing measured


def test_server_statistics_yield_acceptance(case: EngineCase, engine: Engine) -> None:
    if case.server_stats is None:
        pytest.skip("this engine's acceptance comes from its answers")
    before, after, length = case.server_stats
    api = engine.server_api()
    assert set(before) <= set(api.stats_before) and set(after) <= set(api.stats_after)
    acceptance = api.from_server(before, after)
    assert acceptance is not None and acceptance.accept_length == pytest.approx(length)
    assert api.from_server(after, after) is None  # nothing drafted in between


def test_the_start_up_time_scale_is_that_of_the_box_it_stands_for(engine: Engine) -> None:
    scale = engine.startup_time_scale()
    # a real engine starts in real time; the simulator as fast as its time scale says
    simulated = engine.spec.kind in ("sim", "sim-vllm")
    expected = engine.spec.sim.time_scale if simulated else 1.0
    assert scale == expected and 0 < scale <= 1.0


def test_the_box_facts_of_a_simulated_server_are_its_profile(engine: Engine) -> None:
    # a simulated server's box is its profile's; a real one's box is the user's to describe
    profile = type(engine).facts_profile(engine.spec)
    assert profile == (engine.spec.sim.profile if not engine.runs_checkpoint else None)


def test_the_twin_models_the_engines_that_speak_sglang(engine: Engine) -> None:
    assert type(engine).twin_models == (engine.family == "SGLang")
