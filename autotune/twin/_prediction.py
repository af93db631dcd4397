"""What the twin predicts for a list of configurations: per-particle objectives, crash odds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune._knobs import ServerConfig
from autotune.twin._prior import Layout
from autotune.twin._proxy import Proxy

#: The crash category of each all-reduce failure a profile may name (autotune.sim._startup).
MODE_CRASHES = {
    "torch_symm_mem_arch": "unsupported_arch",
    "flashinfer_jit_arch": "graph_capture_other",
    "nccl_tree_graph": "graph_capture_other",
    "nvls_no_nvlink": "nccl_error",
}


@dataclass(frozen=True)
class TwinPrediction:
    """The twin's belief about ``configs``, particle by particle.

    ``samples[i, j]``: the objective (weighted over the space's load points) of configuration
    ``j`` if the box is particle ``i``; NaN where that particle predicts a crash.
    ``crash_probability[j]``: the weight of the particles that predict a crash;
    ``crash_reason[j]``: the most likely crash with its arithmetic (None: none predicted).
    ``points[k, i, j]``: the objective at the space's load point ``k`` alone (a space without
    a load mix has one point, whose figures are ``samples``).
    """

    samples: np.ndarray
    weights: np.ndarray
    crash_probability: np.ndarray
    crash_reason: list[str | None]
    points: np.ndarray | None = None

    def at_point(self, k: int) -> TwinPrediction:
        """The prediction at load point ``k`` alone (its figures as ``samples``)."""
        samples = self.samples if self.points is None else self.points[k]
        return TwinPrediction(samples, self.weights, self.crash_probability, self.crash_reason)

    def mean(self) -> np.ndarray:
        """The expected objective given that the configuration starts (NaN: no particle does)."""
        ok = ~np.isnan(self.samples)
        w = self.weights[:, None] * ok
        total = w.sum(axis=0)
        values = np.where(ok, self.samples, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, (w * values).sum(axis=0) / total, np.nan)

    def std(self) -> np.ndarray:
        ok = ~np.isnan(self.samples)
        w = self.weights[:, None] * ok
        total = w.sum(axis=0)
        mean = self.mean()
        values = np.where(ok, self.samples, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            var = (w * (values - mean) ** 2).sum(axis=0) / total
        return np.where(total > 0, np.sqrt(var), np.nan)


def crash_kinds(
    layout: Layout, proxy: Proxy, v: dict[str, np.ndarray], config: ServerConfig
) -> tuple[np.ndarray, dict[str, str]]:
    """Per particle, the crash the simulator's start-up would end in ('' where it starts), in
    the order the start-up meets them; and one line of arithmetic per kind, from the weighted
    particles that predict it (the weights are applied by the caller: the means here are plain
    over those particles)."""
    n = len(v["mem_efficiency"])
    kinds = np.full(n, "", dtype=object)
    text: dict[str, str] = {}
    f = layout.facts
    if config.tp_size > f.gpu_count:
        kinds[:] = "other_crash"
        text["other_crash"] = f"tp {config.tp_size} needs more GPUs than the box's {f.gpu_count}"
        return kinds, text
    if config.speculative and f.draft_params_b is None:
        kinds[:] = "bad_args"
        text["bad_args"] = "speculation needs a draft head this box does not have"
        return kinds, text
    graphs = not config.disable_cuda_graph
    failure, with_graphs = (None, None)
    if config.tp_size > 1:
        failure, with_graphs = layout.failures.get(config.allreduce, (None, None))
    init_fail = failure in ("torch_symm_mem_arch", "nvls_no_nvlink")
    if init_fail:
        kinds[:] = MODE_CRASHES[str(failure)]
        text[kinds[0]] = f"all-reduce {config.allreduce}: {failure} on this box"
        return kinds, text
    m = proxy.memory(v, config)
    weights_fail = m["context"] + m["target"] + m["draft"] > f.gpu_memory_gib
    kv_fail = ~weights_fail & (m["kv_tokens"] <= 0)
    graph_mode = graphs and (failure == "flashinfer_jit_arch" or with_graphs is not None)
    left = ~weights_fail & ~kv_fail
    kinds[weights_fail] = "oom_runtime"
    kinds[kv_fail] = "oom_kv_pool"
    if graph_mode:
        kinds[left] = "graph_capture_other"
        text["graph_capture_other"] = (
            f"all-reduce {config.allreduce}: {failure or with_graphs} under CUDA graphs"
        )
    elif graphs:
        g_fail = left & (m["activation"] + m["graph"] > m["free"])
        kinds[g_fail] = "oom_cuda_graph"
    else:
        a_fail = left & (m["activation"] > m["free"])
        if failure == "flashinfer_jit_arch":
            kinds[left] = "unsupported_arch"
            text["unsupported_arch"] = f"all-reduce {config.allreduce}: {failure} at warm-up"
        kinds[a_fail & (kinds == "")] = "oom_runtime"

    def mean(name: str, mask: np.ndarray) -> float:
        return float(np.mean(m[name][mask]))

    total = f.gpu_memory_gib
    for kind in ("oom_runtime", "oom_kv_pool", "oom_cuda_graph"):
        mask = kinds == kind
        if not mask.any() or kind in text:
            continue
        frac = mean("fraction", mask)
        if kind == "oom_kv_pool":
            text[kind] = (
                f"KV pool: {frac:.2f} x {total:.1f} GiB - {mean('context', mask):.2f} GiB "
                f"context - {mean('target', mask):.2f} GiB weights - {mean('draft', mask):.2f} "
                f"GiB draft = {mean('kv_pool', mask):.2f} GiB holds no KV token"
            )
        elif kind == "oom_cuda_graph":
            text[kind] = (
                f"CUDA graphs: {mean('activation', mask):.2f} GiB activations + "
                f"{mean('graph', mask):.2f} GiB graphs > {mean('free', mask):.2f} GiB left "
                f"outside the static pool ({total:.1f} GiB x (1 - {frac:.2f}))"
            )
        else:
            text[kind] = (
                f"memory: {mean('context', mask):.2f} GiB context + {mean('target', mask):.2f} "
                f"GiB weights + {mean('draft', mask):.2f} GiB draft, activations "
                f"{mean('activation', mask):.2f} GiB, on {total:.1f} GiB per GPU"
            )
    return kinds, text
