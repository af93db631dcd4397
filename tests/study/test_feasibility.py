"""What the tuner knows before launch: rules, known incompatibilities, memory, lessons."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.engines import create_engine
from autotune.space import load_space
from autotune.study._feasibility import Feasibility, LessonKind
from autotune.study._record import Outcome

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "eagle3.yaml"


@pytest.fixture
def feasibility() -> Feasibility:
    space = load_space(SPACE)
    return Feasibility(space, create_engine(space.engine))


def params(**changes: Any) -> dict[str, Any]:
    base = {
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 3,
        "cuda_graph_max_bs": 128,
        "mem_fraction_static": 0.88,
        "allreduce": "nccl",
    }
    base.update(changes)
    return base


def check(f: Feasibility, p: dict[str, Any]) -> Any:
    return f.check(f.space.config_for(p), p)


def test_a_runnable_configuration_passes(feasibility: Feasibility) -> None:
    assert check(feasibility, params()) is None


def test_sglang_rules_come_first(feasibility: Feasibility) -> None:
    verdict = check(feasibility, params(speculative_num_draft_tokens=5))  # top-k 1: must be 3
    assert verdict is not None and verdict.category == "infeasible"


def test_known_incompatibilities_of_sm120(feasibility: Feasibility) -> None:
    fused = check(feasibility, params(allreduce="flashinfer_fusion"))
    symm = check(feasibility, params(allreduce="torch_symm_mem"))
    tree = check(feasibility, params(allreduce="nccl_tree"))
    assert fused is not None and "SM120" in fused.reason and fused.knob == "allreduce"
    assert symm is not None and symm.category == "unsupported_arch"
    assert tree is not None and tree.category == "graph_capture_other"


def test_the_memory_estimate_refuses_a_fraction_below_the_weights(
    feasibility: Feasibility,
) -> None:
    low = check(feasibility, params(mem_fraction_static=0.70))
    assert low is not None and low.category == "oom_kv_pool"
    assert "weights" in low.reason
    # 0.78 holds the weights by the estimate, though the real pool would not fit: a crash
    # there is left to teach the study
    assert check(feasibility, params(mem_fraction_static=0.78)) is None


def test_a_kv_pool_crash_condemns_every_lower_fraction(feasibility: Feasibility) -> None:
    feasibility.learn([(4, params(mem_fraction_static=0.78), Outcome.OOM_KV_POOL)])
    lower = check(feasibility, params(mem_fraction_static=0.77, cuda_graph_max_bs=16))
    assert lower is not None and "trial 4" in lower.reason
    assert check(feasibility, params(mem_fraction_static=0.79)) is None


def test_a_graph_crash_condemns_only_configurations_at_least_as_large(
    feasibility: Feasibility,
) -> None:
    crashed = params(mem_fraction_static=0.92, cuda_graph_max_bs=128)
    feasibility.learn([(7, crashed, Outcome.OOM_CUDA_GRAPH)])
    bigger = check(feasibility, params(mem_fraction_static=0.93, cuda_graph_max_bs=256))
    assert bigger is not None and bigger.category == "oom_cuda_graph"
    assert check(feasibility, params(mem_fraction_static=0.93, cuda_graph_max_bs=64)) is None
    assert check(feasibility, params(mem_fraction_static=0.90, cuda_graph_max_bs=256)) is None


def test_other_crashes_condemn_that_configuration_only(feasibility: Feasibility) -> None:
    crashed = params(mem_fraction_static=0.85)
    feasibility.learn([(2, crashed, Outcome.OTHER_CRASH)])
    refused = check(feasibility, crashed)
    assert refused is not None and refused.knob is None
    assert refused.category == "other_crash" and type(refused.category) is str
    assert "crashed (other_crash)" in refused.reason
    assert check(feasibility, params(mem_fraction_static=0.86)) is None


def test_lesson_kinds_name_the_knob_they_blame(feasibility: Feasibility) -> None:
    assert LessonKind.KV_BELOW.knob == LessonKind.GRAPH_ABOVE.knob == "mem_fraction_static"
    assert LessonKind.MODE.knob == LessonKind.MODE_GRAPHS.knob == "allreduce"
    assert LessonKind.EXACT.knob is None
    feasibility.learn([(4, params(mem_fraction_static=0.78), Outcome.OOM_KV_POOL)])
    lower = check(feasibility, params(mem_fraction_static=0.77))
    assert lower is not None and lower.knob == "mem_fraction_static"


def test_refusals_and_interruptions_teach_nothing(feasibility: Feasibility) -> None:
    crashed = params(mem_fraction_static=0.85)
    feasibility.learn([(1, crashed, Outcome.INFEASIBLE), (2, crashed, Outcome.INTERRUPTED)])
    assert feasibility.lessons == 0


def test_a_taken_port_teaches_nothing_of_the_configuration(feasibility: Feasibility) -> None:
    taken = params(mem_fraction_static=0.85)
    feasibility.learn([(3, taken, Outcome.PORT_IN_USE)])
    assert feasibility.lessons == 0 and check(feasibility, taken) is None
    assert Outcome.PORT_IN_USE.crashed and not Outcome.PORT_IN_USE.unmeasurable


def test_lessons_are_rebuilt_from_the_history(feasibility: Feasibility) -> None:
    feasibility.learn([(1, params(mem_fraction_static=0.78), Outcome.OOM_KV_POOL)])
    assert feasibility.lessons == 1
    feasibility.learn([])
    assert feasibility.lessons == 0
    assert check(feasibility, params(mem_fraction_static=0.77)) is None


TUNED_DRAFTS = """\
engine:
  kind: sim
  sim: {profile: h100-llama-3.1-8b}
fixed:
  mem_fraction_static: 0.215
parameters:
  speculative_algorithm: {type: categorical, choices: [EAGLE3, EAGLE]}
"""


def test_the_memory_estimate_follows_the_tuned_algorithms_draft() -> None:
    # h100 profile: 79.65 GiB, target 14.96 GiB, EAGLE-3 head 1.90 GiB, EAGLE head 2.40 GiB; at
    # 0.215 the static pool (17.12 GiB) holds target + EAGLE-3 (16.86) but not + EAGLE (17.36)
    from autotune.space import parse_space

    space = parse_space(TUNED_DRAFTS)
    f = Feasibility(space, create_engine(space.engine))
    assert check(f, {"speculative_algorithm": "EAGLE3"}) is None
    refused = check(f, {"speculative_algorithm": "EAGLE"})
    assert refused is not None and refused.category == "oom_kv_pool"
    assert "17.4 GiB of weights" in refused.reason
    assert f.weights("EAGLE3") != f.weights("EAGLE")
    assert check(f, {"speculative_algorithm": "EAGLE3"}) is None  # each algorithm its own sizes


def test_a_kv_pool_crash_condemns_a_draft_at_least_as_heavy() -> None:
    # The simulator counts draft weights in the static pool (SGLang from 0.5.14): at one
    # fraction, the EAGLE head (2.40 GiB) needs more of it than the EAGLE-3 head (1.90 GiB).
    from autotune.space import parse_space

    space = parse_space(TUNED_DRAFTS)
    f = Feasibility(space, create_engine(space.engine))

    def learned(algorithm: str) -> Any:  # what the lessons say, the estimate aside
        return f.learned(space.config_for({"speculative_algorithm": algorithm}))

    f.learn([(2, {"speculative_algorithm": "EAGLE3"}, Outcome.OOM_KV_POOL)])
    heavier = learned("EAGLE")
    assert heavier is not None and heavier.category == "oom_kv_pool"
    assert "trial 2" in heavier.reason and "with speculative_algorithm EAGLE3" in heavier.reason
    f.learn([(2, {"speculative_algorithm": "EAGLE"}, Outcome.OOM_KV_POOL)])
    assert learned("EAGLE") is not None
    assert learned("EAGLE3") is None  # a lighter draft may fit


SGLANG_SPACE = """\
engine:
  kind: sglang
  sglang_version: "{version}"
  model_path: {root}/target
  draft_model_path: {root}/draft
parameters:
  speculative_algorithm: {{type: categorical, choices: [none, EAGLE3, NGRAM]}}
  mem_fraction_static: {{type: float, low: 0.5, high: 0.95}}
"""


def _sglang_feasibility(root: Path, version: str) -> Feasibility:
    from autotune.space import parse_space

    for name, gib in (("target", 6), ("draft", 2)):
        (root / name).mkdir(exist_ok=True)
        with open(root / name / "model.safetensors", "wb") as out:
            out.truncate(gib * 2**30)  # sparse: the size is what counts
    space = parse_space(SGLANG_SPACE.format(version=version, root=root))
    return Feasibility(space, create_engine(space.engine))


@pytest.mark.parametrize(("version", "draft_counted"), [("0.5.23", True), ("0.5.3", False)])
def test_the_memory_need_follows_the_releases_accounting_of_draft_weights(
    tmp_path: Path, version: str, draft_counted: bool
) -> None:
    f = _sglang_feasibility(tmp_path, version)
    assert f.weights("EAGLE3") == (6.0, 2.0)
    eagle = f.space.config_for({"speculative_algorithm": "EAGLE3", "mem_fraction_static": 0.9})
    assert f.engine.memory_need_gib(eagle, weights=f.weights("EAGLE3")) == (
        8.0 if draft_counted else 6.0
    )
    assert f.engine.draft_in_static() is draft_counted


def test_kv_pool_lessons_follow_the_releases_accounting_of_draft_weights(tmp_path: Path) -> None:
    def refused(f: Feasibility, algorithm: str) -> Any:
        return check(f, {"speculative_algorithm": algorithm, "mem_fraction_static": 0.8})

    crash = [(5, {"speculative_algorithm": "EAGLE3", "mem_fraction_static": 0.85}, "oom_kv_pool")]
    baseline = [(6, {"speculative_algorithm": "none", "mem_fraction_static": 0.85}, "oom_kv_pool")]
    # 0.5.23: the draft is in the static pool; a pool too small without it is too small with it
    new = _sglang_feasibility(tmp_path, "0.5.23")
    new.learn((n, p, Outcome(o)) for n, p, o in crash)
    assert refused(new, "EAGLE3") is not None
    assert refused(new, "none") is None and refused(new, "NGRAM") is None
    new.learn((n, p, Outcome(o)) for n, p, o in baseline)
    for algorithm in ("none", "EAGLE3", "NGRAM"):
        assert refused(new, algorithm) is not None, algorithm
    # 0.5.3 sizes the pool before loading the draft: the failure is the target's, any algorithm
    old = _sglang_feasibility(tmp_path, "0.5.3")
    old.learn((n, p, Outcome(o)) for n, p, o in crash)
    for algorithm in ("none", "EAGLE3", "NGRAM"):
        verdict = refused(old, algorithm)
        assert verdict is not None and verdict.category == "oom_kv_pool", algorithm
    assert "SGLang 0.5.3" in refused(old, "none").reason
    assert "before any draft is loaded" in refused(old, "none").reason
    assert check(old, {"speculative_algorithm": "none", "mem_fraction_static": 0.86}) is None


OOM_IN_POOL = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total "
    "capacity of 23.52 GiB of which 13.00 MiB is free."
)
NO_ROOM = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


def test_a_kv_pool_that_ran_out_of_gpu_memory_condemns_every_higher_fraction(
    feasibility: Feasibility,
) -> None:
    crashed = params(mem_fraction_static=0.85)
    feasibility.learn([(5, crashed, Outcome.OOM_KV_POOL)], {5: OOM_IN_POOL})
    higher = check(feasibility, params(mem_fraction_static=0.86, cuda_graph_max_bs=16))
    assert higher is not None and "trial 5" in higher.reason and "allocated" in higher.reason
    assert higher.knob == LessonKind.KV_ABOVE.knob == "mem_fraction_static"
    assert check(feasibility, params(mem_fraction_static=0.84)) is None
    # the budget message of the same category teaches the other way
    feasibility.learn([(5, crashed, Outcome.OOM_KV_POOL)], {5: NO_ROOM})
    assert check(feasibility, params(mem_fraction_static=0.84)) is not None
    assert check(feasibility, params(mem_fraction_static=0.86)) is None


def test_learning_from_a_study_reads_the_line_that_decided_each_crash(
    feasibility: Feasibility,
) -> None:
    import optuna
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )
    from optuna.trial import TrialState, create_trial

    ints = IntDistribution(1, 512)
    distributions = {
        "speculative_num_steps": ints,
        "speculative_eagle_topk": ints,
        "speculative_num_draft_tokens": ints,
        "cuda_graph_max_bs": ints,
        "mem_fraction_static": FloatDistribution(0.5, 0.99),
        "allreduce": CategoricalDistribution(["nccl", "custom"]),
    }
    study = optuna.create_study()
    for fraction, line in ((0.9, OOM_IN_POOL), (0.8, NO_ROOM)):
        study.add_trial(
            create_trial(
                state=TrialState.PRUNED,
                params=params(mem_fraction_static=fraction),
                distributions=distributions,
                user_attrs={"outcome": "oom_kv_pool", "failure_line": line},
            )
        )
    feasibility.learn_from(study)
    assert feasibility.lessons == 2
    assert check(feasibility, params(mem_fraction_static=0.95)) is not None  # >= 0.9
    assert check(feasibility, params(mem_fraction_static=0.75)) is not None  # <= 0.8
    assert check(feasibility, params(mem_fraction_static=0.85)) is None  # between them
