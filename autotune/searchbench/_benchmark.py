"""``autotune bench search``: how fast each strategy finds a near-best configuration.

Whole studies run the loop of ``autotune study start`` against the simulator's model in process
(no server processes; see :mod:`autotune.searchbench._strategies`), each trial charged the GPU
time it would have cost on the profiled hardware. The table gives, per strategy,
the median over seeds of the trials and GPU hours needed to reach 98% of the space's true optimum
(found by evaluating every configuration), and the share of GPU time spent on crashed trials.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune._errors import ConfigError
from autotune.engines import engine_class
from autotune.searchbench._bookkeeping import (
    StrategySummary,
    StudyScore,
    quartiles,
    score_study,
    summarise,
)
from autotune.searchbench._optimum import Optimum, find_optimum
from autotune.searchbench._oracle import Oracle
from autotune.searchbench._parallel import fork_map
from autotune.searchbench._strategies import ABLATIONS, STRATEGIES, run_study
from autotune.sim import SimModel, load_profile
from autotune.space import SearchSpace, load_space
from autotune.study._setup import make_engine

log = logging.getLogger("autotune.searchbench")


@dataclass(frozen=True)
class SearchBenchResult:
    profile: str
    space: str
    budget: int
    seeds: int
    optimum: Optimum
    summaries: tuple[StrategySummary, ...]
    scores: tuple[StudyScore, ...]
    seconds: float
    #: The space's constraints, as it describes them.
    constraints: tuple[str, ...] = ()
    #: Whether the studies ran the space's own configurations first: (True,), (False,), or
    #: both (each strategy's studies without them are the rows named ``STRATEGY`` + :data:`BARE`);
    #: () where the space enqueues none.
    enqueued: tuple[bool, ...] = (True,)
    #: What the ``twin`` strategy's prior was wrong by (group, factor).
    twin_errors: tuple[tuple[str, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "space": self.space,
            "budget": self.budget,
            "seeds": self.seeds,
            "optimum": dataclasses.asdict(self.optimum),
            "constraints": list(self.constraints),
            "enqueued": list(self.enqueued),
            "twin_errors": dict(self.twin_errors),
            "strategies": {s.strategy: s.to_dict() for s in self.summaries},
            "studies": [s.to_dict() for s in self.scores],
            **(
                {
                    "load_winners": [
                        {"strategy": s.strategy, "seed": s.seed, "shares": s.load_shares}
                        for s in self.scores
                    ]
                }
                if self.optimum.loads
                else {}
            ),
            "wall_s": round(self.seconds, 1),
        }


def prepare(space_path: str, profile: str | None) -> tuple[SearchSpace, SimModel]:
    """The space (its simulator profile replaced by ``profile``, its engine by the one that
    simulates it) and the model with that engine's rules."""
    space = load_space(space_path)
    name = profile or space.engine.sim.profile
    sim = dataclasses.replace(space.engine.sim, profile=name)
    kind, rules = engine_class(space.engine.kind).simulator
    engine = dataclasses.replace(space.engine, kind=kind, sim=sim)
    space = dataclasses.replace(space, engine=engine)
    return space, SimModel(load_profile(name), engine=rules)


def run_search_benchmark(
    space_path: str,
    *,
    profile: str | None = None,
    strategies: Sequence[str] = STRATEGIES,
    seeds: int = 10,
    budget: int = 40,
    noise: float = 0.02,
    on_study: Callable[[str, int], None] | None = None,
    jobs: int = 1,
    twin_errors: Mapping[str, float] | None = None,
    enqueued: bool | Sequence[bool] = True,
) -> SearchBenchResult:
    """Every strategy's studies over ``seeds`` seeds, scored against the space's true optimum;
    ``jobs``: worker processes for the optimum's evaluations and the studies; ``twin_errors``:
    what the ``twin`` strategy's prior is wrong by; ``enqueued=False``: every study without
    the space's own configurations; ``(True, False)``: each strategy both ways, against the one
    optimum (the studies without them are summarised as ``STRATEGY`` + :data:`BARE`)."""
    unknown = [s for s in strategies if s not in STRATEGIES + ABLATIONS]
    if unknown:
        raise ConfigError(
            f"unknown strategy {unknown[0]!r}",
            hint="choose from: " + ", ".join(STRATEGIES + ABLATIONS),
        )
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    started = time.monotonic()
    space, model = prepare(space_path, profile)
    oracle = Oracle.for_space(model, space)
    engine = make_engine(space)
    optimum = find_optimum(space, oracle, engine, jobs=jobs)
    log.info("optimum %.2f at %s", optimum.value, optimum.params)
    maximize = space.objective.direction == "maximize"
    modes = (enqueued,) if isinstance(enqueued, bool) else tuple(dict.fromkeys(enqueued))
    if not space.enqueued:  # nothing to leave out: each strategy runs once (recorded as ())
        modes = ()
    both = len(modes) > 1
    tasks = [
        (strategy, seed, mode)
        for mode in modes or (True,)
        for strategy in strategies
        for seed in range(seeds)
    ]
    with tempfile.TemporaryDirectory(prefix="autotune-searchbench-") as folder:

        def study(task: tuple[str, int, bool]) -> StudyScore:
            strategy, seed, mode = task
            label = strategy if mode or not both else strategy + BARE
            if on_study is not None:
                on_study(label, seed)
            trace = run_study(
                space,
                engine,
                oracle,
                strategy,
                seed,
                budget,
                folder=Path(folder),
                noise=noise,
                twin_errors=twin_errors,
                enqueued=mode,
            )
            score = score_study(
                trace, optimum.value, oracle.gpus, maximize=maximize, load_optima=optimum.loads
            )
            return dataclasses.replace(score, strategy=label)

        scores = fork_map(study, tasks, jobs)
    labels = list(dict.fromkeys(s.strategy for s in scores))
    summaries = [summarise([s for s in scores if s.strategy == name]) for name in labels]
    return SearchBenchResult(
        model.profile.name,
        space.source,
        budget,
        seeds,
        optimum,
        tuple(summaries),
        tuple(scores),
        time.monotonic() - started,
        tuple(c.describe() for c in space.objective.constraints),
        modes,
        tuple(sorted((twin_errors or {}).items())),
    )


#: The suffix of a strategy's rows run without the space's enqueued configurations, where the
#: benchmark ran each strategy both ways.
BARE = "/bare"


def _enqueued_words(modes: tuple[bool, ...]) -> str:
    if not modes:
        return ", the space enqueues no configurations (its studies are the same with or without)"
    if modes == (False,):
        return ", without the space's enqueued configurations"
    if len(modes) > 1:
        return (
            f", each strategy with and without the space's enqueued configurations (rows "
            f"'STRATEGY{BARE}': without them; the baseline and SGLang's automatic choice run in "
            "both)"
        )
    return ""


def format_table(result: SearchBenchResult) -> str:
    opt = result.optimum
    lines = [
        f"profile {result.profile}, space {result.space}: {result.seeds} seeds x "
        f"{result.budget} trials" + _enqueued_words(result.enqueued),
        f"optimum {opt.value:.2f} at {opt.params}",
        f"space: {opt.evaluated} configurations; "
        + ", ".join(f"{k} {v}" for k, v in sorted(opt.statuses.items()))
        + f"; {opt.near_98} within 98% of the optimum",
    ]
    for label, value in opt.loads.items():
        lines.append(f"optimum at {label}: {value:.2f} at {opt.load_params[label]}")
    loads = bool(opt.loads)
    width = max(12, *(len(s.strategy) for s in result.summaries))
    lines += [
        "",
        f"{'strategy':<{width}} {'trials to 95%':>13} {'trials to 98%':>13} {'GPU h to 98%':>12} "
        f"{'reached 98%':>11} {'found 98%':>9} {'crash share':>11} {'final':>7} {'GPU h':>8}"
        + (f" {'loads 98%':>9}" if loads else ""),
    ]

    def num(v: float | None, fmt: str) -> str:
        return "never" if v is None else format(v, fmt)

    for s in result.summaries:
        lines.append(
            f"{s.strategy:<{width}} {num(s.median_trials_to_95, '.1f'):>13} "
            f"{num(s.median_trials_to_98, '.1f'):>13} {num(s.median_gpu_hours_to_98, '.1f'):>12} "
            f"{s.reached_98:>11.0%} {s.found_98:>9.0%} {s.median_crash_share:>11.1%} "
            f"{s.median_final:>7.1%} "
            f"{s.median_gpu_hours:>8.1f}"
            + (f" {f'{s.loads_within_98}/{s.seeds}':>9}" if loads else "")
        )
    lines += _misses(result)
    twin = any(s.strategy.removesuffix(BARE) in ("twin", "default") for s in result.summaries)
    if twin:
        wrong = ", ".join(f"{k} x{v:g}" for k, v in result.twin_errors) or "none"
        lines.append(
            f"the twin (of twin, and of default where it chooses the twin): its prior from the "
            f"box's knowable facts, wrong by: {wrong}"
        )
    if result.constraints:
        lines += _constraint_lines(result)
    lines.append("")
    lines.append(
        "medians over seeds; GPU hours = time the GPUs were held (start-up to ready or crash, "
        "benchmark, stop) x GPUs, confirmation included; final = the best measured "
        "configuration's share of the optimum after the budget; found 98% = seeds that measured "
        "a configuration within 98% at all (reached 98%: and it was the best measured)"
    )
    if loads:
        lines.append(
            "loads 98% = seeds in which the winner at every load point (the candidate the "
            "confirmation found best there; without one, the configuration measured best there) "
            "is within 98% of that point's optimum (every configuration of the space evaluated "
            "at that load, noise 0)"
        )
        lines += _load_misses(result)
    lines += _confirmation_table(result)
    return "\n".join(lines)


def _misses(result: SearchBenchResult) -> list[str]:
    """Per strategy that reached 98% in at least half of its seeds but not in all, the seeds
    that never did (the exceptions worth a look): the best measured configuration's share of
    the optimum where each ended, after how many trials, what its confirmation concluded, and
    the trial that measured a configuration within 98% where one did (the search found it; its
    measurement fell below a luckier one's)."""
    lines = []
    for s in result.summaries:
        if s.reached_98 < 0.5 or s.reached_98 == 1.0:
            continue
        missed = [
            f"seed {score.seed} ({score.final:.1%} after "
            f"{len(score.history)} trials"
            + (f", verdict {score.verdict}" if score.verdict is not None else "")
            + (
                f"; it measured one within 98% in {score.found_98} trials, lower than a luckier one"
                if score.found_98 is not None
                else ""
            )
            + ")"
            for score in result.scores
            if score.strategy == s.strategy and score.trials_to[0.98] is None
        ]
        lines.append(f"  {s.strategy} never reached 98% in: " + "; ".join(missed))
    return lines


def _load_misses(result: SearchBenchResult) -> list[str]:
    """Per strategy, the seeds whose winner at some load point is under 98% of that point's
    optimum, with each such point's share."""
    lines = []
    for s in result.summaries:
        missed = [
            f"seed {score.seed} ("
            + ", ".join(
                f"{label} {share:.1%}"
                for label, share in score.load_shares.items()
                if share < 0.98 - 1e-12
            )
            + ")"
            for score in result.scores
            if score.strategy == s.strategy and score.loads_within_98 is False
        ]
        if missed:
            lines.append(f"  {s.strategy} under 98% at a load: " + "; ".join(missed))
    return lines


def _constraint_lines(result: SearchBenchResult) -> list[str]:
    """What the constraints did: whether they bind, whether the final best meets them at noise
    0, and the share of trials measured over a limit in each half of the studies."""
    opt = result.optimum
    lines = ["", "constraints: " + "; ".join(result.constraints)]
    if opt.unconstrained_value is not None:
        binds = "binds" if abs(opt.unconstrained_value - opt.value) > 1e-9 else "does not bind"
        lines.append(
            f"  best without them {opt.unconstrained_value:.2f} (the limit {binds}); "
            f"{opt.violating} measured configurations break one"
        )
    lines.append(
        f"  {'strategy':<12} {'best meets at noise 0':>22} {'over a limit, 1st half':>23} "
        f"{'2nd half':>9}"
    )
    for s in result.summaries:
        lines.append(
            f"  {s.strategy:<12} {f'{s.final_feasible} of {s.seeds} seeds':>22} "
            f"{s.violation_share_first_half:>23.1%} {s.violation_share_second_half:>9.1%}"
        )
    lines.append(
        "  (the best is the best trial measured within the limits; shares: trials measured over "
        "a limit, mean over seeds)"
    )
    return lines


def _confirmation_table(result: SearchBenchResult) -> list[str]:
    confirmed = [s for s in result.summaries if s.verdicts is not None]
    if not confirmed:
        return []
    width = max(12, *(len(s.strategy) for s in confirmed))
    lines = [
        "",
        "confirmation: the best candidates and the baseline re-measured interleaved; the "
        "choice judged at noise 0 against the better of the optimum and the baseline",
        f"{'strategy':<{width}} {'confirmed':>9} {'within 98%':>10} {'wrong pays':>10} "
        f"{'confirm GPU h':>13}  verdicts",
    ]
    for s in confirmed:
        kinds = ", ".join(f"{k} {v}" for k, v in (s.verdicts or {}).items())
        lines.append(
            f"{s.strategy:<{width}} {s.median_confirmed or 0.0:>9.1%} "
            f"{s.confirmed_98 or 0.0:>10.0%} "
            f"{s.wrong_pays:>10} {s.median_confirm_gpu_hours or 0.0:>13.1f}  {kinds}"
        )
    limited = [s for s in confirmed if s.confirmed_feasible is not None and result.constraints]
    for s in limited:
        lines.append(
            f"  {s.strategy}: the confirmed choice meets the limits at noise 0 in "
            f"{s.confirmed_feasible} of {s.seeds} seeds"
        )
    return lines


def write_outputs(result: SearchBenchResult, folder: Path) -> list[Path]:
    """search.json, search.txt and the history figure (search.html; search.png too when
    matplotlib is installed)."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"search-{result.profile}"
    paths = [folder / f"{stem}.json", folder / f"{stem}.txt"]
    paths[0].write_text(json.dumps(result.to_dict(), indent=2, default=str))
    paths[1].write_text(format_table(result) + "\n")
    paths += _figures(result, folder / stem)
    return paths


def _figures(result: SearchBenchResult, stem: Path) -> list[Path]:
    import plotly.graph_objects as go

    fig = go.Figure()
    out = []
    series = {}
    for summary in result.summaries:
        scores = [s for s in result.scores if s.strategy == summary.strategy]
        q = quartiles(scores, result.budget)
        series[summary.strategy] = q
        xs = list(range(1, len(q) + 1))
        fig.add_trace(go.Scatter(x=xs, y=[v[1] for v in q], name=summary.strategy, mode="lines"))
        fig.add_trace(
            go.Scatter(
                x=xs + xs[::-1],
                y=[v[2] for v in q] + [v[0] for v in q][::-1],
                fill="toself",
                opacity=0.15,
                line={"width": 0},
                showlegend=False,
                name=f"{summary.strategy} quartiles",
            )
        )
    fig.update_layout(
        title=f"{result.profile}: best configuration found, share of the optimum "
        f"(median and quartiles over {result.seeds} seeds)",
        xaxis_title="trial",
        yaxis_title="share of the optimum",
    )
    html = stem.parent / f"{stem.name}.html"
    fig.write_html(str(html), include_plotlyjs="cdn")
    out.append(html)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return out
    fig2, ax = plt.subplots(figsize=(8, 5))
    for name, q in series.items():
        xs = list(range(1, len(q) + 1))
        ax.plot(xs, [v[1] for v in q], label=name)
        ax.fill_between(xs, [v[0] for v in q], [v[2] for v in q], alpha=0.15)
    ax.axhline(0.98, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel("trial")
    ax.set_ylabel("share of the optimum")
    finals = [q[-1][1] for q in series.values() if q and q[-1][1] > 0]
    low = max(0.0, min(0.9, min(finals, default=0.0) - 0.1))
    ax.set_ylim(low, 1.01)
    ax.set_title(f"{result.profile}: median and quartiles over {result.seeds} seeds")
    ax.legend()
    png = stem.parent / f"{stem.name}.png"
    fig2.savefig(png, dpi=110, bbox_inches="tight")
    plt.close(fig2)
    out.append(png)
    return out
