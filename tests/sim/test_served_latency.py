"""The simulated server streams at the model's latencies: HTTP ITL p99 against ``sim eval``.

A real ``python -m autotune.sim`` process (noise 0) is loaded by the benchmark client with three
workloads of the H100 profile, and the inter-token latency p99 it measures is compared with
:meth:`SimModel.evaluate`'s, the figure ``autotune sim eval`` prints. The model fast-forwards
many decode cycles in one engine step; the server takes one cycle per step and streams a chunk
per cycle, so agreement means the model counts each cycle's gap as the chunk it would have been
(before, it counted a whole fast-forwarded step as one gap: 1,606 ms at concurrency 1 where the
server measured 6.3 ms).

The p99 of gaps of a few milliseconds is the figure most sensitive to the host: a delivery a
few milliseconds late (a busy 2-core machine, the client parsing 64 streams) shows in it. The
servers run with ``--sim-serve-scale`` 16 (baseline) and 8 (EAGLE-3): every step takes that many
times its modelled duration and the measured latencies are divided by it, so the host's jitter
weighs that many times less. Measured on the 2-core machine (ITL p99 in model milliseconds,
HTTP against the model):

- baseline, concurrency 1, 2 prompts: 6.44 to 6.75 against 6.31 (beside a busy loop: 11.0 at
  scale 1, 7.44 at scale 4, 6.75 at scale 8; beside three: 6.99 to 7.08 at scale 8, three runs
  in a row over 10%, and 6.72 at scale 16). At concurrency 1 each gap is one token's 6 ms, so a
  host's delay shows in full, and a steady load on both cores delays every run alike (a retry
  does not help): this server runs at scale 16;
- EAGLE-3, concurrency 16, 48 prompts: 5.23 and 5.26 against 5.15 (32 prompts: 5.20 to 5.74);
- EAGLE-3, concurrency 64, 64 prompts: 6.72 to 7.30, once 7.97 and on a busy machine 8.13,
  against 6.72. The model's p99 lies on the short last chunks of the requests, which the server
  streams alike; what lifts the served figure is the first decode step of the run's opening
  burst, which the server holds until the client's requests stopped arriving
  (:mod:`autotune.sim._admission`), and the host's jitter. 128 prompts dilute the first but
  mix replacements into the running batch: 7.20 and 7.29.

Without speculation, 64 streams get a one-token chunk every 7 model-ms, and the host's jitter
reached 18% of the p99 at scale 8 beside a busy loop, so the loads at 16 and 64 run EAGLE-3,
whose chunks carry about four tokens. The loads run with fewer prompts than the workloads'
own where the figure repeats batch after batch (2 and 64), and without warm-up (it changes no
inter-token gap): about 90 s in all. A burst of other work on the machine seldom spans several
runs, so up to three runs of a load are made and the closest is asserted.
"""

from __future__ import annotations

import pytest

from autotune._knobs import ServerConfig
from autotune.bench import BenchmarkClient, ClientOptions
from autotune.sim import SimModel, load_profile

from ._procs import FAST_PROFILE, SimLauncher

SPEC_FLAGS = (
    "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8",
)  # fmt: skip
SPEC = ServerConfig(
    speculative_algorithm="EAGLE3",
    speculative_num_steps=3,
    speculative_eagle_topk=4,
    speculative_num_draft_tokens=8,
)
#: Per server: its flags, its configuration, its loads (workload, prompts) and its serve scale.
LOADS = {
    "baseline": ((), ServerConfig(), [("mt-bench", 2)], 16),  # about 52 s
    "eagle3": (SPEC_FLAGS, SPEC, [("chat-c16", 48), ("chat-c64", 64)], 8),  # about 22 s and 17 s
}


@pytest.mark.parametrize("server_kind", list(LOADS))
def test_served_itl_p99_is_the_models(sim: SimLauncher, server_kind: str) -> None:
    flags, config, loads, scale = LOADS[server_kind]
    model = SimModel(load_profile(FAST_PROFILE))
    server = sim.start(*flags, "--sim-noise", "0", "--sim-serve-scale", str(scale))
    client = BenchmarkClient(server.url, ClientOptions(benchmark_timeout_s=300, progress=False))
    for workload_name, prompts in loads:
        workload = model.profile.workload(workload_name).with_changes(num_prompts=prompts, warmup=0)
        verdict = model.evaluate(config, workload)
        assert verdict.status == "ok" and verdict.itl_p99_ms is not None
        ratios = []
        for _ in range(3):
            result = client.run_sync(workload)
            assert result.completed == prompts and result.failed == 0
            assert result.itl_p99_ms is not None and result.itl_mean_ms is not None
            ratio = result.itl_p99_ms / scale / verdict.itl_p99_ms
            print(
                f"\n{server_kind} {workload_name} x{prompts}: ITL p99 served "
                f"{result.itl_p99_ms / scale:.3f} ms, sim eval {verdict.itl_p99_ms:.3f} ms, "
                f"ratio {ratio:.4f}; mean {result.itl_mean_ms / scale:.3f} against "
                f"{verdict.itl_mean_ms:.3f}"
            )
            ratios.append(ratio)
            if abs(ratio - 1.0) <= 0.10:
                break
        assert min(ratios, key=lambda r: abs(r - 1.0)) == pytest.approx(1.0, abs=0.10)
