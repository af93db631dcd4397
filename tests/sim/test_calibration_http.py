"""The calibration targets of shared/facts/calibration.md, measured through the HTTP server.

``test_model.py`` checks every target through :meth:`SimModel.evaluate`; here the same targets,
with the same tolerances, are measured the way a user measures a real server: a
``python -m autotune.sim`` process started with SGLang's flags (``--sim-noise 0``, start-up
time scaled down, serving in real time) and the benchmark client (:mod:`autotune.bench`)
streaming a profile workload from it. Crashes are read from the process's exit code and log,
and the crash classifier must name the category the model predicts.

Servers run one after another, never in parallel (the client and one server share the 2-core
machine). Each measurement runs the profile's own workload with fewer prompts where
``autotune sim eval`` shows the ratio holds at that size, and without the warm-up request
(which is left out of every figure anyway): the seed system serves about 75 tok/s in real time,
so its full workload (12 prompts) would take 20 to 50 s per configuration.

- Graph max batch 128 over 512 needs the KV pressure of two rounds of four 4k-token sessions:
  8 prompts (eval: 1.104; 12 prompts: 1.084; 4 to 6 prompts do not show the effect).
- Custom all-reduce over NCCL: 8 prompts, whose NCCL run is that baseline at 512 (eval: 0.481;
  12 prompts: 0.455; 2 prompts: 0.529, the first prompts weigh the per-step cost more).
- NCCL Tree without graphs over NCCL, a per-step effect: 2 prompts (eval: 0.614; 12: 0.641).
- EAGLE-3 (2, 4, 4) over the baseline at graph 128: 8 prompts, as the baseline (eval: 0.978).
- H100 at batch 1: 2 MT-Bench prompts (the ratios are those of 8 prompts to 0.1%); concurrency
  16 and 64: 32 and 128 prompts (eval: the same gains as 48 and 192 prompts to 0.1%). These
  runs of a few seconds are repeated on their server until two agree, and the fastest counts
  (:func:`best_run`): a burst of other work on the machine slows one run, not the model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence

import httpx
import pytest

from autotune.bench import BenchmarkClient, BenchmarkResult, ClientOptions, WorkloadSpec
from autotune.crashes import classify_text
from autotune.engines import EngineSpec, create_engine
from autotune.sim import load_profile

from ._procs import FAST_MODEL, FAST_PROFILE, READY_LINE, SEED_MODEL, SEED_PROFILE, SimLauncher

TP8 = ("--tp-size", "8")
NCCL = (*TP8, "--disable-custom-all-reduce")
EAGLE3_SEED = (
    "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
    "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "4",
    "--cuda-graph-max-bs-decode", "128",
)  # fmt: skip
EAGLE3_BEST = (
    "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5",
    "--speculative-eagle-topk", "8", "--speculative-num-draft-tokens", "41",
)  # fmt: skip
EAGLE2 = (
    "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2",
    "--speculative-eagle-topk", "8", "--speculative-num-draft-tokens", "17",
)  # fmt: skip


def graph(max_bs: int) -> tuple[str, ...]:
    return ("--cuda-graph-max-bs-decode", str(max_bs))


@dataclasses.dataclass
class Measured:
    result: BenchmarkResult
    kv_tokens: int
    #: The server ran this many times slower than the model (``--sim-serve-scale``).
    serve_scale: float = 1.0

    @property
    def tok_s(self) -> float:
        """The measured output throughput in the model's time."""
        return self.result.output_tok_s * self.serve_scale


#: ``--sim-serve-scale`` of H100 runs at concurrency above 1: the client parses a quarter of the
#: chunks a second, and a busy 2-core machine (CI: 16% below the model at concurrency 64 and
#: scale 1, with another process keeping a core busy) takes a quarter as much from the figure.
H100_SERVE_SCALE = 4.0


#: Runs of a short H100 measurement on one server: at most this many, see :func:`best_run`.
STEADY_RUNS = 3
#: Two runs closer than this (relative) are taken as undisturbed.
STEADY_SPREAD = 0.02
#: A run at least this long (wall seconds) is taken as it is: a burst is a small part of it.
LONG_RUN_S = 15.0


def best_run(client: BenchmarkClient, workload: WorkloadSpec, *, runs: int) -> BenchmarkResult:
    """The fastest of up to ``runs`` runs of ``workload``, stopping once two agree.

    At noise 0 the server's schedule is deterministic and wall time can only be lost: a burst
    of competing work on the 2-core machine (another process's start-up, a collection pass)
    that lands inside a run of 2 to 3 s slows that run alone, by up to 15% seen in CI. Two runs
    within :data:`STEADY_SPREAD` of each other were not disturbed (or were disturbed alike,
    which a sustained load does and a burst seldom does); otherwise a third decides. A first
    run of :data:`LONG_RUN_S` or more stands alone.
    """
    results: list[BenchmarkResult] = []
    for _ in range(runs):
        result = client.run_sync(workload)
        assert result.completed == workload.num_prompts and result.failed == 0
        results.append(result)
        if len(results) == 1 and result.duration_s >= LONG_RUN_S:
            break
        speeds = sorted(r.output_tok_s for r in results)
        if len(speeds) >= 2 and speeds[-1] - speeds[-2] <= STEADY_SPREAD * speeds[-1]:
            break
    return max(results, key=lambda r: r.output_tok_s)


class Lab:
    """Measures configurations over HTTP, one server at a time, each at most once."""

    def __init__(self, launcher: SimLauncher) -> None:
        self.launcher = launcher
        self.seed = load_profile(SEED_PROFILE)
        self.h100 = load_profile(FAST_PROFILE)
        self._cache: dict[tuple[object, ...], Measured] = {}

    def seed_workload(self, prompts: int) -> WorkloadSpec:
        return self.seed.workload("agentic-long").with_changes(num_prompts=prompts, warmup=0)

    def h100_workload(self, name: str, prompts: int) -> WorkloadSpec:
        return self.h100.workload(name).with_changes(num_prompts=prompts, warmup=0)

    def measure(
        self,
        workload: WorkloadSpec,
        *flags: str,
        seed_system: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Measured:
        key = (workload, flags, seed_system, tuple(sorted((env or {}).items())))
        if key in self._cache:
            return self._cache[key]
        profile, model = (SEED_PROFILE, SEED_MODEL) if seed_system else (FAST_PROFILE, FAST_MODEL)
        scale = H100_SERVE_SCALE if not seed_system and workload.concurrency > 1 else 1.0
        scaling = ("--sim-serve-scale", str(scale)) if scale != 1.0 else ()
        server = self.launcher.start(
            *flags, "--sim-noise", "0", *scaling, profile=profile, model=model, env=env
        )
        try:
            options = ClientOptions(benchmark_timeout_s=300, progress=False)
            client = BenchmarkClient(server.url, options)
            result = best_run(client, workload, runs=1 if seed_system else STEADY_RUNS)
            info = httpx.get(f"{server.url}/get_server_info", timeout=20).json()
        finally:
            server.terminate()
        measured = Measured(result, int(info["max_total_num_tokens"]), scale)
        self._cache[key] = measured
        return measured

    def tok_s(
        self,
        workload: WorkloadSpec,
        *flags: str,
        seed_system: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> float:
        return self.measure(workload, *flags, seed_system=seed_system, env=env).tok_s

    def crash(self, *flags: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
        """Exit code and log of a seed-system server that is expected to die during start-up."""
        return self.launcher.run(*flags, profile=SEED_PROFILE, model=SEED_MODEL, env=env)


@pytest.fixture(scope="module")
def lab(module_sim: SimLauncher) -> Iterator[Lab]:
    yield Lab(module_sim)


def report(name: str, value: float, target: str) -> None:
    print(f"\n{name}: {value:.3f} over HTTP (target {target})")


def assert_crashes(code: int, log: str, status: str, line: str) -> None:
    """The server died at start-up with ``line``, and the classifier reads ``status``."""
    assert code != 0
    assert READY_LINE not in log
    assert line in log
    rules = create_engine(EngineSpec(kind="sim")).crash_rules()
    assert classify_text(log, rules).category == status


# --- 1-5: the seed system -------------------------------------------------------------------
def test_smaller_graph_pool_gives_more_kv_and_about_9_percent(lab: Lab) -> None:
    workload = lab.seed_workload(8)
    b512 = lab.measure(workload, *NCCL, *graph(512))
    b128 = lab.measure(workload, *NCCL, *graph(128))
    assert b128.kv_tokens > b512.kv_tokens
    ratio = b128.tok_s / b512.tok_s
    report("seed, graph max batch 128 over 512", ratio, "about 1.09")
    assert ratio == pytest.approx(1.09, abs=0.03)


def test_custom_allreduce_over_pcie_is_less_than_half_of_nccl(lab: Lab) -> None:
    workload = lab.seed_workload(8)  # its NCCL run is the baseline at 512 of the 9% test
    nccl = lab.tok_s(workload, *NCCL, *graph(512))
    custom = lab.tok_s(workload, *TP8, *graph(512))
    report("seed, custom all-reduce over NCCL", custom / nccl, "about 0.46")
    assert custom / nccl == pytest.approx(0.46, abs=0.04)


def test_hand_tuned_eagle3_is_below_the_baseline(lab: Lab) -> None:
    workload = lab.seed_workload(8)
    baseline = lab.tok_s(workload, *NCCL, *graph(128))
    eagle = lab.measure(workload, *NCCL, *EAGLE3_SEED, "--mem-fraction-static", "0.88")
    ratio = eagle.tok_s / baseline
    report("seed, EAGLE-3 (2, 4, 4) over the baseline at graph 128", ratio, "below 1")
    assert eagle.result.accept_length is not None and eagle.result.accept_length > 1
    assert ratio < 1.0


def test_auto_fraction_kills_eagle3_in_the_kv_pool_and_088_starts(lab: Lab) -> None:
    code, log = lab.crash(*NCCL, *EAGLE3_SEED)
    assert_crashes(
        code, log, "oom_kv_pool",
        "Not enough memory. Please try to increase --mem-fraction-static",
    )  # fmt: skip
    assert "mem_fraction_static=0.76" in log
    # the same configuration with 0.88 starts and serves (measured above, or now)
    fraction = ("--mem-fraction-static", "0.88")
    started = lab.measure(lab.seed_workload(8), *NCCL, *EAGLE3_SEED, *fraction)
    assert started.result.completed == 8


@pytest.mark.parametrize(
    ("flag", "status", "line"),
    [
        ("--enable-flashinfer-allreduce-fusion", "graph_capture_other",
         "Capture cuda graph failed: No supported CUDA architectures"),
        ("--enable-torch-symm-mem", "unsupported_arch",
         "torch symmetric memory all-reduce is not supported on this GPU"),
    ],
    ids=["flashinfer-fusion", "torch-symm-mem"],
)  # fmt: skip
def test_allreduce_modes_sm120_lacks_fail_at_startup(
    lab: Lab, flag: str, status: str, line: str
) -> None:
    for flags in ((*TP8, flag), (*TP8, flag, *EAGLE3_SEED, "--mem-fraction-static", "0.88")):
        code, log = lab.crash(*flags)
        assert_crashes(code, log, status, line)


def test_nccl_tree_fails_with_cuda_graphs_and_runs_slowly_without(lab: Lab) -> None:
    tree = {"NCCL_ALGO": "Tree"}
    code, log = lab.crash(*NCCL, env=tree)
    assert_crashes(code, log, "graph_capture_other", "Capture cuda graph failed")
    workload = lab.seed_workload(2)
    eager = lab.tok_s(workload, *NCCL, "--disable-cuda-graph", env=tree)
    nccl = lab.tok_s(workload, *NCCL, *graph(512))  # graph 512: SGLang's default here
    report("seed, NCCL Tree without CUDA graphs over NCCL", eager / nccl, "below 1")
    assert eager < nccl


# --- 6-7: the H100 profile and the erosion of gains --------------------------------------
def test_h100_baseline_and_best_eagle3_and_eagle2(lab: Lab) -> None:
    workload = lab.h100_workload("mt-bench", 2)
    baseline = lab.tok_s(workload, seed_system=False)
    eagle3 = lab.tok_s(workload, *EAGLE3_BEST, seed_system=False)
    eagle2 = lab.tok_s(workload, *EAGLE2, seed_system=False)
    report("H100 baseline tok/s / 158.34", baseline / 158.34, "about 1")
    report("H100 EAGLE-3 (5, 8, 41) over the baseline", eagle3 / baseline, "about 2.36")
    report("H100 EAGLE-2 (2, 8, 17) over the baseline", eagle2 / baseline, "about 1.54")
    assert baseline == pytest.approx(158.34, rel=0.02)
    assert eagle3 / baseline == pytest.approx(373.25 / 158.34, abs=0.1)
    assert eagle2 / baseline == pytest.approx(244.10 / 158.34, abs=0.08)


def gains(lab: Lab, settings: Sequence[tuple[str, int]]) -> list[float]:
    out = []
    for name, prompts in settings:
        workload = lab.h100_workload(name, prompts)
        spec = lab.tok_s(workload, *EAGLE3_BEST, seed_system=False)
        out.append(spec / lab.tok_s(workload, seed_system=False))
    return out


def test_gains_shrink_with_concurrency(lab: Lab) -> None:
    measured = gains(lab, [("mt-bench", 2), ("chat-c16", 32), ("chat-c64", 128)])
    print(f"\nH100 EAGLE-3 (5, 8, 41) gains at concurrency 1, 16, 64: {measured}")
    assert measured[0] > measured[1] > measured[2]
    assert measured[2] < 1.0  # a big tree loses at high concurrency


# --- 9-10: speculation at concurrency 64 with 64 running requests --------------------------
C64 = ("--max-running-requests", "64", *graph(64))  # SGLang's speculative cap of 48 raised
WIDE_C1_BEST = (
    "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "4",
    "--speculative-eagle-topk", "8", "--speculative-num-draft-tokens", "32",
)  # fmt: skip
NARROW_C64_BEST = (
    "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
)  # fmt: skip
WIDEST = (
    "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "8",
    "--speculative-eagle-topk", "8", "--speculative-num-draft-tokens", "64",
)  # fmt: skip


def test_the_best_tree_narrows_and_gains_less_at_concurrency_64(lab: Lab) -> None:
    """The model's best trees, (4, 8, 32) at concurrency 1 and (3, 1, 4) at 64 (``autotune sim
    calibration``, target 9), measured over HTTP: each wins at its own concurrency, and the
    gain at 64 is the smaller (EAGLE-3 paper: 1.38x at batch 64 in SGLang)."""
    gains = {}
    for name, prompts in (("mt-bench", 2), ("chat-c64", 64)):  # c64: one batch, gains of 128
        workload = lab.h100_workload(name, prompts)
        base = lab.tok_s(workload, *C64, seed_system=False)
        wide = lab.tok_s(workload, *WIDE_C1_BEST, *C64, seed_system=False)
        narrow = lab.tok_s(workload, *NARROW_C64_BEST, *C64, seed_system=False)
        gains[name] = (wide / base, narrow / base)
    print(f"\nH100 gains of (4, 8, 32) and (3, 1, 4) at concurrency 1 and 64: {gains}")
    assert gains["mt-bench"][0] > gains["mt-bench"][1]
    assert gains["chat-c64"][1] > gains["chat-c64"][0]
    assert 1.0 < gains["chat-c64"][1] < max(gains["mt-bench"])


def test_a_wide_tree_at_concurrency_64_is_slower_than_no_speculation(lab: Lab) -> None:
    workload = lab.h100_workload("chat-c64", 64)  # one batch of 64 requests
    base = lab.tok_s(workload, *C64, seed_system=False)
    widest = lab.tok_s(workload, *WIDEST, *C64, seed_system=False)
    report("H100 EAGLE-3 (8, 8, 64) at concurrency 64 over the baseline", widest / base, "below 1")
    assert widest < base
