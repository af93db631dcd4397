"""SGLang's own rules: each has a configuration it refuses and a neighbour it accepts; and the rest
of what both SGLang-speaking adapters know (draft tree, automatic choice, incompatibilities).
"""

from __future__ import annotations

from typing import Any

import pytest

from autotune._knobs import SPECULATIVE_NUMBERS, ServerConfig
from autotune.engines import EngineSpec, Hardware, SGLangEngine, SimEngine, create_engine
from autotune.engines.sglang._rules import check_rules, draft_token_bounds, incompatibility


def _spec(steps: int | None, topk: int | None, draft: int | None, **more: Any) -> ServerConfig:
    return ServerConfig(
        speculative_algorithm="EAGLE3",
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft,
        **more,
    )


# (refused configuration, category, knob, accepted neighbour)
RULES = [
    pytest.param(
        ServerConfig(
            speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4
        ),
        "infeasible",
        "speculative_num_steps",
        _spec(3, 1, 4),
        id="numbers-without-algorithm",
    ),
    pytest.param(
        _spec(3, None, None),
        "bad_args",
        "speculative_eagle_topk",
        _spec(None, None, None),
        id="all-three-or-none",
    ),
    pytest.param(
        _spec(None, 2, 4),
        "bad_args",
        "speculative_num_steps",
        _spec(3, 2, 4),
        id="all-three-or-none-steps-missing",
    ),
    pytest.param(
        _spec(2, 1, 4),
        "infeasible",
        "speculative_num_draft_tokens",
        _spec(2, 1, 3),
        id="topk-1-fixes-draft-tokens",
    ),
    pytest.param(
        _spec(2, 4, 10),
        "bad_args",
        "speculative_num_draft_tokens",
        _spec(2, 4, 9),
        id="draft-tree-capacity",
    ),
    pytest.param(
        _spec(2, 2, 1),
        "bad_args",
        "speculative_num_draft_tokens",
        _spec(2, 2, 2),
        id="at-least-two-draft-tokens",
    ),
    pytest.param(
        _spec(2, 4, 4, page_size=16, attention_backend="flashmla"),
        "bad_args",
        "speculative_eagle_topk",
        _spec(2, 4, 4, page_size=16, attention_backend="fa3"),
        id="paged-topk-needs-flashinfer-fa3-triton",
    ),
    pytest.param(
        _spec(2, 2, 4, attention_backend="trtllm_mha"),
        "bad_args",
        "speculative_eagle_topk",
        _spec(2, 1, 3, attention_backend="trtllm_mha"),
        id="trtllm-mha-topk-1-only",
    ),
    pytest.param(
        _spec(2, 1, 3, attention_backend="fa4"),
        "bad_args",
        "attention_backend",
        _spec(2, 1, 3, attention_backend="flashinfer"),
        id="backend-without-speculation",
    ),
]


@pytest.mark.parametrize(("refused", "category", "knob", "accepted"), RULES)
def test_rule_refuses_and_accepts(
    refused: ServerConfig, category: str, knob: str, accepted: ServerConfig
) -> None:
    verdict = check_rules(refused)
    assert verdict is not None
    assert verdict.category == category
    assert verdict.knob == knob
    assert ":" in verdict.reason
    assert check_rules(accepted) is None


@pytest.mark.parametrize("backend", ["fa4", "trtllm_mla", "torch_native", "flex_attention"])
def test_backends_without_speculation_still_serve_the_baseline(backend: str) -> None:
    assert check_rules(_spec(None, None, None, attention_backend=backend)) is not None
    assert check_rules(ServerConfig(attention_backend=backend)) is None


def test_paged_topk_with_the_backend_left_to_sglang_is_allowed() -> None:
    assert check_rules(_spec(2, 4, 4, page_size=16)) is None
    assert check_rules(_spec(2, 4, 4, page_size=1, attention_backend="flashmla")) is None


def test_nccl_tree_with_cuda_graphs_is_not_a_rule() -> None:
    assert check_rules(_spec(2, 4, 4, allreduce="nccl_tree", cuda_graph_max_bs=128)) is None


def test_topk_1_reason_names_what_sglang_would_run() -> None:
    verdict = check_rules(_spec(4, 1, 8))
    assert verdict is not None
    assert "speculative_num_draft_tokens=5" in verdict.reason


# --- the draft tree: one statement, the rules agree with it --------------------------------
@pytest.mark.parametrize(
    ("steps", "topk", "bounds"), [(1, 1, (2, 2)), (3, 1, (4, 4)), (2, 4, (2, 9)), (5, 8, (2, 41))]
)
def test_draft_token_bounds(steps: int, topk: int, bounds: tuple[int, int]) -> None:
    assert draft_token_bounds(steps, topk) == bounds


def test_the_rules_accept_exactly_the_draft_counts_within_the_bounds() -> None:
    for steps in range(1, 6):
        for topk in range(1, 5):
            low, high = draft_token_bounds(steps, topk)
            for draft in range(1, 26):
                accepted = check_rules(_spec(steps, topk, draft)) is None
                assert accepted == (low <= draft <= high), (steps, topk, draft)


def _adapters() -> list[Any]:
    return [
        pytest.param(SGLangEngine(EngineSpec(kind="sglang", sglang_version="0.5.23")), id="sglang"),
        pytest.param(SimEngine(EngineSpec(kind="sim")), id="sim"),
    ]


@pytest.mark.parametrize("engine", _adapters())
def test_both_adapters_judge_with_sglangs_rules(engine: Any) -> None:
    for config, *_ in (p.values for p in RULES):
        assert engine.check_rules(config) == check_rules(config)
    assert engine.draft_token_bounds(3, 1) == (4, 4)
    assert engine.draft_token_bounds(2, 4) == (2, 9)
    assert type(engine).owned_flag("--port=1") == ("--port", "engine.port")
    assert type(engine).owned_flag("--hos") == ("--host", "engine.host")
    assert type(engine).owned_flag("--log-level") is None


# --- automatic choice ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("architecture", "choice"),
    [("LlamaForCausalLM", (5, 4, 8)), ("Grok1ForCausalLM", (5, 4, 8)), ("Qwen3", (3, 1, 4))],
)
def test_the_automatic_choice_follows_the_targets_architecture(
    tmp_path: Any, architecture: str, choice: tuple[int, int, int]
) -> None:
    (tmp_path / "config.json").write_text(f'{{"architectures": ["{architecture}"]}}')
    engine = SGLangEngine(EngineSpec(kind="sglang", model_path=str(tmp_path)))
    assert engine.automatic_choice() == dict(zip(SPECULATIVE_NUMBERS, choice, strict=True))


def test_the_automatic_choice_of_an_unknown_target_is_sglangs_chain() -> None:
    engine = SGLangEngine(EngineSpec(kind="sglang", model_path="org/hub-id"))
    assert engine.automatic_choice() == {
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    }


def test_the_simulator_chooses_for_its_profiles_target() -> None:
    # the default profile's target is Kimi-K2.5 (DeepseekV3 architecture): SGLang's chain
    assert SimEngine(EngineSpec()).automatic_choice() == {
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    }


# --- incompatibilities by architecture ---------------------------------------------------
SM90 = Hardware(compute_capability=(9, 0))
SM120 = Hardware(compute_capability=(12, 0))


@pytest.mark.parametrize(
    ("hardware", "tp", "mode", "graphs", "category"),
    [
        (SM120, 8, "flashinfer_fusion", True, "unsupported_arch"),
        (SM90, 8, "flashinfer_fusion", True, None),
        (SM120, 8, "torch_symm_mem", True, "unsupported_arch"),
        (SM90, 4, "torch_symm_mem", True, None),
        (SM90, 2, "torch_symm_mem", True, "unsupported_arch"),
        (SM90, 8, "nccl_tree", True, "graph_capture_other"),
        (SM90, 8, "nccl_tree", False, None),
        (SM120, 1, "flashinfer_fusion", True, None),
        (Hardware(), 8, "flashinfer_fusion", True, None),
    ],
)
def test_known_incompatibilities(
    hardware: Hardware, tp: int, mode: str, graphs: bool, category: str | None
) -> None:
    config = ServerConfig(allreduce=mode, tp_size=tp, disable_cuda_graph=not graphs)
    verdict = incompatibility(config, hardware)
    assert (verdict.category if verdict else None) == category
    for engine in (SGLangEngine(EngineSpec(kind="sglang")), SimEngine(EngineSpec())):
        assert engine.incompatibility(config, hardware) == verdict


# --- what each adapter adds ----------------------------------------------------------------
def test_the_running_request_cap_note() -> None:
    from autotune._workload import WorkloadSpec

    engine = SGLangEngine(EngineSpec(kind="sglang"))
    spec3 = _spec(3, 1, 4)
    note = engine.workload_note(spec3, WorkloadSpec(concurrency=64))
    assert note is not None and "at most 48 requests" in note
    assert note.endswith("concurrency 64 needs max_running_requests=64")
    assert engine.workload_note(spec3, WorkloadSpec(concurrency=8)) is None
    capped = spec3.replace(max_running_requests=64)
    assert engine.workload_note(capped, WorkloadSpec(concurrency=64)) is None
    assert engine.workload_note(ServerConfig(), WorkloadSpec(concurrency=64)) is None


def test_a_real_sglang_needs_its_draft_model_the_simulator_does_not() -> None:
    bare = SGLangEngine(EngineSpec(kind="sglang"))
    assert bare.lacks_draft_model("EAGLE3") and bare.lacks_draft_model("STANDALONE")
    assert not bare.lacks_draft_model("NGRAM") and not bare.lacks_draft_model("none")
    assert not SGLangEngine(EngineSpec(kind="sglang", draft_model_path="/d")).lacks_draft_model(
        "EAGLE3"
    )
    assert not SimEngine(EngineSpec()).lacks_draft_model("EAGLE3")


def test_releases_and_summaries_of_the_engine_section() -> None:
    sglang = EngineSpec(kind="sglang")
    pinned = SGLangEngine.with_release(sglang, "0.5.3")
    assert pinned is not None and pinned.sglang_version == "0.5.3"
    assert SimEngine.with_release(EngineSpec(), "0.5.3") is None
    assert SGLangEngine.spec_note(sglang) is None
    assert SGLangEngine.spec_note(pinned) == "SGLang 0.5.3 flags"
    assert (
        SimEngine.spec_note(EngineSpec()) == "profile rtxpro6000x8-kimi-k2.5, SGLang 0.5.23 flags"
    )
    assert SGLangEngine.default_model_path is None
    assert SimEngine.default_model_path == EngineSpec.model_path


def test_the_reference_command_is_the_simulators_sglang_command() -> None:
    config = _spec(3, 1, 4)
    sim = create_engine(EngineSpec(kind="sim", tp_size=8))
    command = sim.reference_command(config, port=30000)
    assert command is not None and command.startswith("python3 -m sglang.launch_server ")
    assert "--speculative-num-steps 3" in command and "--sim-" not in command
    assert create_engine(EngineSpec(kind="sglang")).reference_command(config, port=1) is None


def test_the_memory_need_shares_the_weights_over_the_ranks() -> None:
    engine = SGLangEngine(EngineSpec(kind="sglang", sglang_version="0.5.23"))
    config = _spec(3, 1, 4, tp_size=4)
    assert engine.memory_need_gib(config, weights=(400.0, 8.0)) == pytest.approx(102.0)
    # before 0.5.14 the draft's weights are loaded outside the static pool
    old = SGLangEngine(EngineSpec(kind="sglang", sglang_version="0.5.13"))
    assert old.memory_need_gib(config, weights=(400.0, 8.0)) == pytest.approx(100.0)
    assert engine.memory_need_gib(ServerConfig(tp_size=4), weights=(400.0, 8.0)) == 100.0
    assert engine.memory_need_gib(config, weights=(None, 8.0)) is None
    assert engine.memory_need_gib(config) is None  # a hub id: sizes unknown


def test_ngram_has_no_draft_tree_but_its_breadth_meets_the_page_rule() -> None:
    ngram = ServerConfig(
        speculative_algorithm="NGRAM",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=12,  # no tree: steps + 1 does not bind the n-gram drafts
    )
    assert check_rules(ngram) is None
    paged = ngram.replace(speculative_eagle_topk=4, page_size=16, attention_backend="fa3")
    refused = check_rules(paged)
    assert refused is not None and refused.category == "bad_args"
    assert "needs flashinfer" in refused.reason and "attention_backend=fa3" in refused.reason
    assert check_rules(paged.replace(attention_backend="flashinfer")) is None
    # unset, NGRAM's top-k is SGLang's breadth of 10
    unset = ServerConfig(speculative_algorithm="NGRAM", page_size=16, attention_backend="triton")
    refused = check_rules(unset)
    assert refused is not None and "speculative_eagle_topk=10" in refused.reason


ADAPTIVE = ServerConfig(
    speculative_algorithm="EAGLE3",
    speculative_num_steps=3,
    speculative_eagle_topk=1,
    speculative_num_draft_tokens=4,
    speculative_adaptive=True,
)


@pytest.mark.parametrize(
    ("config", "category", "knob", "words"),
    [
        (ADAPTIVE.replace(speculative_algorithm="NGRAM"), "infeasible", "speculative_adaptive",
         "falls back to static speculation with NGRAM"),
        (ADAPTIVE.replace(speculative_algorithm="STANDALONE"), "infeasible",
         "speculative_adaptive", "EAGLE and EAGLE3 only"),
        (ADAPTIVE.replace(speculative_eagle_topk=2, speculative_num_draft_tokens=4), "infeasible",
         "speculative_eagle_topk", "top-k 1 only"),
        (ADAPTIVE.replace(speculative_num_steps=4, speculative_num_draft_tokens=5), "bad_args",
         "speculative_num_steps", "candidate steps [0, 1, 3, 5, 7]"),
        (ServerConfig(speculative_adaptive=True), "infeasible", "speculative_adaptive",
         "without a speculative algorithm"),
        (ADAPTIVE.replace(speculative_adaptive=None, spec_v2=True, speculative_eagle_topk=4,
                          speculative_num_draft_tokens=8), "bad_args", "speculative_eagle_topk",
         "spec v2 runs top-k 1 only"),
        (ServerConfig(speculative_algorithm="NGRAM", spec_v2=True), "infeasible", "spec_v2",
         "ignores spec_v2=True with NGRAM"),
        (ServerConfig(spec_v2=True), "infeasible", "spec_v2", "without a speculative algorithm"),
    ],
)  # fmt: skip
def test_adaptive_speculation_and_spec_v2_run_eagle_chains_only(
    config: ServerConfig, category: str, knob: str, words: str
) -> None:
    refused = check_rules(config)
    assert refused is not None
    assert (refused.category, refused.knob) == (category, knob)
    assert words in refused.reason


def test_adaptive_chains_and_spec_v2_chains_run_as_given() -> None:
    assert check_rules(ADAPTIVE) is None
    assert check_rules(ADAPTIVE.replace(speculative_algorithm="EAGLE")) is None

    assert (
        check_rules(ServerConfig(speculative_algorithm="EAGLE3", speculative_adaptive=True)) is None
    )
    assert check_rules(ADAPTIVE.replace(speculative_adaptive=False, spec_v2=True)) is None
    assert check_rules(ServerConfig(speculative_algorithm="NGRAM", spec_v2=False)) is None
    # a launch naming its own --speculative-adaptive-config: its candidate steps are its own
    four = ADAPTIVE.replace(speculative_num_steps=4, speculative_num_draft_tokens=5)
    assert check_rules(four, own_adaptive_config=True) is None
    own = SGLangEngine(
        EngineSpec(kind="sglang", extra_args=("--speculative-adaptive-config=a.json",))
    )
    assert own.check_rules(four) is None
    assert SGLangEngine(EngineSpec(kind="sglang")).check_rules(four) is not None


@pytest.mark.parametrize(
    ("memory_gib", "tp", "max_bs", "chunk"),
    [
        (23.99, 1, 16, 2048),
        (44.52, 1, 256, 4096),
        (44.52, 4, 512, 4096),
        (79.65, 2, 256, 8192),
        (140.4, 8, 512, 8192),
    ],
)
def test_sglangs_own_graph_batch_and_chunk_follow_gpu_memory_and_ranks(
    memory_gib: float, tp: int, max_bs: int, chunk: int
) -> None:
    for kind in ("sglang", "sim"):
        engine = create_engine(EngineSpec(kind=kind, check_paths=False))
        chosen = engine.server_defaults(Hardware(memory_gib=memory_gib), tp)
        assert chosen == {"cuda_graph_max_bs": max_bs, "chunked_prefill_size": chunk}


def test_defaults_are_unknown_without_the_gpus_memory() -> None:
    engine = create_engine(EngineSpec(kind="sglang", check_paths=False))
    assert engine.server_defaults(Hardware(), 1) == {}


def test_under_speculation_sglang_caps_running_requests_by_itself() -> None:
    engine = create_engine(EngineSpec(kind="sglang", check_paths=False))
    assert engine.server_defaults(Hardware(), 1, speculative=True) == {"max_running_requests": 48}
    assert "max_running_requests" not in engine.server_defaults(Hardware(memory_gib=80.0), 1)
