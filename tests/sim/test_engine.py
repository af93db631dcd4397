"""The serving engine and the acceptance model behind it."""

from __future__ import annotations

import random
import statistics

import pytest

from autotune._knobs import ServerConfig
from autotune.sim._acceptance import AcceptanceModel
from autotune.sim._model import SimModel
from autotune.sim._profile import Acceptance, load_profile
from autotune.sim._types import SimRequest

EAGLE = {
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 4,
    "speculative_eagle_topk": 4,
    "speculative_num_draft_tokens": 12,
}


@pytest.fixture(scope="module")
def h100() -> SimModel:
    return SimModel(load_profile("h100-llama-3.1-8b"))


@pytest.fixture(scope="module")
def seed() -> SimModel:
    return SimModel(load_profile("rtxpro6000x8-kimi-k2.5"))


def drain(engine, requests, max_cycles=1):  # type: ignore[no-untyped-def]
    for req in requests:
        engine.submit(req)
    clock = 0.0
    tokens: dict[str, int] = {}
    finished: dict[str, float] = {}
    peak_used = 0
    peak_running = 0
    while engine.has_work():
        result = engine.step(max_cycles=max_cycles)
        clock += result.duration_s
        peak_used = max(peak_used, engine.stats.used_tokens)
        peak_running = max(peak_running, result.running)
        for ev in result.events:
            tokens[ev.rid] = tokens.get(ev.rid, 0) + ev.new_tokens
            if ev.finished:
                finished[ev.rid] = clock
    return clock, tokens, finished, peak_used, peak_running


def test_every_request_gets_exactly_its_tokens(h100: SimModel) -> None:
    config = ServerConfig.from_params(EAGLE)
    engine = h100.new_engine(config, h100.plan_startup(config))
    reqs = [SimRequest(f"r{i}", 100 + i, 50 + 7 * i) for i in range(6)]
    _, tokens, finished, _, _ = drain(engine, reqs)
    assert tokens == {r.rid: r.max_new_tokens for r in reqs}
    assert set(finished) == {r.rid for r in reqs}


def test_jumping_many_cycles_matches_single_steps(h100: SimModel) -> None:
    config = ServerConfig.from_params(EAGLE)
    plan = h100.plan_startup(config)
    reqs = [SimRequest(f"r{i}", 200, 300 - 20 * i) for i in range(4)]
    single = drain(h100.new_engine(config, plan), reqs, max_cycles=1)
    jumped = drain(h100.new_engine(config, plan), reqs, max_cycles=10_000)
    # a jump grows the context by the expected tokens per cycle, single steps by the exact
    # integer tokens: the attention term differs in the last digits only
    assert jumped[0] == pytest.approx(single[0], rel=1e-5)
    assert jumped[1] == single[1]
    assert jumped[2] == pytest.approx(single[2], rel=1e-5)


def test_admission_never_overfills_the_kv_pool(seed: SimModel) -> None:
    config = ServerConfig.from_params({"tp_size": 8, "allreduce": "nccl"})
    plan = seed.plan_startup(config)
    assert plan.memory is not None
    engine = seed.new_engine(config, plan)
    prompt = plan.memory.kv_tokens // 3
    reqs = [SimRequest(f"r{i}", prompt, 64) for i in range(6)]
    _, tokens, _, peak_used, peak_running = drain(engine, reqs)
    assert peak_used <= plan.memory.kv_tokens
    assert peak_running == 2  # a third request would not fit next to its reserved outputs
    assert len(tokens) == 6


def test_max_running_requests_caps_the_batch(h100: SimModel) -> None:
    config = ServerConfig.from_params({**EAGLE, "max_running_requests": 3})
    engine = h100.new_engine(config, h100.plan_startup(config))
    *_, peak_running = drain(engine, [SimRequest(f"r{i}", 50, 40) for i in range(8)])
    assert peak_running == 3


def test_a_request_larger_than_the_pool_is_dropped_not_hung(seed: SimModel) -> None:
    config = ServerConfig.from_params({"tp_size": 8, "allreduce": "nccl"})
    plan = seed.plan_startup(config)
    assert plan.memory is not None
    engine = seed.new_engine(config, plan)
    assert not engine.fits(plan.memory.kv_tokens, 10)
    _, tokens, _, _, _ = drain(
        engine, [SimRequest("big", plan.memory.kv_tokens, 10), SimRequest("ok", 100, 10)]
    )
    assert tokens == {"ok": 10}


def test_noise_moves_step_times_but_not_their_mean(h100: SimModel) -> None:
    config = ServerConfig.from_params(EAGLE)
    plan = h100.plan_startup(config)
    reqs = [SimRequest(f"r{i}", 100, 400) for i in range(2)]
    quiet = drain(h100.new_engine(config, plan), reqs)[0]
    noisy = [drain(h100.new_engine(config, plan, noise=0.05, seed=s), reqs)[0] for s in range(8)]
    assert len({round(t, 9) for t in noisy}) > 1
    assert statistics.mean(noisy) == pytest.approx(quiet, rel=0.06)


def test_same_seed_same_run(h100: SimModel) -> None:
    config = ServerConfig.from_params(EAGLE)
    plan = h100.plan_startup(config)
    reqs = [SimRequest("a", 100, 200)]
    first = drain(h100.new_engine(config, plan, noise=0.05, seed=3), reqs)
    second = drain(h100.new_engine(config, plan, noise=0.05, seed=3), reqs)
    assert first[0] == second[0]


ACC = Acceptance(
    p1=0.7, decay=0.9, floor=0.2, rank_share=0.6, rank_ratio=0.5, temperature_penalty=0.2
)


def test_chain_acceptance_is_the_product_formula() -> None:
    model = AcceptanceModel.build(ACC, depth=3, temperature=0.0, scale=1.0)
    p = model.depth_p
    expected = 1 + p[0] + p[0] * p[1] + p[0] * p[1] * p[2]
    assert model.tree(3, 1, 4).expected_accept_length == pytest.approx(expected)


def test_more_budget_and_branches_never_lower_acceptance() -> None:
    model = AcceptanceModel.build(ACC, depth=5, temperature=0.0, scale=1.0)
    lengths = [model.tree(5, 4, n).expected_accept_length for n in (2, 4, 8, 16, 21)]
    assert lengths == sorted(lengths)
    assert model.tree(3, 4, 8).expected_accept_length > model.tree(3, 1, 4).expected_accept_length


def test_temperature_lowers_acceptance() -> None:
    cold = AcceptanceModel.build(ACC, depth=4, temperature=0.0, scale=1.0)
    hot = AcceptanceModel.build(ACC, depth=4, temperature=1.0, scale=1.0)
    assert hot.tree(4, 2, 8).expected_accept_length < cold.tree(4, 2, 8).expected_accept_length


def test_sampled_acceptance_averages_to_the_expected_value() -> None:
    model = AcceptanceModel.build(ACC, depth=4, temperature=0.0, scale=1.0)
    tree = model.tree(4, 4, 10)
    rng = random.Random(1)
    samples = [model.sample_accepted(tree, rng) for _ in range(20000)]
    assert 1 + statistics.mean(samples) == pytest.approx(tree.expected_accept_length, abs=0.03)


def test_fast_forwarded_cycles_give_the_accumulated_drafts_and_stop_at_the_budget() -> None:
    """Cycle ``j`` of a fast-forwarded decode step brings the request to ``j`` bonus tokens plus
    the drafts accepted so far (``floor(carry + j * rate)``), never past its ``gain``; the
    cycles after it reaches the budget give nothing."""
    import math

    from autotune.sim._engine import cycle_tokens

    rng = random.Random(5)
    for _ in range(3000):
        cycles, gain = rng.randint(2, 80), rng.randint(0, 300)
        carry, rate = rng.random(), rng.choice([0.0, rng.random() * 6])
        split = cycle_tokens(cycles, gain, carry, rate)
        assert len(split) == cycles and min(split) >= 0
        total = 0
        for j, tokens in enumerate(split, start=1):
            total += tokens
            assert total == min(gain, j + math.floor(carry + j * rate))
    assert cycle_tokens(4, 5, 0.5, 1.0) == (2, 2, 1, 0)
