"""The twin of one box: a belief over the simulator's profile, fitted to a study's trials.

:meth:`Twin.prior` builds the belief from what is known before the first start
(:class:`~autotune.twin.BoxFacts`: the GPU table, the interconnect's all-reduce protocols, the
model's config, a generic draft acceptance curve), as particles: coefficient vectors drawn from
the prior spreads. :meth:`Twin.observe` conditions it on every trial (memory lines, acceptance,
throughput, crashes, start-up time); :meth:`Twin.predict` scores configurations with the
simulator's own model for every particle; :meth:`Twin.profile` and :meth:`Twin.to_yaml` give the
posterior's point estimate as a profile the simulator serves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from autotune._knobs import ServerConfig
from autotune._workload import WorkloadSpec
from autotune.sim import Profile, SimModel
from autotune.space import METRICS, SearchSpace
from autotune.twin._facts import BoxFacts
from autotune.twin._fit import Fitter, rate_names, values_of
from autotune.twin._prediction import TwinPrediction, crash_kinds
from autotune.twin._prior import Layout, build_layout
from autotune.twin._proxy import (
    ACCEPTANCE_NAMES,
    LoadShape,
    Proxy,
    accept_length,
    max_bs_of,
    max_running_of,
)

#: Particles the twin holds by default: enough for the spread of a prediction, few enough to
#: score a few hundred candidates per proposal.
PARTICLES = 64


class TrialFacts(Protocol):
    """What the twin reads of a trial record (:class:`autotune.study.TrialRecord` has it)."""

    @property
    def outcome(self) -> Any: ...
    @property
    def metrics(self) -> Mapping[str, float | None]: ...
    @property
    def loads(self) -> Mapping[str, Mapping[str, float | None]]: ...
    @property
    def extra(self) -> Mapping[str, Any]: ...
    @property
    def startup_s(self) -> float | None: ...


class Twin:
    """A belief over the box's profile; see the module docstring."""

    def __init__(
        self,
        layout: Layout,
        space: SearchSpace,
        z: np.ndarray,
        *,
        seed: int = 0,
    ) -> None:
        self.layout = layout
        self.space = space
        self.z = z
        self.weights = np.full(len(z), 1.0 / len(z))
        self.rng = np.random.default_rng(seed)
        self.proxy = Proxy(layout)
        points = space.objective.loads
        self.points: tuple[tuple[WorkloadSpec, float], ...] = (
            tuple((p.workload(space.workload), p.weight) for p in points)
            if points
            else ((space.workload, 1.0),)
        )
        self.metric = space.objective.metric
        self.minimize = METRICS.get(self.metric) == "minimize"
        self.observations: list[tuple[ServerConfig, TrialFacts]] = []
        self._version = 0
        self._centre_cache: dict[Any, float | None] = {}
        self._accept_cache: dict[Any, tuple[float, np.ndarray]] = {}
        self._model: SimModel | None = None
        self._c0_cache: dict[str, np.ndarray] | None = None
        self._centre: np.ndarray | None = None
        self.fitter = Fitter(self)

    # --- construction ----------------------------------------------------------------------
    @classmethod
    def prior(
        cls,
        facts: BoxFacts,
        space: SearchSpace,
        *,
        seed: int = 0,
        errors: Mapping[str, float] | None = None,
        particles: int = PARTICLES,
    ) -> Twin:
        """The prior twin of ``facts`` for ``space`` (its tp, workload and load points).

        ``errors`` multiplies the prior centre of named coefficient groups (``bandwidth``,
        ``acceptance``, ``allreduce``, ...): the search benchmark's deliberately wrong prior.
        """
        workloads = [space.workload]
        for p in space.objective.loads:
            w = p.workload(space.workload)
            workloads.append(w.with_changes(name=f"{space.workload.name}-{p.label}"))
        layout = build_layout(facts, space.engine.tp_size, workloads)
        if errors:
            layout = layout.with_errors(errors)
        rng = np.random.default_rng(seed)
        centre = np.array([c.to_z(c.centre) for c in layout.coefficients])
        spread = np.array([c.spread for c in layout.coefficients])
        z = centre + rng.standard_normal((particles, len(centre))) * spread
        z[0] = centre
        twin = cls(layout, space, z, seed=seed)
        twin.fitter.set_prior(centre, spread)
        return twin

    # --- the belief ------------------------------------------------------------------------
    def values(self) -> dict[str, np.ndarray]:
        """Every coefficient's value per particle."""
        out = {}
        for i, c in enumerate(self.layout.coefficients):
            col = self.z[:, i]
            out[c.name] = np.clip(col if c.linear else np.exp(col), c.low, c.high)
        return out

    def centre_z(self) -> np.ndarray:
        """The point estimate on the fitting scale: the fit's mean (the particles' weighted
        mean before any fit)."""
        if self._centre is not None:
            return self._centre
        return np.asarray(self.weights @ self.z)

    def centre_values(self) -> dict[str, float]:
        z0 = self.centre_z()
        return {c.name: c.from_z(float(z0[i])) for i, c in enumerate(self.layout.coefficients)}

    def profile(self) -> Profile:
        """The posterior's point estimate (:meth:`centre_z`) as a simulator profile."""
        return self.layout.profile(self.centre_values(), name="twin")

    def to_yaml(self) -> str:
        """The point estimate as a profile file (``autotune sim serve --sim-profile FILE``)."""
        from autotune.twin._export import profile_yaml

        return profile_yaml(self.profile(), len(self.observations), self.coverage())

    def coverage(self) -> str | None:
        """What the started trials covered, knob by knob (``steps 1-4, top-k 1/4, ...``; None:
        no trial started): a prediction beyond it rests on the prior's physics, not on a
        measurement."""
        resolved = self._started()
        if not resolved:
            return None
        spec = [c for c in resolved if c.speculative]
        parts = [f"{len(resolved)} started ({len(resolved) - len(spec)} without speculation)"]

        def span(name: str, values: Sequence[Any]) -> None:
            known = {v for v in values if v is not None}
            if not known:
                return
            numbers = all(isinstance(v, (int, float)) for v in known)
            ordered = sorted(known) if numbers else sorted(known, key=str)
            if numbers and len(ordered) > 5:
                parts.append(f"{name} {ordered[0]:g}-{ordered[-1]:g}")
            else:
                parts.append(f"{name} " + "/".join(f"{v:g}" if numbers else str(v)
                                                   for v in ordered))  # fmt: skip

        span("steps", [c.speculative_num_steps for c in spec])
        span("top-k", [c.speculative_eagle_topk for c in spec])
        span("draft tokens", [c.speculative_num_draft_tokens for c in spec])
        if self.layout.tp > 1:
            span("all-reduce", [c.allreduce for c in resolved])
        span("CUDA-graph batch", [c.cuda_graph_max_bs for c in resolved])
        span("static memory", [c.mem_fraction_static for c in resolved])
        return ", ".join(parts)

    def beyond(self, config: ServerConfig) -> list[str]:
        """Where ``config``'s step time lies outside what the started trials measured
        (:meth:`coverage`): a top-k or all-reduce mode no started trial used, or steps or draft
        tokens outside the measured range (``top-k 8``, ``draft tokens 15 > 9``); empty where
        each of them is within. The CUDA-graph batch and the static memory share are left out:
        they change the step time only at the crash edges."""
        started = self._started()
        c = self.model.resolve(config)
        spec = [s for s in started if s.speculative]
        out: list[str] = []

        def check(name: str, value: Any, seen: Sequence[Any], *, ranged: bool) -> None:
            known = [v for v in seen if v is not None]
            if value is None or not known:
                return
            if not ranged:
                if value not in known:
                    out.append(f"{name} {value}")
            elif value > max(known):
                out.append(f"{name} {value:g} > {max(known):g}")
            elif value < min(known):
                out.append(f"{name} {value:g} < {min(known):g}")

        if c.speculative:
            if not spec:
                out.append("speculation")
            steps = [s.speculative_num_steps for s in spec]
            topks = [s.speculative_eagle_topk for s in spec]
            drafts = [s.speculative_num_draft_tokens for s in spec]
            check("steps", c.speculative_num_steps, steps, ranged=True)
            check("top-k", c.speculative_eagle_topk, topks, ranged=False)
            check("draft tokens", c.speculative_num_draft_tokens, drafts, ranged=True)
        if self.layout.tp > 1:
            check("all-reduce", c.allreduce, [s.allreduce for s in started], ranged=False)
        return out

    def _started(self) -> list[ServerConfig]:
        """The configurations of the observed trials that started, as the engine resolves
        them."""
        return [self.model.resolve(c) for c, r in self.observations if str(r.outcome) == "ok"]

    def set_layout(self, layout: Layout) -> None:
        """Replace the fixed part (an all-reduce mode learned to fail, or to work)."""
        if layout is not self.layout:
            self.layout = layout
            self.proxy = Proxy(layout)
            self.changed()

    def set_particles(self, z: np.ndarray, *, centre: np.ndarray | None = None) -> None:
        """Replace the particles (equal weights) and the point estimate (None: their mean)."""
        self.z = np.asarray(z, dtype=float)
        self.weights = np.full(len(self.z), 1.0 / len(self.z))
        self._centre = None if centre is None else np.asarray(centre, dtype=float)
        self.changed()

    def labelled_points(self) -> list[tuple[str | None, WorkloadSpec]]:
        """The load points with the label a record files their figures under (None: the
        space has no load mix and the record's own figures are the point's)."""
        points = self.space.objective.loads
        if not points:
            return [(None, self.space.workload)]
        return [(p.label, p.workload(self.space.workload)) for p in points]

    def centre_output(self, config: ServerConfig, workload: WorkloadSpec) -> float | None:
        """Output tokens per second of ``config`` on the centre profile (None: it crashes)."""
        key = ("output_tok_s", config, workload)
        if key not in self._centre_cache:
            verdict = self.model.evaluate(config, workload)
            self._centre_cache[key] = verdict.output_tok_s if verdict.status == "ok" else None
        return self._centre_cache[key]

    def changed(self) -> None:
        """Forget what was computed from the particles (after they moved)."""
        self._version += 1
        self._centre_cache.clear()
        self._accept_cache.clear()
        self._model = None
        self._c0_cache = None

    def _c0(self) -> dict[str, np.ndarray]:
        if self._c0_cache is None:
            self._c0_cache = {k: np.array([x]) for k, x in self.centre_values().items()}
        return self._c0_cache

    @property
    def model(self) -> SimModel:
        if self._model is None:
            self._model = SimModel(self.profile())
        return self._model

    # --- learning --------------------------------------------------------------------------
    def observe(self, config: ServerConfig, record: TrialFacts) -> None:
        """Condition the belief on one trial of ``config`` (what it measured; see
        :class:`~autotune.twin._fit.Fitter`)."""
        self.observe_many([(config, record)])

    def observe_many(self, trials: Sequence[tuple[ServerConfig, TrialFacts]]) -> None:
        """Condition the belief on several trials at once (one refit: a stored study)."""
        self.observations.extend(trials)
        if trials:
            self.fitter.update()
            self.changed()

    # --- prediction ------------------------------------------------------------------------
    def predict(self, configs: Sequence[ServerConfig]) -> TwinPrediction:
        """Every particle's objective for each configuration (weighted over the load points,
        and at each point), and the crash odds."""
        v = self.values()
        c0 = self._c0()
        n = len(self.z)
        samples = np.full((n, len(configs)), np.nan)
        points = np.full((len(self.points), n, len(configs)), np.nan)
        crash_p = np.zeros(len(configs))
        reasons: list[str | None] = []
        for j, raw in enumerate(configs):
            config = self.model.resolve(raw)
            kinds, text = crash_kinds(self.layout, self.proxy, v, config)
            crashed = kinds != ""
            crash_p[j] = float(self.weights[crashed].sum())
            reasons.append(self._reason(kinds, text))
            if crashed.all():
                continue
            total = np.zeros(n)
            for k, (workload, weight) in enumerate(self.points):
                at = self._values_at(config, workload, v, c0)
                points[k, ~crashed, j] = at[~crashed]
                total += weight * at
            samples[~crashed, j] = total[~crashed]
        return TwinPrediction(samples, self.weights.copy(), crash_p, reasons, points)

    def _reason(self, kinds: np.ndarray, text: Mapping[str, str]) -> str | None:
        best, weight = None, 0.0
        for kind in set(kinds) - {""}:
            w = float(self.weights[kinds == kind].sum())
            if w > weight:
                best, weight = kind, w
        if best is None:
            return None
        return f"{best}: {text.get(best, best)} (the twin's odds: {weight:.0%})"

    def _values_at(
        self,
        config: ServerConfig,
        workload: WorkloadSpec,
        v: Mapping[str, np.ndarray],
        c0: Mapping[str, np.ndarray],
    ) -> np.ndarray:
        """Every particle's figure: the centre's exact answer, moved by the particle's
        coefficients through the rate's slope at the centre (the Laplace approximation the fit
        makes: log-linear in the coefficients near the centre)."""
        del v, c0
        load = LoadShape.of(workload, max_running_of(self.layout, config))
        exact = self.centre_value(config, workload, load)
        if exact is None:
            return np.full(len(self.z), np.nan)
        names = rate_names(self.layout, config)
        idx = [self.layout.index(n) for n in names]
        z0 = self.centre_z()
        h = 1e-3
        rows = np.tile(z0, (len(idx) + 1, 1))
        rows[np.arange(1, len(idx) + 1), idx] += h
        acc = None
        if config.speculative:
            acc0, slope = self.accept_linear(config)
            acc = np.clip(acc0 + (rows[:, self._acc_idx] - z0[self._acc_idx]) @ slope, 1.0, None)
        rates = np.log(self.proxy.rate(values_of(self.layout, rows), config, load, acc))
        grad = (rates[1:] - rates[0]) / h
        log_ratio = (self.z[:, idx] - z0[idx]) @ grad
        ratio = np.exp(log_ratio)
        return np.asarray(exact / ratio if self.minimize else exact * ratio)

    # --- the centre's exact answers --------------------------------------------------------
    def centre_value(
        self, config: ServerConfig, workload: WorkloadSpec, load: LoadShape | None = None
    ) -> float | None:
        """The objective the simulator gives ``config`` on the centre profile (a crash of the
        centre is answered on the same box with room to start: the value if it started)."""
        load = load or LoadShape.of(workload, max_running_of(self.layout, config))
        key = self._perf_key(config, workload, load)
        if key not in self._centre_cache:
            self._centre_cache[key] = self._exact(config, workload)
        return self._centre_cache[key]

    def _perf_key(self, config: ServerConfig, workload: WorkloadSpec, load: LoadShape) -> Any:
        """Configurations that the simulator serves alike: a KV pool that holds every request
        in flight and a graph batch that covers the batch change nothing beyond that."""
        c0 = self._c0()
        kv = float(self.proxy.memory(c0, config)["kv_tokens"][0])
        fraction = -1.0 if kv >= load.ample_kv_tokens else config.mem_fraction_static
        bs = -1 if max_bs_of(self.layout, config) >= load.batch else config.cuda_graph_max_bs
        return (config.replace(mem_fraction_static=fraction, cuda_graph_max_bs=bs), workload)

    def _exact(self, config: ServerConfig, workload: WorkloadSpec) -> float | None:
        model = self.model
        verdict = model.evaluate(config, workload)
        if verdict.status != "ok":
            roomy = self.layout.profile(
                {
                    **self.centre_values(),
                    "activation_gib": 0.0,
                    "graph_base_gib": 0.0,
                    "graph_gib_per_token": 0.0,
                },
                name="twin",
            )
            model = SimModel(roomy)
            verdict = model.evaluate(config, workload)
            fraction = config.mem_fraction_static
            while verdict.status == "oom_kv_pool" and fraction is not None and fraction < 0.95:
                fraction = min(0.95, fraction + 0.05)
                verdict = model.evaluate(config.replace(mem_fraction_static=fraction), workload)
            if verdict.status != "ok":
                return None
        value = getattr(verdict, self.metric, None)
        if value is None:
            value = verdict.details.get(self.metric)
        return None if value is None else float(value)

    # --- acceptance ------------------------------------------------------------------------
    @property
    def _acc_idx(self) -> list[int]:
        return [self.layout.index(n) for n in ACCEPTANCE_NAMES]

    def accept_linear(self, config: ServerConfig) -> tuple[float, np.ndarray]:
        """The centre's expected accept length of ``config``'s tree, and its slope in each
        acceptance coefficient (on the fitting scale)."""
        steps = config.speculative_num_steps or 1
        topk = config.speculative_eagle_topk or 1
        n_draft = config.speculative_num_draft_tokens or (steps + 1)
        key = (steps, topk, n_draft)
        if key not in self._accept_cache:
            z0 = self.centre_z()
            base = accept_length(self.layout, z0, steps, topk, n_draft)
            slope = np.zeros(len(ACCEPTANCE_NAMES))
            for k, i in enumerate(self._acc_idx):
                z = z0.copy()
                z[i] += 0.01
                slope[k] = (accept_length(self.layout, z, steps, topk, n_draft) - base) / 0.01
            self._accept_cache[key] = (base, slope)
        return self._accept_cache[key]
