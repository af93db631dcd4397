"""Print the simulator's calibration figures (``python scripts/calibration_report.py``).

Each line is one target of the calibration facts with the figure the model reaches through
``SimModel.evaluate`` (the same numbers ``autotune sim eval`` prints).
"""

from __future__ import annotations

import time

from autotune._knobs import ServerConfig
from autotune.sim._model import SimModel
from autotune.sim._profile import load_profile

SEED = "rtxpro6000x8-kimi-k2.5"
H100 = "h100-llama-3.1-8b"


def tok_s(model: SimModel, workload: str | None = None, **params: object) -> float:
    v = model.evaluate(ServerConfig.from_params(params), model.profile.workload(workload))
    if v.status != "ok" or v.output_tok_s is None:
        raise SystemExit(f"{params} -> {v.status}: {v.failure_line}")
    return v.output_tok_s


def main() -> None:
    t0 = time.perf_counter()
    seed = SimModel(load_profile(SEED))
    base = {"tp_size": 8, "allreduce": "nccl"}
    eagle = {
        **base,
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 4,
        "cuda_graph_max_bs": 128,
    }
    b512 = tok_s(seed, cuda_graph_max_bs=512, **base)
    b128 = tok_s(seed, cuda_graph_max_bs=128, **base)
    cust = tok_s(seed, cuda_graph_max_bs=512, tp_size=8, allreduce="custom")
    e88 = tok_s(seed, mem_fraction_static=0.88, **eagle)
    e76 = seed.evaluate(ServerConfig.from_params(eagle))
    print(f"seed baseline graph 512: {b512:.1f} tok/s (seed: 82)")
    print(
        f"seed baseline graph 128: {b128:.1f} tok/s (seed: 89.5)  ratio {b128 / b512:.3f} (target ~1.09)"
    )
    print(
        f"seed custom all-reduce: {cust:.1f} tok/s (seed: 38)  ratio {cust / b512:.3f} (target ~0.46)"
    )
    print(f"seed EAGLE-3 (2,4,4) 0.88: {e88:.1f} tok/s ratio {e88 / b128:.3f} (target < 1)")
    print(f"seed EAGLE-3 (2,4,4) auto: {e76.status} {e76.failure_line}")
    for mode in ("flashinfer_fusion", "torch_symm_mem", "nccl_tree"):
        v = seed.evaluate(
            ServerConfig.from_params({**eagle, "mem_fraction_static": 0.88, "allreduce": mode})
        )
        print(f"seed {mode}: {v.status}")
    v = seed.evaluate(
        ServerConfig.from_params({**base, "allreduce": "nccl_tree", "disable_cuda_graph": True})
    )
    print(f"seed nccl_tree eager: {v.status} {v.output_tok_s and round(v.output_tok_s, 1)} tok/s")
    h = SimModel(load_profile(H100))
    hb = tok_s(h, tp_size=1)
    print(f"h100 baseline: {hb:.2f} tok/s (158.34)")
    for alg, s, k, n in (("EAGLE3", 5, 8, 32), ("EAGLE", 5, 8, 64), ("EAGLE", 3, 4, 16)):
        v = h.evaluate(
            ServerConfig.from_params(
                {
                    "speculative_algorithm": alg,
                    "speculative_num_steps": s,
                    "speculative_eagle_topk": k,
                    "speculative_num_draft_tokens": n,
                }
            )
        )
        print(
            f"h100 {alg} ({s},{k},{n}): {v.output_tok_s:.1f} tok/s  x{v.output_tok_s / hb:.2f}  accept {v.accept_length:.2f}"
        )
    print(f"[{time.perf_counter() - t0:.2f} s]")


if __name__ == "__main__":
    main()
