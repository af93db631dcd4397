"""SGLang's own rules: each has a configuration it refuses and a neighbour it accepts."""

from __future__ import annotations

from typing import Any

import pytest

from autotune._knobs import ServerConfig
from autotune.space import check_rules


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
