"""The twin against the simulator it models: its prior, its crash arithmetic, its fitting."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune._errors import ConfigError
from autotune.engines import create_engine
from autotune.sim import SimModel, load_profile
from autotune.space import load_space
from autotune.twin import BoxFacts, Twin, truth_values

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "search_spaces" / "eagle3-h100.yaml"
H100X8 = ROOT / "search_spaces" / "eagle3-h100x8-70b.yaml"
KIMI = ROOT / "search_spaces" / "eagle3.yaml"


@dataclass
class Record:
    """A trial as the study records it (the fields the twin reads)."""

    outcome: str
    metrics: dict[str, float | None]
    loads: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    startup_s: float | None = None


def trial(model: SimModel, space: Any, config: Any, rng: random.Random) -> Record:
    """What a start of ``config`` on the simulated server records: outcome, a noisy throughput,
    the accept length, the memory lines as the engine reads them from the start's log."""
    verdict = model.evaluate(config, space.workload)
    plan = model.plan_startup(config)
    lines = [line for phase in plan.phases for line in phase.lines]
    reading = create_engine(space.engine).read_memory(lines, config)
    rate = verdict.output_tok_s
    return Record(
        outcome=verdict.status,
        metrics={
            "output_tok_s": None if rate is None else rate * rng.gauss(1.0, 0.02),
            "accept_length": verdict.accept_length,
        },
        extra={"memory": reading.to_dict()} if reading is not None else {},
        startup_s=verdict.startup_s,
    )


def test_facts_hold_nothing_the_simulator_fitted() -> None:
    truth = load_profile("h100-llama-3.1-8b")
    hw = dataclasses.replace(truth.hardware, mem_efficiency=0.31, compute_efficiency=0.22)
    rt = dataclasses.replace(truth.runtime, step_overhead_ms=9.0, activation_gib=7.0)
    other = dataclasses.replace(truth, hardware=hw, runtime=rt)
    assert BoxFacts.from_profile(other) == BoxFacts.from_profile(truth)
    facts = BoxFacts.from_profile(truth)
    assert facts.gpu_name == "NVIDIA H100 80GB HBM3" and facts.layers == 32


@pytest.mark.parametrize("space_file", [H100, H100X8, KIMI])
def test_the_prior_is_a_profile_the_simulator_loads(space_file: Path, tmp_path: Path) -> None:
    space = load_space(space_file)
    twin = Twin.prior(BoxFacts.from_profile(load_profile(space.engine.sim.profile)), space)
    path = tmp_path / "prior.yaml"
    path.write_text(twin.to_yaml(), encoding="utf-8")
    loaded = load_profile(path)
    assert loaded.hardware.gpu_count == twin.profile().hardware.gpu_count
    assert loaded.model.weights_gib == pytest.approx(twin.profile().model.weights_gib)
    config = space.config_for(space.sample(1, seed=3)[0])
    assert SimModel(loaded).evaluate(config, space.workload).status == (
        SimModel(twin.profile()).evaluate(config, space.workload).status
    )


def test_errors_move_the_named_coefficients_of_the_prior_centre() -> None:
    space = load_space(H100X8)
    facts = BoxFacts.from_profile(load_profile(space.engine.sim.profile))
    plain = Twin.prior(facts, space).layout
    off = Twin.prior(facts, space, errors={"bandwidth": 0.85, "allreduce": 1.5}).layout
    centre, moved = plain.centre(), off.centre()
    assert moved["mem_efficiency"] == pytest.approx(centre["mem_efficiency"] * 0.85)
    assert moved["ar_alpha"] == pytest.approx(centre["ar_alpha"] * 1.5)
    assert moved["ar_alpha:nccl"] == centre["ar_alpha:nccl"]
    assert moved["acc_p1"] == centre["acc_p1"]
    with pytest.raises(ConfigError, match="names no coefficient"):
        Twin.prior(facts, space, errors={"bandwith": 0.8})


def test_an_unknown_gpu_is_named() -> None:
    space = load_space(H100)
    facts = dataclasses.replace(
        BoxFacts.from_profile(load_profile("h100-llama-3.1-8b")), gpu_name="Voodoo 5"
    )
    with pytest.raises(ConfigError, match="no GPU named 'Voodoo 5'"):
        Twin.prior(facts, space)


@pytest.mark.parametrize("space_file", [H100X8, KIMI])
def test_every_particle_crashes_where_its_own_profile_crashes(space_file: Path) -> None:
    """The twin's vectorised start-up arithmetic is the simulator's: each particle's crash (or
    start) is what the simulator says for that particle's profile."""
    space = load_space(space_file)
    twin = Twin.prior(BoxFacts.from_profile(load_profile(space.engine.sim.profile)), space)
    configs = [space.config_for(p) for p in space.sample(40, seed=11)]
    configs.append(space.baseline_config())
    prediction = twin.predict(configs)
    names = twin.layout.names
    checked = 0
    for i in range(0, len(twin.z), 8):
        values = {n: twin.layout.coefficients[k].from_z(twin.z[i, k]) for k, n in enumerate(names)}
        model = SimModel(twin.layout.profile(values))
        for j, config in enumerate(configs):
            crashed = model.plan_startup(config).crash is not None
            assert np.isnan(prediction.samples[i, j]) == crashed, (i, config)
            checked += 1
    assert checked == 8 * len(configs)
    assert any(p > 0 for p in prediction.crash_probability)
    for p, reason in zip(prediction.crash_probability, prediction.crash_reason, strict=True):
        assert (reason is None) == (p == 0)


def test_a_predicted_kv_pool_crash_shows_its_arithmetic() -> None:
    space = load_space(KIMI)
    twin = Twin.prior(BoxFacts.from_profile(load_profile(space.engine.sim.profile)), space)
    config = space.config_for(
        {**space.sample(1, seed=1)[0], "mem_fraction_static": 0.70, "cuda_graph_max_bs": 16}
    )
    prediction = twin.predict([config])
    assert prediction.crash_probability[0] == 1.0
    reason = prediction.crash_reason[0]
    assert reason is not None and reason.startswith("oom_kv_pool: KV pool: 0.70 x 95.6 GiB")
    assert "GiB weights" in reason and "holds no KV token" in reason


def test_memory_lines_pin_the_memory_coefficients() -> None:
    space = load_space(KIMI)
    truth = load_profile(space.engine.sim.profile)
    model = SimModel(truth)
    twin = Twin.prior(BoxFacts.from_profile(truth), space)
    config = space.config_for(
        {**space.sample(1, seed=1)[0], "mem_fraction_static": 0.92, "cuda_graph_max_bs": 64}
    )
    config = config.replace(allreduce="nccl")
    record = trial(model, space, config, random.Random(0))
    assert record.outcome == "ok" and record.extra["memory"]["graph_gib"] is not None
    before = twin.centre_values()
    twin.observe(config, record)
    after, true = twin.centre_values(), truth_values(twin, truth)
    for name in ("replicated_gib", "draft_weights_gib", "context_gib"):
        assert abs(before[name] - true[name]) > 0.05
        assert after[name] == pytest.approx(true[name], abs=0.015), name
    assert after["draft_kv_bytes"] == pytest.approx(true["draft_kv_bytes"], rel=0.02)
    # one graph line: the pool at this capture, not yet its two parts
    tokens = 64 * (config.speculative_num_draft_tokens + config.speculative_eagle_topk)
    graph = after["graph_base_gib"] + after["graph_gib_per_token"] * tokens
    assert graph == pytest.approx(record.extra["memory"]["graph_gib"], abs=0.02)


def test_the_draft_step_follows_the_draft_weights_its_memory_line_pins() -> None:
    """Llama-3.1-70B at TP 8: the prior guesses the draft head's weights per GPU from its size
    (twice the truth: it cannot know what is sharded), and the weights one draft forward reads
    as a share of them; once a start's memory line gives the weights, the draft step keeps that
    share of the measured weights, before any throughput is seen."""
    space = load_space(H100X8)
    truth = load_profile(space.engine.sim.profile)
    model = SimModel(truth)
    twin = Twin.prior(BoxFacts.from_profile(truth), space)
    config = space.config_for({**space.sample(1, seed=3)[0], "mem_fraction_static": 0.85})
    config = config.replace(allreduce="nccl")
    record = trial(model, space, config, random.Random(0))
    assert record.outcome == "ok"
    record.metrics["output_tok_s"] = None  # the memory lines alone
    before = twin.centre_values()
    twin.observe(config, record)
    after, true = twin.centre_values(), truth_values(twin, truth)
    assert after["draft_weights_gib"] == pytest.approx(true["draft_weights_gib"], abs=0.015)
    assert after["draft_weights_gib"] < 0.6 * before["draft_weights_gib"]
    share = before["draft_step_gib"] / before["draft_weights_gib"]
    assert after["draft_step_gib"] / after["draft_weights_gib"] == pytest.approx(share, rel=0.03)
    step_error = abs(after["draft_step_gib"] - true["draft_step_gib"])
    assert step_error < 0.25 * abs(before["draft_step_gib"] - true["draft_step_gib"])


def test_accept_lengths_pin_the_draft_acceptance() -> None:
    space = load_space(H100)
    truth = load_profile(space.engine.sim.profile)
    model = SimModel(truth)
    twin = Twin.prior(BoxFacts.from_profile(truth), space, errors={"acceptance": 0.8})
    rng = random.Random(1)
    seen = [space.config_for(p) for p in space.sample(8, seed=4)]
    twin.observe_many([(c, trial(model, space, c, rng)) for c in seen])
    for params in space.sample(10, seed=9):
        config = model.resolve(space.config_for(params))
        true = model.acceptance(config).tree(  # type: ignore[union-attr]
            config.speculative_num_steps or 1,
            config.speculative_eagle_topk or 1,
            config.speculative_num_draft_tokens or 2,
        )
        fitted = (
            SimModel(twin.profile())
            .acceptance(config)
            .tree(  # type: ignore[union-attr]
                config.speculative_num_steps or 1,
                config.speculative_eagle_topk or 1,
                config.speculative_num_draft_tokens or 2,
            )
        )
        assert fitted.expected_accept_length == pytest.approx(true.expected_accept_length, rel=0.03)


def test_a_crash_of_an_allreduce_mode_is_learned() -> None:
    space = load_space(KIMI)
    truth = load_profile(space.engine.sim.profile)
    model = SimModel(truth)
    facts = dataclasses.replace(BoxFacts.from_profile(truth), compute_capability=(9, 0))
    twin = Twin.prior(facts, space)  # believes torch symmetric memory runs here
    config = space.config_for(
        {**space.sample(1, seed=1)[0], "mem_fraction_static": 0.92, "cuda_graph_max_bs": 64}
    ).replace(allreduce="torch_symm_mem")
    assert twin.predict([config]).crash_probability[0] < 0.5
    record = trial(model, space, config, random.Random(0))
    assert record.outcome == "unsupported_arch"
    twin.observe(config, record)
    other = config.replace(cuda_graph_max_bs=32)
    prediction = twin.predict([other])
    assert prediction.crash_probability[0] == 1.0
    assert "unsupported_arch" in (prediction.crash_reason[0] or "")


def test_throughput_fit_predicts_unseen_configurations() -> None:
    space = load_space(H100)
    truth = load_profile(space.engine.sim.profile)
    model = SimModel(truth)
    facts = BoxFacts.from_profile(truth)
    twin = Twin.prior(facts, space, errors={"bandwidth": 0.85, "acceptance": 0.9})
    rng = random.Random(2)
    seen = [space.baseline_config()] + [space.config_for(p) for p in space.sample(20, seed=6)]
    twin.observe_many([(c, trial(model, space, c, rng)) for c in seen])
    fitted = SimModel(twin.profile())
    unseen = [space.config_for(p) for p in space.sample(30, seed=77)]
    errors = []
    for config in unseen:
        true = model.evaluate(config, space.workload)
        if true.status != "ok":
            continue
        guess = fitted.evaluate(config, space.workload)
        assert guess.status == "ok"
        errors.append(abs(guess.output_tok_s / true.output_tok_s - 1))  # type: ignore[operator]
    assert len(errors) >= 10
    assert max(errors) < 0.05
    prediction = twin.predict(unseen)
    ok = ~np.isnan(prediction.mean())
    assert ok.sum() >= 10 and np.all(prediction.std()[ok] < 0.1 * prediction.mean()[ok])


def test_crashes_bound_the_activation_workspace_no_line_prints() -> None:
    # which starts captured their graphs and which crashed for graph memory bound the
    # activation workspace; the fit's point estimate must honour those bounds (one that
    # contradicted a start it saw would be replaced by a particle far from the fit)
    space = load_space(KIMI)
    truth = load_profile(space.engine.sim.profile)
    model = SimModel(truth)
    twin = Twin.prior(BoxFacts.from_profile(truth), space, errors={"bandwidth": 0.85})
    small = twin.centre_values()["activation_gib"]
    assert small < truth.runtime.activation_gib - 0.3
    # the crashes only a workspace larger than the prior's explains
    smaller = SimModel(dataclasses.replace(truth, runtime=dataclasses.replace(
        truth.runtime, activation_gib=small)))  # fmt: skip

    def smaller_starts(config: Any) -> bool:
        return smaller.evaluate(config, space.workload).status == "ok"

    rng = random.Random(3)
    records = [(space.baseline_config(), trial(model, space, space.baseline_config(), rng))]
    telling = 0
    for params in space.sample(3000, seed=3):
        config = space.config_for(params)
        status = model.evaluate(config, space.workload).status
        if status == "ok" and sum(r.outcome == "ok" for _, r in records) < 20:
            records.append((config, trial(model, space, config, rng)))
        elif status == "oom_cuda_graph" and telling < 3 and smaller_starts(config):
            records.append((config, trial(model, space, config, rng)))
            telling += 1
    assert telling == 3
    twin.observe_many(records)
    fitted = SimModel(twin.profile())
    for config, record in records:
        assert fitted.evaluate(config, space.workload).status == record.outcome, config
    after = twin.centre_values()
    assert after["activation_gib"] > small
    misfit: dict[str, list[float]] = {"twin": [], "truth": []}
    for config, record in records:
        if record.outcome == "ok":
            measured = record.metrics["output_tok_s"]
            guess = fitted.evaluate(config, space.workload).output_tok_s
            true = model.evaluate(config, space.workload).output_tok_s
            assert measured is not None and guess is not None and true is not None
            misfit["twin"].append(np.log(measured / guess))
            misfit["truth"].append(np.log(measured / true))
    # the throughput fit's own answer is kept: it explains what it saw as well as the truth
    rms = {k: float(np.sqrt(np.mean(np.square(v)))) for k, v in misfit.items()}
    assert rms["twin"] < 1.33 * rms["truth"], rms  # (a particle far from the fit: 1.41)


def test_a_load_mix_is_predicted_at_each_point_and_weighted() -> None:
    """Over a load mix the twin gives every particle's figure at each load point alone, and
    the objective is their weighted sum; at each particle, a configuration that starts serves
    more tokens per second at 16 concurrent requests than at 1, and (the particles' median) more
    at 64 than at 16."""
    space = load_space(ROOT / "search_spaces" / "eagle3-h100-mix.yaml")
    twin = Twin.prior(BoxFacts.from_profile(load_profile(space.engine.sim.profile)), space)
    configs = [space.config_for(p) for p in space.sample(12, seed=3)]
    configs.append(space.baseline_config())
    prediction = twin.predict(configs)
    assert prediction.points is not None
    assert prediction.points.shape == (3, len(twin.z), len(configs))
    started = ~np.isnan(prediction.samples)
    assert started.any(axis=0).sum() >= 6
    weights = np.array([p.weight for p in space.objective.loads])
    weighted = np.einsum("k,kij->ij", weights, prediction.points)
    np.testing.assert_allclose(weighted[started], prediction.samples[started])
    c1, c16, c64 = (prediction.at_point(k).samples for k in range(3))
    assert (c1[started] < c16[started]).all()
    columns = started.all(axis=0)
    assert (np.median(c16[:, columns], axis=0) < np.median(c64[:, columns], axis=0)).all()
    assert np.isnan(c1[~started]).all()


def test_beyond_names_what_no_started_trial_measured() -> None:
    """A configuration is beyond the study where its top-k or all-reduce mode was never started,
    or its steps or draft tokens lie outside the started range; a crashed start covers nothing,
    and the graph batch and memory share (crash edges only) never count."""
    space = load_space(KIMI)
    truth = load_profile(space.engine.sim.profile)
    model = SimModel(truth)
    twin = Twin.prior(BoxFacts.from_profile(truth), space)
    base = {
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 2,
        "speculative_num_draft_tokens": 6,
        "cuda_graph_max_bs": 64,
        "mem_fraction_static": 0.85,
        "allreduce": "nccl",
    }
    short = {"speculative_num_steps": 2, "speculative_eagle_topk": 1}
    chain = space.config_for({**base, **short, "speculative_num_draft_tokens": 3})
    tree = space.config_for(base)
    crashed = space.config_for({**base, "speculative_eagle_topk": 8, "allreduce": "torch_symm_mem"})
    rng = random.Random(0)
    records = [(c, trial(model, space, c, rng)) for c in (chain, tree, crashed)]
    assert [r.outcome for _, r in records] == ["ok", "ok", "unsupported_arch"]
    twin.observe_many(records)
    inside = space.config_for({**base, "cuda_graph_max_bs": 512, "mem_fraction_static": 0.7})
    assert twin.beyond(inside) == []
    assert twin.beyond(space.config_for({**base, "speculative_num_draft_tokens": 3})) == []
    wide = {"speculative_num_steps": 6, "speculative_eagle_topk": 8}
    far = space.config_for(
        {**base, **wide, "speculative_num_draft_tokens": 12, "allreduce": "torch_symm_mem"}
    )
    assert twin.beyond(far) == [
        "steps 6 > 3",
        "top-k 8",
        "draft tokens 12 > 6",
        "all-reduce torch_symm_mem",
    ]
    low = space.config_for({**base, "speculative_num_steps": 1, "speculative_num_draft_tokens": 2})
    assert twin.beyond(low) == ["steps 1 < 2", "draft tokens 2 < 3"]
