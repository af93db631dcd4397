"""The simulator's model against the calibration targets (shared/facts/calibration.md).

Every figure here goes through ``SimModel.evaluate``, the function ``autotune sim eval`` prints;
the same targets are checked through the HTTP server in ``test_calibration_http.py``.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from autotune._knobs import ServerConfig
from autotune.sim._model import SimModel
from autotune.sim._profile import load_profile

SEED = "rtxpro6000x8-kimi-k2.5"
H100 = "h100-llama-3.1-8b"
NCCL = {"tp_size": 8, "allreduce": "nccl"}
SEED_EAGLE = {
    **NCCL,
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 2,
    "speculative_eagle_topk": 4,
    "speculative_num_draft_tokens": 4,
    "cuda_graph_max_bs": 128,
}


@pytest.fixture(scope="module")
def seed() -> SimModel:
    return SimModel(load_profile(SEED))


@pytest.fixture(scope="module")
def h100() -> SimModel:
    return SimModel(load_profile(H100))


def tok_s(model: SimModel, workload: str | None = None, **params: Any) -> float:
    verdict = model.evaluate(ServerConfig.from_params(params), model.profile.workload(workload))
    assert verdict.status == "ok", (params, verdict.failure_line)
    assert verdict.output_tok_s is not None
    return verdict.output_tok_s


# --- 1-5: the seed system ------------------------------------------------------------------
def test_smaller_graph_pool_gives_more_kv_and_about_9_percent(seed: SimModel) -> None:
    b512 = seed.evaluate(ServerConfig.from_params({**NCCL, "cuda_graph_max_bs": 512}))
    b128 = seed.evaluate(ServerConfig.from_params({**NCCL, "cuda_graph_max_bs": 128}))
    assert b512.output_tok_s and b128.output_tok_s
    assert b128.kv_tokens and b512.kv_tokens and b128.kv_tokens > b512.kv_tokens
    assert b128.mean_running and b512.mean_running and b128.mean_running > b512.mean_running
    assert b128.output_tok_s / b512.output_tok_s == pytest.approx(1.09, abs=0.03)


def test_custom_allreduce_over_pcie_is_less_than_half_of_nccl(seed: SimModel) -> None:
    nccl = tok_s(seed, **NCCL, cuda_graph_max_bs=512)
    custom = tok_s(seed, tp_size=8, allreduce="custom", cuda_graph_max_bs=512)
    assert custom / nccl == pytest.approx(0.46, abs=0.04)


def test_hand_tuned_eagle3_is_below_the_baseline(seed: SimModel) -> None:
    baseline = tok_s(seed, **NCCL, cuda_graph_max_bs=128)
    eagle = tok_s(seed, **SEED_EAGLE, mem_fraction_static=0.88)
    assert eagle / baseline < 1.0


def test_auto_fraction_kills_eagle3_in_the_kv_pool_and_088_starts(seed: SimModel) -> None:
    auto = seed.evaluate(ServerConfig.from_params(SEED_EAGLE))
    assert auto.status == "oom_kv_pool"
    assert auto.failure_line is not None
    assert "Not enough memory. Please try to increase --mem-fraction-static" in auto.failure_line
    assert "mem_fraction_static=0.76" in auto.failure_line
    started = seed.evaluate(ServerConfig.from_params({**SEED_EAGLE, "mem_fraction_static": 0.88}))
    assert started.status == "ok"


@pytest.mark.parametrize(
    ("mode", "status"),
    [("flashinfer_fusion", "graph_capture_other"), ("torch_symm_mem", "unsupported_arch")],
)
def test_allreduce_modes_sm120_lacks_fail_at_startup(
    seed: SimModel, mode: str, status: str
) -> None:
    for params in (
        {**NCCL, "allreduce": mode},
        {**SEED_EAGLE, "mem_fraction_static": 0.88, "allreduce": mode},
    ):
        verdict = seed.evaluate(ServerConfig.from_params(params))
        assert verdict.status == status
        assert verdict.startup_s < seed.plan_startup(ServerConfig.from_params(NCCL)).duration_s


def test_nccl_tree_fails_with_cuda_graphs_and_runs_slowly_without(seed: SimModel) -> None:
    with_graphs = seed.evaluate(ServerConfig.from_params({**NCCL, "allreduce": "nccl_tree"}))
    assert with_graphs.status == "graph_capture_other"
    eager = tok_s(seed, tp_size=8, allreduce="nccl_tree", disable_cuda_graph=True)
    assert eager < tok_s(seed, **NCCL)


def test_seed_startup_takes_twelve_to_thirteen_minutes(seed: SimModel) -> None:
    plan = seed.plan_startup(ServerConfig.from_params(NCCL))
    assert plan.ok
    load = next(p for p in plan.phases if p.name == "load_weights")
    assert load.duration_s == pytest.approx(584, abs=1)
    assert 12 * 60 <= plan.duration_s <= 13 * 60


# --- 6-7: the H100 profile and the erosion of gains --------------------------------------
def best_over(model: SimModel, algorithm: str, workload: str | None = None) -> tuple[float, Any]:
    best: tuple[float, Any] = (0.0, None)
    for steps, topk in itertools.product(range(1, 8), (1, 2, 4, 8, 10)):
        for draft in (steps + 1, 8, 16, 24, 32, 40, 48, 64):
            if (topk == 1 and draft != steps + 1) or steps * topk + 1 < draft:
                continue
            value = tok_s(
                model,
                workload,
                speculative_algorithm=algorithm,
                speculative_num_steps=steps,
                speculative_eagle_topk=topk,
                speculative_num_draft_tokens=draft,
            )
            best = max(best, (value, (steps, topk, draft)))
    return best


def test_h100_baseline_and_best_eagle3_and_eagle2(h100: SimModel) -> None:
    baseline = tok_s(h100)
    assert baseline == pytest.approx(158.34, rel=0.02)
    eagle3, cfg3 = best_over(h100, "EAGLE3")
    eagle2, _ = best_over(h100, "EAGLE")
    assert eagle3 / baseline == pytest.approx(373.25 / 158.34, abs=0.1)
    assert eagle2 / baseline == pytest.approx(244.10 / 158.34, abs=0.08)
    assert cfg3[1] > 1  # a tree, not a chain, wins at batch 1


def test_gains_shrink_with_concurrency(h100: SimModel) -> None:
    spec = {
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 5,
        "speculative_eagle_topk": 8,
        "speculative_num_draft_tokens": 32,
    }
    gains = [
        tok_s(h100, wl, **spec) / tok_s(h100, wl) for wl in ("mt-bench", "chat-c16", "chat-c64")
    ]
    assert gains[0] > gains[1] > gains[2]
    assert gains[2] < 1.0  # a big tree loses at high concurrency


@pytest.fixture(scope="module")
def h100x8(tmp_path_factory: pytest.TempPathFactory) -> SimModel:
    """The H100 profile on an 8-GPU NVLink box (a user's profile file)."""
    import yaml

    from autotune.sim._profile import PROFILE_DIR

    data = yaml.safe_load((PROFILE_DIR / f"{H100}.yaml").read_text())
    data["name"] = "h100x8-llama-3.1-8b"
    data["hardware"]["gpu_count"] = 8
    path = tmp_path_factory.mktemp("profiles") / "h100x8.yaml"
    path.write_text(yaml.safe_dump(data))
    return SimModel(load_profile(path))


def test_more_ranks_than_gpus_fails_like_sglang(h100: SimModel) -> None:
    verdict = h100.evaluate(ServerConfig.from_params({"tp_size": 2}))
    assert verdict.status == "other_crash"
    assert verdict.failure_line is not None and "invalid device ordinal" in verdict.failure_line


def test_gains_shrink_with_tensor_parallelism(h100x8: SimModel) -> None:
    h100 = h100x8
    spec = {
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 5,
        "speculative_eagle_topk": 8,
        "speculative_num_draft_tokens": 32,
        "allreduce": "nccl",
    }
    gains = [
        tok_s(h100, tp_size=tp, **spec) / tok_s(h100, tp_size=tp, allreduce="nccl")
        for tp in (1, 2, 4)
    ]
    assert gains[0] > gains[1] > gains[2]


def test_gains_shrink_when_the_allreduce_gets_slower(seed: SimModel) -> None:
    for steps, topk, draft in ((2, 1, 3), (2, 4, 4), (3, 4, 8)):
        gains = {}
        for mode in ("nccl", "custom"):  # custom all-reduce is the slower one over PCIe
            base = {"tp_size": 8, "allreduce": mode, "cuda_graph_max_bs": 128}
            spec = {
                **base,
                "speculative_algorithm": "EAGLE3",
                "speculative_num_steps": steps,
                "speculative_eagle_topk": topk,
                "speculative_num_draft_tokens": draft,
            }
            gains[mode] = tok_s(seed, **spec, mem_fraction_static=0.88) / tok_s(
                seed, **base, mem_fraction_static=0.88
            )
        assert gains["custom"] < gains["nccl"]


# --- 8: the landscape --------------------------------------------------------------------
SEED_GRID = {
    "speculative_num_steps": [1, 2, 3, 4, 6],
    "speculative_eagle_topk": [1, 2, 4, 8],
    "speculative_num_draft_tokens": [2, 3, 4, 6, 8, 16],
    "cuda_graph_max_bs": [16, 128, 512],
    "mem_fraction_static": [0.70, 0.76, 0.80, 0.86, 0.90, 0.94],
}


def landscape(model: SimModel, grid: dict[str, list[Any]], fixed: dict[str, Any]) -> list[Any]:
    rows = []
    names = list(grid)
    for combo in itertools.product(*grid.values()):
        params = dict(zip(names, combo, strict=True))
        if params["speculative_eagle_topk"] == 1 and (
            params["speculative_num_draft_tokens"] != params["speculative_num_steps"] + 1
        ):
            continue
        if (
            params["speculative_num_steps"] * params["speculative_eagle_topk"] + 1
            < params["speculative_num_draft_tokens"]
        ):
            continue
        verdict = model.evaluate(
            ServerConfig.from_params({**fixed, **params, "speculative_algorithm": "EAGLE3"})
        )
        rows.append((params, verdict))
    return rows


def test_seed_landscape_has_an_interior_optimum_and_crashes_both_ways(seed: SimModel) -> None:
    rows = landscape(seed, SEED_GRID, NCCL)
    statuses = {v.status for _, v in rows}
    assert {"ok", "oom_kv_pool", "oom_cuda_graph"} <= statuses
    kv = [p["mem_fraction_static"] for p, v in rows if v.status == "oom_kv_pool"]
    graph = [p["mem_fraction_static"] for p, v in rows if v.status == "oom_cuda_graph"]
    assert max(kv) < min(graph)  # too little for the pool below, too little for graphs above
    ok = [(v.output_tok_s, p) for p, v in rows if v.status == "ok"]
    best_value, best = max(ok, key=lambda r: r[0])
    assert 1 < best["speculative_num_steps"] < 6
    assert 2 < best["speculative_num_draft_tokens"] < 16
    # the optimum is a plateau inside the feasible fraction band, not the edge of the range
    near = {p["mem_fraction_static"] for v, p in ok if v >= 0.995 * best_value}
    assert any(0.70 < f < 0.94 for f in near)


def test_the_two_profiles_have_different_winners(seed: SimModel, h100: SimModel) -> None:
    seed_best = max(
        ((v.output_tok_s, p) for p, v in landscape(seed, SEED_GRID, NCCL) if v.status == "ok"),
        key=lambda r: r[0],
    )[1]
    h100_best = best_over(h100, "EAGLE3")[1]
    seed_key = (
        seed_best["speculative_num_steps"],
        seed_best["speculative_eagle_topk"],
        seed_best["speculative_num_draft_tokens"],
    )
    assert seed_key != h100_best
    assert seed_best["speculative_eagle_topk"] < h100_best[1]
