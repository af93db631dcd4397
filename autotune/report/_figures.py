"""Figures of a study (plotly): optimisation history and the crash map.

Both take a loaded :class:`optuna.Study`; they are what the review notebook shows, and plotly
figures also render in optuna-dashboard's notes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.study._record import Outcome, TrialRecord, within_limits

if TYPE_CHECKING:
    import optuna
    import plotly.graph_objects as go

#: Colours of outcomes in the figures (measured trials are blue; black: any other outcome).
OUTCOME_COLOURS: dict[Outcome, str] = {
    Outcome.OK: "#1f77b4",
    Outcome.OOM_KV_POOL: "#d62728",
    Outcome.OOM_CUDA_GRAPH: "#ff7f0e",
    Outcome.OOM_RUNTIME: "#8c564b",
    Outcome.UNSUPPORTED_ARCH: "#9467bd",
    Outcome.GRAPH_CAPTURE_OTHER: "#e377c2",
    Outcome.NCCL_ERROR: "#7f7f7f",
    Outcome.BAD_ARGS: "#bcbd22",
    Outcome.PORT_IN_USE: "#98df8a",
    Outcome.OTHER_CRASH: "#17becf",
    Outcome.TIMEOUT: "#393b79",
    Outcome.INFEASIBLE: "#aaaaaa",
}


def trials_frame(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per finished trial: number, role, outcome (an :class:`Outcome`, a ``str``),
    value, speed-up, acceptance length, start-up seconds, whether it kept the study's
    constraints, and its knobs (``knob:NAME``)."""
    from optuna.trial import TrialState

    rows = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        record = TrialRecord.from_trial(t)
        config = record.config if record.config is not None else t.params
        rows.append(
            {
                "number": t.number,
                "role": record.role,
                "outcome": record.outcome,
                "value": record.value,
                "speedup": record.speedup,
                "accept_length": record.accept_length,
                "startup_s": record.startup_s,
                "feasible": within_limits(t),
                **{f"knob:{k}": v for k, v in config.items()},
            }
        )
    return rows


def optimization_history(study: optuna.Study) -> go.Figure:
    """Objective per measured trial, the best so far (within the study's constraints), and the
    trials that were not measured as crosses below the lowest value, one colour per outcome."""
    import plotly.graph_objects as go

    rows = trials_frame(study)
    maximize = study.directions[0].name == "MAXIMIZE"  # the first objective's
    measured = [r for r in rows if r["outcome"] is Outcome.OK and r["value"] is not None]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[r["number"] for r in measured],
            y=[r["value"] for r in measured],
            mode="markers",
            name="measured",
            marker={"color": OUTCOME_COLOURS[Outcome.OK]},
        )
    )
    best: list[float] = []
    xs: list[int] = []
    current: float | None = None
    for r in sorted((r for r in measured if r["feasible"]), key=lambda r: r["number"]):
        v = float(r["value"])
        current = v if current is None else (max(current, v) if maximize else min(current, v))
        xs.append(r["number"])
        best.append(current)
    fig.add_trace(go.Scatter(x=xs, y=best, mode="lines", name="best so far", line_shape="hv"))
    floor = min((r["value"] for r in measured), default=0.0)
    for outcome in sorted({r["outcome"] for r in rows if r["outcome"] is not Outcome.OK}):
        crashed = [r for r in rows if r["outcome"] is outcome]
        fig.add_trace(
            go.Scatter(
                x=[r["number"] for r in crashed],
                y=[floor * 0.9] * len(crashed),
                mode="markers",
                marker={"symbol": "x", "color": OUTCOME_COLOURS.get(outcome, "#000000")},
                name=outcome.value,
            )
        )
    fig.update_layout(
        title=f"{study.study_name}: optimisation history",
        xaxis_title="trial",
        yaxis_title=str(study.user_attrs.get("autotune:metric", "objective")),
    )
    return fig


def crash_map(
    study: optuna.Study, x: str = "mem_fraction_static", y: str = "cuda_graph_max_bs"
) -> go.Figure:
    """Every finished trial that sets the knobs ``x`` and ``y``, there, coloured by outcome.

    Raises:
        ValueError: the study has finished trials but none sets both knobs.
    """
    import plotly.graph_objects as go

    frame = trials_frame(study)
    rows = [r for r in frame if f"knob:{x}" in r and f"knob:{y}" in r]
    if frame and not rows:
        knobs = sorted({k.removeprefix("knob:") for r in frame for k in r if k.startswith("knob:")})
        raise ValueError(
            f"no trial of {study.study_name!r} sets both {x!r} and {y!r}; "
            f"its knobs: {', '.join(knobs)}"
        )
    fig = go.Figure()
    for outcome in sorted({r["outcome"] for r in rows}):
        group = [r for r in rows if r["outcome"] is outcome]
        fig.add_trace(
            go.Scatter(
                x=[r[f"knob:{x}"] for r in group],
                y=[r[f"knob:{y}"] for r in group],
                mode="markers",
                name=outcome.value,
                text=[f"trial {r['number']}" for r in group],
                marker={"size": 10, "color": OUTCOME_COLOURS.get(outcome, "#000000")},
            )
        )
    fig.update_layout(
        title=f"{study.study_name}: outcomes by {x} and {y}", xaxis_title=x, yaxis_title=y
    )
    return fig
