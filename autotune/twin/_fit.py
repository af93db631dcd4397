"""Fitting the twin to the trials of a study.

Each refit starts from the prior and uses every trial so far, block by block, each block with
the measurements that pin it:

* **memory** (the start's memory lines, ``record.extra["memory"]``): the weights line pins the
  weights every rank holds in full, the draft's line its weights, what was left after loading
  the context and the all-reduce mode's buffers, the KV line the draft's KV bytes per token, the
  CUDA-graph line the graph pool's fixed part and its part per captured token, the fraction an
  automatic start chose the automatic rule's reserve: a linear-Gaussian update, exact to the
  log's two decimals;
* **acceptance**: the accept length at each tried (steps, top-k, draft tokens) against the
  simulator's draft-tree model, a least-squares fit of the five acceptance coefficients with the
  prior as a penalty and a Laplace spread;
* **step time**: every load point's throughput, against the simulator's answer at the current
  centre times the ratio of each candidate's steady-state rate (:mod:`autotune.twin._proxy`), a
  Gauss-Newton fit of the efficiencies, overheads and each all-reduce mode's alpha and per-KiB
  cost, re-centred on the exact answer after each round, with a Laplace spread; the prior's
  centre for the weights one draft forward reads keeps its share of the draft's weights per GPU
  as the memory block has fitted them;
* **start-up**: the seconds to ready (or to the crash), linear in the start-up scale and the
  CUDA-graph capture time per batch size;
* **the activation workspace**, which no line prints: every start that captured its graphs (or
  ran eager) bounds it from above, every graph-memory crash (or eager run-time one) from below,
  with the other memory coefficients at the fit's mean; its belief is the prior truncated to
  those bounds, so the point estimate agrees with every start it saw;
* **crashes**: a crash of an all-reduce mode marks the mode as failing (kept in the layout); a
  memory crash, and every start that did not crash, cut the particles that predicted otherwise.

The particles are then drawn from the blocks' Gaussians, those that contradict an observed start
or crash are cut, and the rest carry equal weight.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autotune._knobs import ServerConfig
from autotune.sim._memory import graph_tokens_per_bs
from autotune.twin._gpus import sglang_defaults
from autotune.twin._prior import Layout
from autotune.twin._proxy import (
    ACCEPTANCE_NAMES,
    LoadShape,
    Proxy,
    accept_length,
    effective_mode,
    max_running_of,
)

_GIB = 1024**3
#: Spread of one throughput measurement (log): the benchmark's noise and the model's own error.
RATE_SD = 0.03
#: Spread of one accept length (the run's own average over its verify passes).
ACCEPT_SD = 0.02
#: Spread of a memory figure as the log prints it (two decimals of GiB).
MEMORY_SD = 0.01
STARTUP_SD = 0.05

_MODE_CRASHES = ("unsupported_arch", "graph_capture_other", "nccl_error")
_MEMORY_CRASHES = ("oom_kv_pool", "oom_cuda_graph", "oom_runtime")

STEP_NAMES_BASE = (
    "mem_efficiency",
    "compute_efficiency",
    "dense_scale",
    "step_overhead_ms",
    "eager_overhead_ms",
    "spec_cycle_overhead_ms",
    "tree_overhead_ms_per_token",
    "draft_step_gib",
    "draft_step_overhead_ms",
    "draft_branch_overhead_ms",
    "routing_locality",
)


class Fitter:
    """Refits a twin's particles to its observations (module docstring). ``host`` is the
    :class:`~autotune.twin.Twin`."""

    def __init__(self, host: Any) -> None:
        self.host = host
        self.prior_z = np.zeros(0)
        self.prior_sd = np.zeros(0)
        self.base_layout: Layout | None = None

    def set_prior(self, centre: np.ndarray, spread: np.ndarray) -> None:
        self.prior_z = centre.copy()
        self.prior_sd = spread.copy()
        self.base_layout = self.host.layout

    # --- the refit -------------------------------------------------------------------------
    def update(self) -> None:
        host = self.host
        obs: Sequence[tuple[ServerConfig, Any]] = host.observations
        layout = self._failures(obs)
        host.set_layout(layout)
        names = layout.names
        mean = self.prior_z.copy()
        sd = self.prior_sd.copy()
        self.blocks: list[tuple[list[int], np.ndarray]] = []
        self._memory(obs, layout, mean, sd)
        step_prior = self._draft_step_prior(layout, mean)
        self._activation(obs, layout, mean, sd)
        self._acceptance(obs, layout, mean, sd)
        self._startup(obs, layout, mean, sd)
        host.set_particles(np.tile(mean, (len(host.z), 1)))
        self._step_time(obs, layout, mean, sd, step_prior)
        z = self._draw(mean, sd, len(host.z))
        z, centre = self._cut(obs, layout, z, sd)
        host.set_particles(z, centre=centre)
        del names

    # --- discrete: which all-reduce modes fail ---------------------------------------------
    def _failures(self, obs: Sequence[tuple[ServerConfig, Any]]) -> Layout:
        assert self.base_layout is not None
        layout = self.base_layout
        for config, record in obs:
            if config.tp_size <= 1 or config.allreduce not in layout.protocols:
                continue
            outcome = str(record.outcome)
            graphs = not config.disable_cuda_graph
            mode = config.allreduce
            failure, with_graphs = layout.failures.get(mode, (None, None))
            if outcome == "ok":
                failure = None
                if graphs:
                    with_graphs = None
            elif outcome == "unsupported_arch":
                failure = failure or (
                    "flashinfer_jit_arch" if not graphs else "torch_symm_mem_arch"
                )
            elif outcome == "graph_capture_other" and graphs:
                with_graphs = with_graphs or (None if failure else "nccl_tree_graph")
            elif outcome == "nccl_error":
                failure = "nvls_no_nvlink"
            layout = layout.with_failure(mode, (failure, with_graphs))
        return layout

    # --- memory ------------------------------------------------------------------------------
    def _memory(
        self,
        obs: Sequence[tuple[ServerConfig, Any]],
        layout: Layout,
        mean: np.ndarray,
        sd: np.ndarray,
    ) -> None:
        f = layout.facts
        proxy = self.host.proxy
        rows: list[tuple[dict[str, float], float]] = []  # (coefficient -> factor, value)
        for config, record in obs:
            reading = (record.extra or {}).get("memory")
            if not isinstance(reading, Mapping):
                continue
            total = f.gpu_memory_gib
            weights = reading.get("weights_gib")
            draft = reading.get("draft_weights_gib")
            if isinstance(weights, (int, float)):
                rows.append(({"replicated_gib": 1.0}, weights - proxy.weights / layout.tp))
            spec = config.speculative and f.draft_params_b is not None
            if spec and isinstance(draft, (int, float)):
                rows.append(({"draft_weights_gib": 1.0}, float(draft)))
            free_w = reading.get("free_after_weights_gib")
            if isinstance(free_w, (int, float)) and isinstance(weights, (int, float)):
                used = total - free_w - weights - (draft if spec and draft else 0.0)
                row = {"context_gib": 1.0}
                mode = effective_mode(layout, config.allreduce)
                if layout.tp > 1 and f"ar_mem:{mode}" in layout.names:
                    row[f"ar_mem:{mode}"] = 1.0
                rows.append((row, used))
            kv_tokens, kv_gib = reading.get("kv_tokens"), reading.get("kv_gib")
            if spec and kv_tokens and isinstance(kv_gib, (int, float)) and kv_gib > 0.05:
                per_token = kv_gib * _GIB / kv_tokens
                rows.append(({"draft_kv_bytes": 1.0 / 1000.0}, (per_token - proxy.kv_gpu) / 1000))
            graph_gib, graph_bs = reading.get("graph_gib"), reading.get("graph_max_bs")
            if isinstance(graph_gib, (int, float)) and graph_bs:
                tokens = int(graph_bs) * graph_tokens_per_bs(config)
                rows.append(
                    ({"graph_base_gib": 1.0, "graph_gib_per_token": float(tokens)}, graph_gib)
                )
            fraction = reading.get("mem_fraction_static")
            if config.mem_fraction_static is None and isinstance(fraction, (int, float)):
                base = auto_base_of(layout, config, float(fraction))
                if base is not None:
                    rows.append(({"auto_base_mib": 1.0 / 1024}, base / 1024))
        if not rows:
            return
        linear_update(layout, rows, mean, sd, MEMORY_SD)

    def _draft_step_prior(self, layout: Layout, mean: np.ndarray) -> np.ndarray:
        """The prior's centres for the step-time fit: the weights one draft forward reads
        follow the draft's weights per GPU, which its memory line pins (the prior guessed them
        from the head's size alone); everything else as the prior has it. The fit's ``mean``
        for the draft step moves with its centre."""
        prior = self.prior_z.copy()
        if "draft_step_gib" in layout.names and "draft_weights_gib" in layout.names:
            w, step = layout.index("draft_weights_gib"), layout.index("draft_step_gib")
            shift = mean[w] - self.prior_z[w]  # both on a log scale: the ratio is kept
            prior[step] += shift
            mean[step] += shift
        return prior

    # --- the activation workspace, known only by which starts crashed --------------------
    def _activation(
        self,
        obs: Sequence[tuple[ServerConfig, Any]],
        layout: Layout,
        mean: np.ndarray,
        sd: np.ndarray,
    ) -> None:
        """Condition the activation workspace on the starts: one that captured its graphs (or
        ran eager) had room for it, one that crashed for graph memory (or, eager, at run time
        with its weights in place) had not; with the other memory coefficients at the fit's
        mean, each start bounds it from one side, and its belief becomes the prior truncated
        to those bounds (censored measurements: no line prints it)."""
        if "activation_gib" not in layout.names:
            return
        low, high = -np.inf, np.inf
        v = values_of(layout, mean[None, :])
        for config, record in obs:
            outcome = str(record.outcome)
            if outcome not in ("ok", "oom_cuda_graph", "oom_runtime"):
                continue
            failure, with_graphs = (None, None)
            if config.tp_size > 1:
                failure, with_graphs = layout.failures.get(config.allreduce, (None, None))
            graphs = not config.disable_cuda_graph
            if failure is not None or (graphs and with_graphs is not None):
                continue  # the start meets another failure first: it bounds nothing here
            m = self.host.proxy.memory(v, config)
            if float(m["kv_tokens"][0]) <= 0:
                continue
            room = float(m["free"][0]) - (float(m["graph"][0]) if graphs else 0.0)
            if outcome == "ok":
                high = min(high, room)
            elif outcome == ("oom_cuda_graph" if graphs else "oom_runtime"):
                low = max(low, room)
        if low == -np.inf and high == np.inf:
            return
        i = layout.index("activation_gib")
        c = layout.coefficients[i]
        lo = c.to_z(low) if low > 0 else -np.inf
        hi = c.to_z(high) if high > 0 else -np.inf
        if not hi > lo:
            return  # the starts disagree at the fit's mean: leave the prior to the cut
        mean[i], sd[i] = truncated_normal(float(mean[i]), float(sd[i]), lo, hi)

    # --- acceptance ------------------------------------------------------------------------
    def _acceptance(
        self,
        obs: Sequence[tuple[ServerConfig, Any]],
        layout: Layout,
        mean: np.ndarray,
        sd: np.ndarray,
    ) -> None:
        if "acc_p1" not in layout.names:
            return
        data = []
        for config, record in obs:
            accept = (record.metrics or {}).get("accept_length")
            if str(record.outcome) != "ok" or not config.speculative or not accept:
                continue
            c = self.host.model.resolve(config)
            steps = c.speculative_num_steps or 1
            topk = c.speculative_eagle_topk or 1
            n_draft = c.speculative_num_draft_tokens or steps + 1
            data.append(((steps, topk, n_draft), float(accept)))
        if not data:
            return
        idx = [layout.index(n) for n in ACCEPTANCE_NAMES]

        def residuals(zs: np.ndarray) -> np.ndarray:
            z = mean.copy()
            z[idx] = zs
            fit = [(accept_length(layout, z, *key) - a) / ACCEPT_SD for key, a in data]
            prior = (zs - self.prior_z[idx]) / self.prior_sd[idx]
            return np.array(fit + list(prior))

        zs, cov = gauss_newton(residuals, mean[idx].copy(), rounds=12)
        mean[idx] = zs
        sd[idx] = np.sqrt(np.clip(np.diag(cov), 1e-8, None))
        self.blocks.append((idx, cov))

    # --- start-up --------------------------------------------------------------------------
    def _startup(
        self,
        obs: Sequence[tuple[ServerConfig, Any]],
        layout: Layout,
        mean: np.ndarray,
        sd: np.ndarray,
    ) -> None:
        from autotune.sim import SimModel

        values = {c.name: c.from_z(float(mean[i])) for i, c in enumerate(layout.coefficients)}
        one = SimModel(layout.profile({**values, "startup_scale": 1.0, "capture_per_size_s": 0.0}))
        per = SimModel(layout.profile({**values, "startup_scale": 1e-9, "capture_per_size_s": 1.0}))
        rows: list[tuple[dict[str, float], float]] = []
        for config, record in obs:
            seconds = record.startup_s
            if not seconds or str(record.outcome) not in ("ok", *_MEMORY_CRASHES):
                continue
            d1 = one.plan_startup(config).duration_s
            d2 = per.plan_startup(config).duration_s
            rows.append(({"startup_scale": d1 / seconds, "capture_per_size_s": d2 / seconds}, 1.0))
        if rows:
            linear_update(layout, rows, mean, sd, STARTUP_SD)

    # --- step time -------------------------------------------------------------------------
    def _step_time(
        self,
        obs: Sequence[tuple[ServerConfig, Any]],
        layout: Layout,
        mean: np.ndarray,
        sd: np.ndarray,
        step_prior: np.ndarray,
    ) -> None:
        """Fit the step-time block; ``step_prior``: the prior's centres it is held to."""
        host = self.host
        data = []
        for config, record in obs:
            if str(record.outcome) != "ok":
                continue
            c = host.model.resolve(config)
            accept = (record.metrics or {}).get("accept_length") if c.speculative else None
            for label, workload in host.labelled_points():
                if label is None:
                    rate = (record.metrics or {}).get("output_tok_s")
                else:
                    rate = ((record.loads or {}).get(label) or {}).get("output_tok_s")
                if rate and rate > 0:
                    load = LoadShape.of(workload, max_running_of(layout, c))
                    data.append((c, workload, load, float(rate), accept))
        if not data:
            return
        names = [n for n in STEP_NAMES_BASE if n in layout.names]
        modes = {effective_mode(layout, c.allreduce) for c, *_ in data if layout.tp > 1}
        if modes:
            names += ["ar_alpha", "ar_beta"]
        for mode in sorted(modes):
            names += [f"ar_alpha:{mode}", f"ar_beta:{mode}"]
        idx = [layout.index(n) for n in names]
        proxy: Proxy = host.proxy
        for _ in range(3):
            host.set_particles(np.tile(mean, (len(host.z), 1)))
            exact = []
            for c, workload, _load, _rate, _acc in data:
                exact.append(host.centre_output(c, workload))
            centre = mean.copy()
            c0 = values_of(layout, centre[None, :])
            base = []
            for (c, _w, load, _r, acc), ex in zip(data, exact, strict=True):
                a = None if acc is None else np.array([acc])
                base.append(float(proxy.rate(c0, c, load, a)[0]) if ex else None)

            def residuals(
                zs: np.ndarray,
                centre: np.ndarray = centre,
                exact: list[float | None] = exact,
                base: list[float | None] = base,
            ) -> np.ndarray:
                zb = np.atleast_2d(zs)
                full = np.tile(centre, (len(zb), 1))
                full[:, idx] = zb
                v = values_of(layout, full)
                out = []
                for (c, _w, load, rate, acc), ex, b in zip(data, exact, base, strict=True):
                    if ex is None or b is None:
                        continue
                    a = None if acc is None else np.full(len(zb), acc)
                    pred = ex * proxy.rate(v, c, load, a) / b
                    out.append((np.log(rate) - np.log(pred)) / RATE_SD)
                prior = (zb - step_prior[idx]) / self.prior_sd[idx]
                res = np.concatenate([np.array(out).reshape(-1, len(zb)).T, prior], axis=1)
                return res if zs.ndim == 2 else res[0]

            zs, cov = gauss_newton(residuals, mean[idx].copy(), rounds=8, batched=True)
            mean[idx] = zs
            sd[idx] = np.sqrt(np.clip(np.diag(cov), 1e-8, None))
        self.blocks.append((idx, cov))

    # --- particles -------------------------------------------------------------------------
    def _draw(self, mean: np.ndarray, sd: np.ndarray, n: int) -> np.ndarray:
        rng = self.host.rng
        z = mean + rng.standard_normal((4 * n, len(mean))) * sd
        for idx, cov in self.blocks:
            # the block's joint Laplace spread (its correlations keep the predictions of what
            # was measured tight), no wider than the prior in any direction
            values, vectors = np.linalg.eigh((cov + cov.T) / 2)
            values = np.clip(values, 0.0, float(np.max(self.prior_sd[idx]) ** 2))
            draws = rng.standard_normal((4 * n, len(idx))) * np.sqrt(values)
            z[:, idx] = mean[idx] + draws @ vectors.T
        z[0] = mean
        return np.asarray(z)

    def _cut(
        self,
        obs: Sequence[tuple[ServerConfig, Any]],
        layout: Layout,
        z: np.ndarray,
        sd: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The particles that agree with every observed start and memory crash (the ``n`` that
        contradict fewest, where fewer than ``n`` agree with all), and the point estimate: the
        fit's mean (``z[0]``), or where it contradicts more than the best, the agreeing particle
        nearest to it."""
        from autotune.twin._prediction import crash_kinds

        n = len(z) // 4
        v = values_of(layout, z)
        wrong = np.zeros(len(z))
        for config, record in obs:
            outcome = str(record.outcome)
            if outcome != "ok" and outcome not in _MEMORY_CRASHES:
                continue
            c = self.host.model.resolve(config)
            kinds, _ = crash_kinds(layout, self.host.proxy, v, c)
            if outcome == "ok":
                wrong += kinds != ""
            else:
                wrong += kinds != outcome
        order = np.argsort(wrong, kind="stable")
        kept = z[order[:n]]
        centre = z[0]
        if wrong[0] > wrong.min():
            best = z[wrong == wrong.min()]
            distance = (((best - z[0]) / sd) ** 2).sum(axis=1)
            centre = best[int(np.argmin(distance))]
        return np.asarray(kept), np.asarray(centre)


def auto_base_of(layout: Layout, config: ServerConfig, fraction: float) -> float | None:
    """The automatic rule's base reserve (MiB) that gave ``fraction``; None where SGLang's
    10 GiB floor decided it instead (the fraction then tells nothing of the base)."""
    total_mib = layout.facts.gpu_memory_gib * 1024
    max_bs_default, chunk_default = sglang_defaults(layout.facts.gpu_memory_gib, layout.tp)
    chunk = config.chunked_prefill_size or chunk_default
    max_bs = config.cuda_graph_max_bs or max_bs_default
    others = max(chunk, 2048) * 1.5 + max_bs * 2 + config.tp_size / 8 * 1024
    reserved = (1.0 - fraction) * total_mib - (2048 if config.speculative else 0)
    if total_mib > 60 * 1024 and reserved <= 10 * 1024 + 0.0006 * total_mib:
        return None
    return reserved - others


def rate_names(layout: Layout, config: ServerConfig) -> list[str]:
    """The coefficients the serving rate of ``config`` depends on."""
    names = [n for n in STEP_NAMES_BASE if n in layout.names]
    if layout.tp > 1:
        mode = effective_mode(layout, config.allreduce)
        names += ["ar_alpha", "ar_beta", f"ar_alpha:{mode}", f"ar_beta:{mode}"]
    if config.speculative:
        names += [n for n in ACCEPTANCE_NAMES if n in layout.names]
    return names


def values_of(layout: Layout, z: np.ndarray) -> dict[str, np.ndarray]:
    out = {}
    for i, c in enumerate(layout.coefficients):
        col = z[:, i]
        out[c.name] = np.clip(col if c.linear else np.exp(col), c.low, c.high)
    return out


def truncated_normal(mu: float, sd: float, lo: float, hi: float) -> tuple[float, float]:
    """The mean and spread of N(``mu``, ``sd``) truncated to (``lo``, ``hi``); where the
    interval lies far in a tail (no numerical mass), its edge's side, a quarter of its width
    (or of ``sd``) inside."""
    a, b = (lo - mu) / sd, (hi - mu) / sd

    def pdf(x: float) -> float:
        return 0.0 if math.isinf(x) else math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)

    def cdf(x: float) -> float:
        return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))

    mass = cdf(b) - cdf(a)
    if mass < 1e-9:
        width = (hi - lo) if math.isfinite(hi - lo) else sd
        step = min(width, sd) / 4
        return (lo + step, step) if a > 0 else (hi - step, step)
    ratio = (pdf(a) - pdf(b)) / mass
    ta = 0.0 if math.isinf(a) else a * pdf(a)
    tb = 0.0 if math.isinf(b) else b * pdf(b)
    var = 1.0 + (ta - tb) / mass - ratio * ratio
    return mu + sd * ratio, sd * math.sqrt(max(var, 1e-6))


def linear_update(
    layout: Layout,
    rows: Sequence[tuple[Mapping[str, float], float]],
    mean: np.ndarray,
    sd: np.ndarray,
    noise: float,
) -> None:
    """A Gaussian update of the coefficients the ``rows`` name, each row a measurement
    ``sum(factor * value) = target`` (values on their own scale, linearised at ``mean`` for
    log-scale coefficients), with measurement spread ``noise``."""
    names = sorted({k for row, _ in rows for k in row})
    idx = [layout.index(k) for k in names]
    coefs = [layout.coefficients[i] for i in idx]
    z0 = mean[idx].copy()
    for _ in range(40):
        x0 = np.array([c.from_z(float(z)) for c, z in zip(coefs, z0, strict=True)])
        # d value / d z: 1 for linear, value for log scale
        dx = np.array([1.0 if c.linear else x for c, x in zip(coefs, x0, strict=True)])
        a = np.array([[row.get(k, 0.0) for k in names] for row, _ in rows]) * dx
        resid = np.array([t for _, t in rows]) - np.array(
            [sum(row.get(k, 0.0) * x for k, x in zip(names, x0, strict=True)) for row, _ in rows]
        )
        prior_mu = mean[idx]
        prior_prec = 1.0 / sd[idx] ** 2
        h = a.T @ a / noise**2 + np.diag(prior_prec)
        g = a.T @ resid / noise**2 - prior_prec * (z0 - prior_mu)
        step = np.clip(np.linalg.solve(h, g), -0.5, 0.5)
        z0 = z0 + step
        if np.max(np.abs(step)) < 1e-7:
            break
    cov = np.linalg.inv(h)
    for k, i in enumerate(idx):
        c = layout.coefficients[i]
        mean[i] = c.to_z(c.from_z(float(z0[k])))
        sd[i] = float(np.sqrt(max(cov[k, k], 1e-10)))


def gauss_newton(
    residuals: Any, z: np.ndarray, *, rounds: int, batched: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Levenberg-Marquardt on ``residuals(z)``; returns the optimum and the Laplace covariance
    (the inverse of J'J there). ``batched``: ``residuals`` takes a 2-D stack of points."""
    h = 1e-4
    lam = 1e-3

    def jac(z: np.ndarray, r: np.ndarray) -> np.ndarray:
        if batched:
            pts = z + np.vstack([np.zeros(len(z)), np.eye(len(z)) * h])
            rs = residuals(pts)
            return np.asarray((rs[1:] - rs[0]).T / h)
        cols = []
        for i in range(len(z)):
            zz = z.copy()
            zz[i] += h
            cols.append((residuals(zz) - r) / h)
        return np.array(cols).T

    r = residuals(z)
    cost = float(r @ r)
    j = jac(z, r)
    for _ in range(rounds):
        jtj = j.T @ j
        step = np.linalg.solve(jtj + lam * np.diag(np.diag(jtj) + 1e-9), -j.T @ r)
        step = np.clip(step, -1.0, 1.0)
        z_new = z + step
        r_new = residuals(z_new)
        cost_new = float(r_new @ r_new)
        if cost_new < cost:
            z, r, cost = z_new, r_new, cost_new
            lam = max(lam / 3, 1e-7)
            j = jac(z, r)
            if np.max(np.abs(step)) < 1e-4:
                break
        else:
            lam *= 5
    cov = np.linalg.pinv(j.T @ j)
    return z, cov
