"""The search space of a study: what is tuned, what is fixed, what is measured, what runs first."""

from __future__ import annotations

import hashlib
import json
import math
import textwrap
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from autotune._document import Section, suggest
from autotune._knobs import SPECULATIVE_NUMBERS, ServerConfig
from autotune._slo import LIMIT_KEYS, RequestLimits
from autotune._workload import WorkloadSpec
from autotune.engines import EngineSpec, engine_class
from autotune.space._confirm import ConfirmSpec
from autotune.space._loads import LoadPoint, parse_loads, weighted_mean
from autotune.space._params import ParamSpec, same_value

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

#: Metrics an objective or a constraint may name, with the direction that is better: the
#: throughputs, acceptance, goodput (needs ``objective.slo``) and bench_serving's latency
#: figures (``<ttft|tpot|itl|e2e>_<mean|median|p90|p99>_ms``).
METRICS: Mapping[str, str] = {
    "output_tok_s": "maximize",
    "total_tok_s": "maximize",
    "request_throughput": "maximize",
    "goodput": "maximize",
    "accept_length": "maximize",
    **{
        f"{family}_{stat}_ms": "minimize"
        for family in ("ttft", "tpot", "itl", "e2e")
        for stat in ("mean", "median", "p90", "p99")
    },
}
SCORES = ("median", "conservative")
_FINGERPRINT_VERSION = 1
#: The longest description a space may carry, and the part of it a summary shows.
MAX_DESCRIPTION_CHARS = 20_000
SHOWN_DESCRIPTION_CHARS = 2_000


@dataclass(frozen=True)
class ConstraintSpec:
    """A ceiling (``max``) and/or floor (``min``) on one metric."""

    metric: str
    max: float | None = None
    min: float | None = None

    def violation(self, value: float | None) -> float:
        """How far ``value`` is outside the bounds, relative to the bound: <= 0 is feasible.

        A missing measurement (``None`` or NaN) counts as infeasible (1.0).
        """
        if value is None or math.isnan(value):
            return 1.0
        worst = -math.inf
        if self.max is not None:
            worst = max(worst, (value - self.max) / (abs(self.max) or 1.0))
        if self.min is not None:
            worst = max(worst, (self.min - value) / (abs(self.min) or 1.0))
        return worst

    def describe(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f"{self.metric} >= {self.min:g}")
        if self.max is not None:
            parts.append(f"{self.metric} <= {self.max:g}")
        return " and ".join(parts)


@dataclass(frozen=True)
class ObjectiveSpec:
    """What a trial is scored by: a metric, its direction, how repeats are combined.

    ``score`` ``median`` takes the median over the workload's repeats; ``conservative`` takes
    ``median - mad_k * MAD`` when maximising (``+`` when minimising), so a noisy configuration
    does not win on one lucky run.

    Several objectives (``metrics``, each with its direction in ``directions``) make a
    multi-objective study; ``metric`` and ``direction`` are always the first one's (the
    speed-up, the early stop and the benchmark's optimum follow it). ``slo``: the per-request
    limits that ``goodput`` counts against.
    """

    metric: str = "output_tok_s"
    direction: str = "maximize"
    score: str = "median"
    mad_k: float = 1.0
    constraints: tuple[ConstraintSpec, ...] = ()
    metrics: tuple[str, ...] = ()
    directions: tuple[str, ...] = ()
    slo: RequestLimits | None = None

    def __post_init__(self) -> None:
        if not self.metrics:
            object.__setattr__(self, "metrics", (self.metric,))
            object.__setattr__(self, "directions", (self.direction,))

    @property
    def multi(self) -> bool:
        """Several objectives: a multi-objective study."""
        return len(self.metrics) > 1

    def fingerprint_body(self) -> dict[str, Any]:
        """The objective as the space's fingerprint hashes it (a single objective without
        ``slo`` hashes as it did before several objectives and limits existed)."""
        body = asdict(self)
        for key in ("metrics", "directions", "slo"):
            body.pop(key)
        if not self.loads:  # (a space without a load mix hashes as before load mixes)
            body.pop("loads")
        if self.multi:
            body["metrics"], body["directions"] = list(self.metrics), list(self.directions)
        if self.slo is not None:
            body["slo"] = self.slo.to_mapping()
        return body

    #: The load mix (``objective.loads``); empty: the workload's own load alone.
    loads: tuple[LoadPoint, ...] = ()

    def weighted(self, figures: Mapping[str, float | None]) -> float | None:
        """The objective of a trial measured at every load point: the weighted mean of its
        figures (by label), None when a point lacks one."""
        return weighted_mean(self.loads, figures)

    def describe(self) -> str:
        if self.multi:
            pairs = ", ".join(
                f"{d} {m}" for m, d in zip(self.metrics, self.directions, strict=True)
            )
            how = "medians" if self.score == "median" else "conservative scores"
            return f"{pairs} (a Pareto front; {how} over repeats)"
        text = f"{self.direction} {self.metric}"
        if self.score == "conservative":
            text += f" (conservative: median {'-' if self.direction == 'maximize' else '+'}"
            text += f" {self.mad_k:g} x MAD over repeats)"
        else:
            text += " (median over repeats)"
        if self.loads:
            mix = ", ".join(f"{p.label} {p.weight:g}" for p in self.loads)
            text += f", weighted over the load mix {mix}"
        return text


@dataclass(frozen=True)
class SearchSpace:
    """A validated space file. Build it with :func:`autotune.space.load_space`."""

    name: str
    source: str
    engine: EngineSpec
    workload: WorkloadSpec
    objective: ObjectiveSpec
    fixed: Mapping[str, Any]
    parameters: tuple[ParamSpec, ...]
    baseline: Mapping[str, Any] | None
    enqueued: tuple[Mapping[str, Any], ...] = ()
    description: str | None = None
    #: How the best candidates are re-measured after the search.
    confirm: ConfirmSpec = field(default_factory=ConfirmSpec)

    @property
    def conditional(self) -> bool:
        """Whether some parameter is only suggested under a condition."""
        return any(p.when for p in self.parameters)

    def parameter(self, name: str) -> ParamSpec | None:
        return next((p for p in self.parameters if p.name == name), None)

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Ask ``trial`` for every parameter whose condition holds, in file order."""
        values: dict[str, Any] = {}
        for param in self.parameters:
            if param.active(values):
                values[param.name] = param.suggest(trial)
        return values

    def config_for(self, params: Mapping[str, Any]) -> ServerConfig:
        """The server configuration of ``params``: fixed knobs, then params, then tp_size.

        ``params`` may come from Optuna's record of a trial; stepped floats are cleaned of
        rounding noise so that the launch carries the value of the grid.
        """
        specs = {p.name: p for p in self.parameters}
        cleaned = {k: specs[k].normalise(v) if k in specs else v for k, v in params.items()}
        values = {**self.fixed, **cleaned, "tp_size": self.engine.tp_size}
        return ServerConfig.from_params(values, source=self.source)

    def baseline_config(self) -> ServerConfig:
        """The no-speculation baseline: fixed knobs that do not speculate, then the baseline's."""
        off = {"speculative_algorithm", *SPECULATIVE_NUMBERS}
        values = {k: v for k, v in self.fixed.items() if k not in off}
        values.update(self.baseline or {})
        values["tp_size"] = self.engine.tp_size
        return ServerConfig.from_params(values, source=self.source)

    def distributions(self) -> dict[str, BaseDistribution]:
        return {p.name: p.distribution() for p in self.parameters}

    def fingerprint(self) -> str:
        """A stable hash of parameters, fixed knobs, objective and workload.

        Two loads of the same file agree; changing a range, a fixed knob, the objective or the
        workload changes it. The engine section (ports, paths, timeouts) does not take part.
        """
        body = {
            "version": _FINGERPRINT_VERSION,
            "parameters": [
                {
                    **asdict(p),
                    "when": None if p.when is None else {k: list(v) for k, v in p.when.items()},
                }
                for p in self.parameters
            ],
            "fixed": dict(sorted(self.fixed.items())),
            "objective": self.objective.fingerprint_body(),
            "workload": self.workload.to_mapping(),
        }
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def sample(self, n: int, seed: int = 0) -> list[dict[str, Any]]:
        """``n`` random proposals (parameters only), as a random sampler would make them."""
        import optuna

        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            study = optuna.create_study(
                sampler=optuna.samplers.RandomSampler(seed=seed), direction="maximize"
            )
            out = []
            for _ in range(n):
                trial = study.ask()
                out.append(self.suggest(trial))
                study.tell(trial, 0.0)
        finally:
            optuna.logging.set_verbosity(verbosity)
        return out

    def size(self) -> int | None:
        """How many distinct configurations the space holds; None when a range is continuous."""
        referenced = {k for p in self.parameters if p.when for k in p.when}

        def count(i: int, chosen: dict[str, Any]) -> int | None:
            if i == len(self.parameters):
                return 1
            param = self.parameters[i]
            if not param.active(chosen):
                return count(i + 1, chosen)
            values = param.values()
            if values is None:
                return None
            if param.name not in referenced:
                rest = count(i + 1, chosen)
                return None if rest is None else len(values) * rest
            # Later parameters only ask whether this value is one their ``when`` lists: the
            # values no condition names behave alike and are counted once (a long int range).
            named = [v for p in self.parameters if p.when for v in p.when.get(param.name, ())]
            total = 0
            alike = 0
            for value in values:
                if not any(same_value(value, v) for v in named):
                    alike += 1
                    if alike > 1:
                        continue
                sub = count(i + 1, {**chosen, param.name: value})
                if sub is None:
                    return None
                total += sub
            if alike > 1:
                unnamed = next(v for v in values if not any(same_value(v, n) for n in named))
                sub = count(i + 1, {**chosen, param.name: unnamed})
                total += (alike - 1) * (sub or 0)
            return total

        return count(0, {})

    def summary(self) -> str:
        """A human summary: engine, workload, objective, parameters, fixed knobs, first trials."""
        e, w = self.engine, self.workload
        lines = [f"space {self.name} ({self.source})"]
        if self.description:
            text = self.description.strip()
            if len(text) > SHOWN_DESCRIPTION_CHARS:  # wrapping is slow on a long text
                text = text[:SHOWN_DESCRIPTION_CHARS] + " [...]"
            lines.append(textwrap.fill(text, 96, initial_indent="  ", subsequent_indent="  "))
        engine = f"engine:     {e.kind}"
        note = engine_class(e.kind).spec_note(e)
        if note:
            engine += f" ({note})"
        lines.append(f"{engine}, model {e.model_path}, tp {e.tp_size}")
        if e.draft_model_path:
            lines.append(f"            draft {e.draft_model_path}")
        lines.append(f"workload:   {_describe_workload(w)}")
        lines.append(f"objective:  {self.objective.describe()}")
        for c in self.objective.constraints:
            lines.append(f"            subject to {c.describe()}")
        if self.objective.slo is not None:
            slo = self.objective.slo.describe()
            lines.append(f"            goodput counts the requests within {slo}")
        width = max(len(p.name) for p in self.parameters)
        lines.append(f"parameters: {len(self.parameters)}")
        for p in self.parameters:
            lines.append(f"  {p.name:<{width}}  {p.describe()}")
        if self.fixed:
            lines.append("fixed:      " + _knobs(self.fixed))
        if self.baseline is None:
            lines.append("baseline:   off")
        else:
            extra = f", {_knobs(self.baseline)}" if self.baseline else ""
            lines.append(f"baseline:   trial 0, no speculation{extra}")
        for i, params in enumerate(self.enqueued):
            lines.append(
                f"enqueued:   {_knobs(params)}" if i == 0 else f"            {_knobs(params)}"
            )
        lines.append(f"confirm:    {self.confirm.describe()}")
        size = self.size()
        lines.append(
            "size:       continuous (a float range without a step)"
            if size is None
            else f"size:       {size:,} distinct configurations"
        )
        return "\n".join(lines)


def parse_objective(sec: Section) -> ObjectiveSpec:
    """Read the ``objective`` section (every key optional: output_tok_s, maximised)."""
    sec.check_keys(
        (
            "metric",
            "direction",
            "metrics",
            "directions",
            "score",
            "mad_k",
            "constraints",
            "slo",
            "loads",
        )
    )
    metrics, directions = _objectives(sec)
    score = sec.get("score", "median")
    if score not in SCORES:
        raise sec.error(
            f"score {score!r} is not allowed", "score", hint="allowed: " + ", ".join(SCORES)
        )
    slo = _slo(sec)
    raw = sec.get("constraints") or []
    if not isinstance(raw, list):
        raise sec.error(
            "constraints must be a list",
            "constraints",
            hint="e.g. - {metric: ttft_p99_ms, max: 30000}",
        )
    constraints: list[ConstraintSpec] = []
    for i, item in enumerate(raw):
        path = (*sec.path, "constraints", i)
        if not isinstance(item, dict):
            raise sec.doc.error(
                "a constraint must be a mapping", path, hint="{metric: ttft_p99_ms, max: 30000}"
            )
        c = Section(sec.doc, path, item)
        c.check_keys(("metric", "max", "min"))
        name = c.require("metric")
        if not isinstance(name, str) or name not in METRICS:
            raise c.error(f"unknown metric {name!r}", "metric", hint=suggest(str(name), METRICS))
        if any(seen.metric == name for seen in constraints):
            raise c.error(
                f"a second constraint on {name}", "metric", hint="give max and min in one"
            )
        low, high = c.number("min", None, positive=False), c.number("max", None, positive=False)
        if low is None and high is None:
            raise c.error("a constraint needs max or min (or both)", hint="e.g. max: 30000")
        if low is not None and high is not None and low >= high:
            raise c.error(f"min ({low:g}) must be below max ({high:g})", "min")
        if name == "goodput" and slo is None:
            raise c.error(
                "a goodput constraint needs the per-request limits objective.slo",
                "metric",
                hint="e.g. slo: {ttft_ms: 2000, tpot_ms: 50}",
            )
        constraints.append(ConstraintSpec(name, max=high, min=low))
    mad_k = sec.number("mad_k", 1.0)
    return ObjectiveSpec(
        metrics[0],
        directions[0],
        score,
        mad_k,
        tuple(constraints),
        metrics=tuple(metrics),
        directions=tuple(directions),
        slo=slo,
        loads=parse_loads(sec),
    )


def _objectives(sec: Section) -> tuple[list[str], list[str]]:
    """The objective metrics and their directions: ``metric`` (+ ``direction``) or ``metrics``
    (+ ``directions``, each defaulting to the metric's better direction)."""
    if "metrics" in sec.data and ("metric" in sec.data or "direction" in sec.data):
        key = "metric" if "metric" in sec.data else "direction"
        raise sec.error(
            f"give either {key} or metrics, not both",
            key,
            hint="metrics: [output_tok_s, tpot_p99_ms] lists several objectives",
        )
    if "directions" in sec.data and "metrics" not in sec.data:
        raise sec.error("directions without metrics", "directions", hint="use direction")
    if "metrics" in sec.data:
        raw = sec.get("metrics")
        if not isinstance(raw, list) or not raw:
            raise sec.error(
                "metrics must be a non-empty list",
                "metrics",
                hint="e.g. [output_tok_s, tpot_p99_ms]",
            )
        metrics = []
        for i, name in enumerate(raw):
            if not isinstance(name, str) or name not in METRICS:
                raise sec.doc.error(
                    f"unknown metric {name!r}",
                    (*sec.path, "metrics", i),
                    hint=suggest(str(name), METRICS),
                )
            if name in metrics:
                raise sec.doc.error(f"{name} is listed twice", (*sec.path, "metrics", i))
            metrics.append(name)
        given = sec.get("directions")
        if given is None:
            directions = [METRICS[m] for m in metrics]
        elif not isinstance(given, list) or len(given) != len(metrics):
            raise sec.error(
                f"directions must be a list of {len(metrics)} (one per metric)", "directions"
            )
        else:
            directions = list(given)
        for i, d in enumerate(directions):
            if d not in ("maximize", "minimize"):
                raise sec.doc.error(
                    f"direction {d!r} is not allowed",
                    (*sec.path, "directions", i),
                    hint="allowed: maximize, minimize",
                )
        return metrics, directions
    metric = sec.get("metric", "output_tok_s")
    if not isinstance(metric, str) or metric not in METRICS:
        raise sec.error(f"unknown metric {metric!r}", "metric", hint=suggest(str(metric), METRICS))
    direction = sec.get("direction", METRICS[metric])
    if direction not in ("maximize", "minimize"):
        raise sec.error(
            f"direction {direction!r} is not allowed",
            "direction",
            hint="allowed: maximize, minimize",
        )
    return [metric], [direction]


def _slo(sec: Section) -> RequestLimits | None:
    """The per-request limits of ``objective.slo`` (``None`` when absent); ``goodput`` as an
    objective needs them."""
    raw = sec.get("slo")
    wants = "goodput" in (sec.get("metrics") or [sec.get("metric")])
    if raw is None:
        if wants:
            raise sec.error(
                "goodput needs the per-request limits objective.slo",
                "metrics" if "metrics" in sec.data else "metric",
                hint="e.g. slo: {ttft_ms: 2000, tpot_ms: 50}",
            )
        return None
    if not isinstance(raw, dict):
        raise sec.error(
            "slo must be a mapping", "slo", hint="e.g. slo: {ttft_ms: 2000, tpot_ms: 50}"
        )
    limits = Section(sec.doc, (*sec.path, "slo"), raw)
    limits.check_keys(tuple(LIMIT_KEYS))
    values = {key: limits.number(key, None) for key in LIMIT_KEYS}
    if all(v is None for v in values.values()):
        raise limits.error("slo needs at least one limit", hint="keys: " + ", ".join(LIMIT_KEYS))
    return RequestLimits(**values)


def _describe_workload(w: WorkloadSpec) -> str:
    def length(d: Any) -> str:
        if d.distribution == "fixed":
            return f"{d.mean}"
        return f"{d.mean} ({d.distribution}, spread {d.spread:g})"

    source = "synthetic" if w.source == "synthetic" else f"{w.source} {w.path}"
    load = f"concurrency {w.concurrency}"
    if w.request_rate is not None:
        load = f"{w.request_rate:g} req/s, at most {w.concurrency} at once"
    return (
        f"{w.name}: {source}, {w.num_prompts} prompts (+{w.warmup} warm-up) x {w.repeats} "
        f"repeat(s), {load}, input {length(w.input_len)} / output {length(w.output_len)} "
        f"tokens, temperature {w.temperature:g}, api {w.api}"
    )


def _knobs(values: Mapping[str, Any]) -> str:
    def show(v: Any) -> str:
        if v is None:
            return "auto"
        if isinstance(v, bool):
            return "true" if v else "false"
        return f"{v:.12g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{k}={show(v)}" for k, v in values.items())
