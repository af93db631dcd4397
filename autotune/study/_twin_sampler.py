"""The twin-guided sampler: proposals where the box's twin expects the most improvement.

``--sampler twin`` keeps a :class:`~autotune.twin.Twin` of the box (its prior from the box's
facts: the simulator profile's knowable fields on the simulator, a facts file on a real box) and
before each proposal fits it to every finished trial of the study. It then:

* scores every speculative combination (steps, top-k, draft tokens, all-reduce mode, algorithm:
  every searched knob but the settled ones) not measured yet, by its expected improvement over
  the best measured value across the twin's particles (its uncertainty), counting only the gain
  beyond :data:`MARGIN` of it (a gain within noise is none); a combination already measured,
  queued or running is never proposed again;
* sets the settled knobs (:data:`SETTLED_KNOBS`: the CUDA-graph batch, the static memory share),
  which change nothing away from the crash edges, at the twin's safest good value for the
  combination rather than searching them;
* refuses a proposal the twin predicts to crash (odds over :data:`CRASH_ODDS`), with the twin's
  arithmetic in the debug log and the study's refusal counts, as it refuses what the engine's
  rules or the lessons of crashes rule out;
* says when to stop (:meth:`TwinSampler.stop_reason`): the best measured configuration is
  within ``stop_share`` of the twin's predicted optimum over the combinations not yet
  measured, both as the twin sees them (the incumbent's expected value, the 97.5th percentile of
  the best untried combination), so that one lucky measurement does not end the search; or the
  twin expects under :data:`STOP_GAIN` of the best from the best untried combination, beyond
  the :data:`MARGIN` of noise.

Over a load mix the report names the winner at each load point, so the twin aims at each point
alone as well as at the weighted figure: a combination's score is the largest of its expected
improvements (the weighted figure's, and each point's over the configuration measured best
there), each as a share of its best measured; each point's best few are shortlisted too; and the
search stops only once the weighted figure and every point meet the rule above.

A survey (``aim="survey"``, ``--sampler survey``) aims at the twin rather than at the optimum:
it ranks the untried combinations by how uncertain the twin is of their value (its particles'
spread over their mean, times the share of particles that start them) and stops once none is
more uncertain than :data:`SURVEY_SPREAD`. A search stops where it expects nothing better, so
its twin knows little of top-k values, all-reduce modes and draft-token counts it never needed;
a few survey trials added to the study measure exactly those, and the exported twin
(``autotune twin export``) then predicts the box there too.

The search also sets the memory knobs at their safest, so its twin knows little of where the
box's memory runs out. A survey weighs the two unknowns over :data:`PROBES` random
configurations of the space that the twin does not hold to crash for certain (most random
configurations of some spaces do; a share of a few percent over the rest would rest on one
or two probes), in one unit, the expected error of the twin's prediction there, each over the
configurations that may start (a certain crash counts for none): the share whose start or
crash the twin may misjudge (its particles' crash odds ``p`` give ``min(p, 1 - p)``) against
the mean error of the values it predicts (their spread). While the first is the larger, its
proposals probe the crash edge: the least known untried combination with its memory knobs
where the twin's crash odds are highest, up to :data:`CRASH_ODDS`, so that the start or the
crash cuts the twin's belief about the memory it lacks near the middle.

Where every combination has been measured or refused, the wrapped sampler proposes as
:class:`~autotune.study.AutotuneSampler` does.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.space import ParamSpec, SearchSpace
from autotune.study._optuna import fixed_params
from autotune.study._record import TrialRecord, best_feasible_trial, feasible_trials
from autotune.study._sampler import SETTLED_KNOBS, AutotuneSampler
from autotune.study._twin_trials import observation
from autotune.twin._prediction import TwinPrediction

if TYPE_CHECKING:
    from autotune.twin import Twin

log = logging.getLogger("autotune.study")

#: Crash odds over which the twin refuses a proposal.
CRASH_ODDS = 0.5
#: Most untried combinations scored per proposal (a random subset beyond it).
MAX_CANDIDATES = 600
#: Values of a settled knob tried where a survey probes the crash edge (the edge is narrow
#: once the twin has seen a start and a crash near it).
EDGE_VALUES = 32
#: Combinations whose settled knobs are chosen on the settled grid, per proposal.
SHORTLIST = 8
#: Values of a settled knob tried (evenly spread over its range).
SETTLED_VALUES = 7
#: Measured trials of the sampler's own proposals before the twin may stop the search.
MIN_SEARCHED = 6
#: The share of the best measured value an improvement must exceed to count (expected
#: improvement's margin): a gain within run-to-run noise is one no measurement can tell apart,
#: so the neighbours of a measured combination (a draft-token count one or two away) do not
#: outrank combinations the twin knows less about.
MARGIN = 0.01
#: The search stops once the best untried combination's expected gain beyond :data:`MARGIN`
#: is under this share of the best measured value: the twin gives little weight to any
#: untried combination beating the best by more than run-to-run noise.
STOP_GAIN = 0.001
#: A survey (``aim="survey"``) stops once no untried combination's value is more uncertain than
#: this share of it (the twin's particles' spread, over those that start it).
SURVEY_SPREAD = 0.01
#: Random configurations of the space over which a survey weighs its two unknowns (the crash
#: edge and the values), drawn once per sampler among those the twin does not hold to crash
#: for certain.
PROBES = 200
#: Crash odds at which the twin holds a configuration to crash for certain (no survey probe).
SURE_CRASH = 0.99
#: Most batches of :data:`PROBES` random configurations drawn to find the survey's probes.
PROBE_BATCHES = 20
#: What a twin-guided study aims at: the best configuration, or the twin's knowledge of the box.
AIMS = ("optimum", "survey")


@dataclass(frozen=True)
class TwinPlan:
    """The twin's ranking after the study's finished trials (see :meth:`TwinSampler.plan`)."""

    #: Untried proposals, best first, with their crash odds and the twin's reason.
    ranked: tuple[tuple[dict[str, Any], float, str | None], ...]
    #: The twin's value of the best measured configuration (None: nothing measured yet).
    best: float | None
    #: The twin's optimistic value (its particles' 97.5th percentile) of the best untried
    #: combination that starts: what the search may still find.
    predicted: float | None
    #: The best untried combination's expected gain over ``best`` beyond :data:`MARGIN` of it
    #: (None: nothing measured, or nothing left).
    gain: float | None = None
    #: With a load mix: the same view of each load point alone (its best measured configuration
    #: of the space, the baseline aside once one is measured), for the winner at each point.
    points: tuple[PointPlan, ...] = ()
    #: A survey's view: the widest relative spread of the twin's belief over the shortlisted
    #: untried combinations, counting only those likely to start (None: not a survey).
    spread: float | None = None
    #: A survey's view of the crash edge: the expected share of the space's configurations
    #: that may start whose start or crash the twin misjudges (None: not a survey).
    edge: float | None = None


@dataclass(frozen=True)
class PointPlan:
    """The twin's view of one load point of a load mix (see :class:`TwinPlan`)."""

    label: str
    best: float | None
    predicted: float | None
    gain: float | None


class TwinSampler(AutotuneSampler):
    """Proposals by the twin's expected improvement; see the module docstring."""

    def __init__(
        self,
        base: optuna.samplers.BaseSampler,
        space: SearchSpace,
        feasibility: Any,
        twin: Twin,
        *,
        stop_share: float = 0.01,
        aim: str = "optimum",
        seed: int | None = None,
        constraints: Callable[[FrozenTrial], Sequence[float]] | None = None,
        on_refusal: Callable[[str], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            base,
            space,
            feasibility,
            seed=seed,
            constraints=constraints,
            on_refusal=on_refusal,
            **kwargs,
        )
        if aim not in AIMS:
            raise ValueError(f"aim must be one of {AIMS}, not {aim!r}")
        self.twin = twin
        self.stop_share = stop_share
        #: ``survey``: propose where the twin knows least (module docstring), not the optimum.
        self.aim = aim
        self.maximize = space.objective.direction == "maximize"
        self.searched = [p for p in space.parameters if p.name not in SETTLED_KNOBS]
        self.settled_params = [p for p in space.parameters if p.name in SETTLED_KNOBS]
        self.settled = _start_settled(space, self.settled_params)
        self._observed: set[int] = set()
        self._plan: tuple[tuple[int, ...], TwinPlan] | None = None
        self._probes: list[Any] | None = None
        loads = space.objective.loads
        #: The load points aimed at one by one (none without a load mix).
        self.labels = [p.label for p in loads] if len(loads) > 1 else []

    # --- Optuna's interface ----------------------------------------------------------------
    def sample_relative(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        search_space: dict[str, BaseDistribution],
    ) -> dict[str, Any]:
        if fixed_params(trial) is not None:
            return {}
        plan = self.plan(study)
        taken = _tried_combos(study, self.searched)  # other workers may have taken some since
        for params, odds, reason in plan.ranked:
            if _combo_key(params) in taken:
                continue
            if odds > CRASH_ODDS:
                kind, _, detail = (reason or "other_crash").partition(": ")
                self._refuse(params, f"twin {kind}", detail)
                continue
            why = self._refusal(params)
            if why is not None:
                self._refuse(params, why, "")
                continue
            self.settled = {k: params[k] for k in self.settled if k in params}
            return params
        return super().sample_relative(study, trial, search_space)

    def _refuse(self, params: Mapping[str, Any], category: str, detail: str) -> None:
        """Count a refusal before launch (``twin oom_kv_pool``: the twin's prediction, whose
        arithmetic ``detail`` gives, goes to the debug log)."""
        log.info(
            "refused before launch: %s: %s%s",
            _short(params),
            category,
            f": {detail}" if detail else "",
        )
        if self.on_refusal is not None:
            self.on_refusal(category)

    # --- the twin's view ---------------------------------------------------------------------
    def stop_reason(self, study: optuna.Study) -> str | None:
        """Why the study may stop now (None: go on): every combination is measured, or, once
        :data:`MIN_SEARCHED` of the sampler's proposals are measured, the best measured
        configuration (the twin's value of it) is within ``stop_share`` of the twin's 97.5th
        percentile for the best combination not measured yet."""
        plan = self.plan(study)
        if not plan.ranked:
            return "every speculative combination of the space has been measured"
        if self.aim == "survey":
            return self._surveyed(plan)
        if plan.best is None or self.stop_share <= 0:
            return None
        searched = [
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if fixed_params(t) is None
        ]
        if len(searched) < MIN_SEARCHED:
            return None
        if plan.predicted is None:
            return "the twin expects none of the best untried combinations to start"
        why = self._settled(plan.best, plan.predicted, plan.gain)
        if why is None:
            return None
        for point in plan.points:
            if point.best is None or point.predicted is None:
                continue
            if self._settled(point.best, point.predicted, point.gain) is None:
                return None
        if plan.points:
            labels = ", ".join(p.label for p in plan.points)
            why += f"; the same holds at each load point alone ({labels})"
        return why

    def _surveyed(self, plan: TwinPlan) -> str | None:
        """Why a survey may stop (None: go on): no untried combination that the twin expects to
        start is more uncertain than :data:`SURVEY_SPREAD` of its value, and the twin may
        misjudge the start of under that share of the space's configurations."""
        if plan.spread is None or plan.spread > SURVEY_SPREAD:
            return None
        if plan.edge is not None and plan.edge > SURVEY_SPREAD:
            return None
        return (
            f"the twin knows every untried combination it expects to start within "
            f"{SURVEY_SPREAD:.0%} (the widest spread of its belief: {plan.spread:.1%}) and "
            f"where the box's memory runs out (it may misjudge the start of "
            f"{plan.edge or 0.0:.1%} of the configurations that may start)"
        )

    def _settled(self, best: float, predicted: float, gain: float | None) -> str | None:
        """Why the search for one figure is over (None: it is not): the expected gain of the
        best untried combination is under :data:`STOP_GAIN`, or the best measured is within
        ``stop_share`` of the twin's optimistic value of what is left."""
        if gain is not None and gain <= STOP_GAIN * abs(best):
            return (
                f"the twin expects under {STOP_GAIN:.1%} of the best measured "
                f"({best:.4g} as the twin sees it) from any combination not measured, "
                f"beyond the {MARGIN:.0%} of run-to-run noise (expected gain {gain:.3g})"
            )
        ratio = predicted / best
        if (ratio - 1.0 if self.maximize else 1.0 - ratio) > self.stop_share:
            return None
        return (
            f"the best measured ({best:.4g} as the twin sees it) is within "
            f"{self.stop_share:.0%} of the twin's "
            f"predicted optimum of what is left ({predicted:.4g}: the 97.5th percentile of "
            "its belief for the best combination not measured)"
        )

    def plan(self, study: optuna.Study) -> TwinPlan:
        """Fit the twin to the finished trials it has not seen and rank the untried
        combinations (cached until another trial finishes)."""
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        key = tuple(sorted(t.number for t in finished))
        if self._plan is not None and self._plan[0] == key:
            return self._plan[1]
        fresh = []
        for t in finished:
            if t.number not in self._observed:
                self._observed.add(t.number)
                seen = observation(self.space, t)
                if seen is not None:
                    fresh.append(seen)
        if fresh:
            self.twin.observe_many(fresh)
        bests = [self._best(finished)]
        bests += [self._best_at(finished, k, label) for k, label in enumerate(self.labels)]
        plan = self._rank(study, bests)
        self._plan = (key, plan)
        return plan

    def ranking(self, study: optuna.Study) -> list[int]:
        """The measured configurations of the space within its limits (the baseline aside), best
        first by the twin's value of each after every finished trial: its expected value there,
        where the measurements around a configuration weigh in as well as its own, so that a
        lucky run ranks it less high than it measured (trial numbers)."""
        self.plan(study)  # the twin fitted to every finished trial
        sign = 1.0 if self.maximize else -1.0
        measured = []
        for t in self._feasible(study.get_trials(deepcopy=False)):
            seen = observation(self.space, t)
            if seen is not None and TrialRecord.from_trial(t).role != "baseline":
                measured.append((t.number, seen[0]))
        if not measured:
            return []
        values = self.twin.predict([config for _, config in measured]).mean()
        found = [
            (sign * float(v), -n)
            for (n, _), v in zip(measured, values, strict=True)
            if not np.isnan(v)
        ]
        return [-n for _, n in sorted(found, reverse=True)]

    def _feasible(self, finished: Sequence[FrozenTrial]) -> list[FrozenTrial]:
        """The trials measured within the space's limits."""
        return feasible_trials(finished, self.constraints)

    def _best(self, finished: Sequence[FrozenTrial]) -> float | None:
        """The twin's value of the best measured configuration within the space's limits
        (its expected value there: the measurements around it weigh in, so one lucky
        measurement does not end the search); None before anything is measured."""
        best = best_feasible_trial(finished, maximize=self.maximize, constraints=self.constraints)
        if best is None:
            return None
        seen = observation(self.space, best)
        measured = float(best.values[0])
        if seen is None:
            return measured
        value = float(self.twin.predict([seen[0]]).mean()[0])
        return measured if np.isnan(value) else value

    def _best_at(self, finished: Sequence[FrozenTrial], k: int, label: str) -> float | None:
        """The twin's value at load point ``k`` (``label``) of the configuration measured best
        there: the best of the space's configurations once one is measured, else the
        baseline's (None: nothing measured there)."""
        sign = 1.0 if self.maximize else -1.0
        found: list[tuple[bool, float, FrozenTrial]] = []
        for t in finished:
            if t.state != TrialState.COMPLETE:
                continue
            record = TrialRecord.from_trial(t)
            value = record.at_load(label)
            if value is not None:
                found.append((record.role != "baseline", sign * value, t))
        if not found:
            return None
        _, measured, best = max(found, key=lambda x: (x[0], x[1]))
        seen = observation(self.space, best)
        if seen is None:
            return sign * measured
        value = float(self.twin.predict([seen[0]]).at_point(k).mean()[0])
        return sign * measured if np.isnan(value) else value

    def _scores(
        self, pred: TwinPrediction, bests: Sequence[float | None], *, given_start: bool
    ) -> np.ndarray:
        """Expected improvement per target (rows: the objective, then each load point alone);
        with a load mix each as a share of its best measured, so that the load points weigh
        alike."""
        sign = 1.0 if self.maximize else -1.0
        rows = [_improvement(pred.samples, pred.weights, bests[0], sign, given_start=given_start)]
        if self.labels and bests[0] is not None:
            for k, best in enumerate(bests[1:]):
                at = pred.at_point(k)
                rows.append(
                    _improvement(at.samples, at.weights, best, sign, given_start=given_start)
                )
        return self._shares(rows, bests)

    def _shares(self, rows: Sequence[np.ndarray], bests: Sequence[float | None]) -> np.ndarray:
        """Each target's expected improvements (``rows``: the objective, then each load point)
        as a share of its best measured, none for a point with nothing measured; without a load
        mix, or before anything is measured, the objective's alone, as they are."""
        if not self.labels or bests[0] is None:
            return np.array(rows[:1])
        return np.array(
            [
                np.zeros_like(r) if b is None else r / abs(b) if b else r
                for r, b in zip(rows, bests, strict=True)
            ]
        )

    def _rank(self, study: optuna.Study, bests: Sequence[float | None]) -> TwinPlan:
        tried = _tried_combos(study, self.searched)
        combos = [c for c in self.combos() if _combo_key(c) not in tried]
        if len(combos) > MAX_CANDIDATES:
            combos = self.rng.sample(combos, MAX_CANDIDATES)
        best = bests[0]
        if not combos:
            return TwinPlan((), best, None)
        sign = 1.0 if self.maximize else -1.0
        first = [{**c, **self.settled} for c in combos]
        pred = self.twin.predict([self.space.config_for(p) for p in first])
        edge, typical, at_edge = None, None, False
        if self.aim == "survey":
            scores = _spread(pred.samples, pred.weights)[None, :]
            edge, typical = self._unknowns()
            at_edge = edge > typical
        else:
            scores = self._scores(pred, bests, given_start=True)
        order = np.argsort(-scores.max(axis=0), kind="stable")
        picked = list(order[:SHORTLIST])
        for row in scores[1:]:  # each load point's own best few
            picked += [i for i in np.argsort(-row, kind="stable")[:2] if i not in picked]
        chosen = [self._settle(combos[i], bests, sign, edge=at_edge) for i in picked]
        chosen.sort(key=lambda x: -x.score)
        ranked = [(c.params, c.odds, c.reason) for c in chosen]

        def view(k: int) -> tuple[float | None, float | None]:
            highs = [c.highs[k] for c in chosen if c.odds <= CRASH_ODDS]
            known = [h for h in highs if h is not None]
            predicted = None if not known else (max(known) if self.maximize else min(known))
            gain = max(c.gains[k] for c in chosen) if bests[k] is not None else None
            return predicted, gain

        predicted, gain = view(0)
        spread = None
        if self.aim == "survey":
            starting = [c.spread for c in chosen if c.odds <= CRASH_ODDS]
            spread = max(starting) if starting else 0.0
        points = tuple(
            PointPlan(label, bests[k + 1], *view(k + 1)) for k, label in enumerate(self.labels)
        )
        if self.aim == "survey":
            log.info(
                "twin survey: least known untried %s (%s), its spread %.1f%%; the widest among "
                "those likely to start %.1f%%; of the space's configurations that may start, it "
                "may misjudge the start of %.1f%% against a mean error of its values of %.1f%%%s",
                _short(ranked[0][0]),
                f"crash odds {ranked[0][1]:.0%}",
                100 * chosen[0].spread,
                100 * (spread or 0.0),
                100 * (edge or 0.0),
                100 * (typical or 0.0),
                ": probing the crash edge" if at_edge else "",
            )
        else:
            log.info(
                "twin: best measured (the twin's value) %s, best untried %s (%s), optimistic %s, "
                "expected gain %s%s",
                best,
                _short(ranked[0][0]),
                f"crash odds {ranked[0][1]:.0%}",
                predicted,
                gain,
                "".join(f"; {p.label}: best {p.best}, optimistic {p.predicted}" for p in points),
            )
        # the rest in the first pass's order, with its crash odds at the current settled knobs
        for i in order:
            if i not in picked:
                ranked.append(({**combos[i], **self.settled},
                               float(pred.crash_probability[i]), pred.crash_reason[i]))  # fmt: skip
        return TwinPlan(tuple(ranked), best, predicted, gain, points, spread, edge)

    def _unknowns(self) -> tuple[float, float]:
        """A survey's two unknowns over :data:`PROBES` random configurations of the space, each
        as the expected error of the twin's prediction there, over those that may start (each
        probe weighed by its odds ``1 - p`` of starting; a certain crash counts for none): the
        share whose start or crash it may misjudge (``min(p, 1 - p)`` of its crash odds
        ``p``), and the mean error of the values it predicts (their spread, :func:`_spread`,
        times ``sqrt(2 / pi)``). Both are 0 where the twin expects no probe to start."""
        if self._probes is None:
            self._probes = self._draw_probes()
        pred = self.twin.predict(self._probes)
        odds = pred.crash_probability
        starts = float(np.sum(1.0 - odds))
        if starts <= 0.0:
            return 0.0, 0.0
        misjudged = float(np.sum(np.minimum(odds, 1.0 - odds))) / starts
        # a value's expected error is its spread times the mean absolute deviation of a normal;
        # _spread already weighs each probe by the share of particles that start it
        spread = float(np.sum(_spread(pred.samples, pred.weights))) / starts
        return misjudged, spread * math.sqrt(2.0 / math.pi)

    def _draw_probes(self) -> list[Any]:
        """:data:`PROBES` random configurations of the space that the twin does not yet hold
        to crash for certain (crash odds under :data:`SURE_CRASH`), drawn in batches of that
        many, at most :data:`PROBE_BATCHES` of them. Most random configurations of some spaces
        crash for certain; over the few left, a share of a few percent would rest on one or two
        probes."""
        kept: list[Any] = []
        for _ in range(PROBE_BATCHES):
            sampled = self.space.sample(PROBES, seed=self.rng.randrange(1 << 30))
            batch = [self.space.config_for(self.repair(p)) for p in sampled]
            odds = self.twin.predict(batch).crash_probability
            kept += [c for c, p in zip(batch, odds, strict=True) if p < SURE_CRASH]
            if len(kept) >= PROBES:
                return kept[:PROBES]
        return kept or batch

    def _settle(
        self,
        combo: Mapping[str, Any],
        bests: Sequence[float | None],
        sign: float,
        *,
        edge: bool = False,
    ) -> _Settled:
        """The settled knobs' safest good value for ``combo``: the lowest crash odds, then
        within 1% of the best expected value there, then the middle of those; with the
        proposal's score (expected improvement, crashes counted as none), crash odds, the
        twin's reason and, per target, its expected gain and optimistic value. ``edge`` (a
        survey probing the crash edge): the highest crash odds up to :data:`CRASH_ODDS`
        instead, and the score counts the odds of misjudging the start."""
        grid = _settled_grid(self.settled_params, EDGE_VALUES if edge else SETTLED_VALUES)
        options = [{**combo, **s} for s in grid] or [dict(combo)]
        pred = self.twin.predict([self.space.config_for(p) for p in options])
        odds = pred.crash_probability
        means = pred.mean()
        allowed = odds <= CRASH_ODDS
        if edge and allowed.any():
            top = float(odds[allowed].max())
            safe = np.flatnonzero(allowed & (odds >= top - 0.01))
        else:
            safe = np.flatnonzero(odds <= odds.min() + 0.01)
        known = [i for i in safe if not np.isnan(means[i])]
        if known:
            top = max(sign * means[i] for i in known)
            good = [i for i in known if sign * means[i] >= top - 0.01 * abs(top)]
        else:
            good = list(safe)
        pick = good[len(good) // 2]
        one = TwinPrediction(
            pred.samples[:, [pick]],
            pred.weights,
            pred.crash_probability[[pick]],
            [pred.crash_reason[pick]],
            None if pred.points is None else pred.points[:, :, [pick]],
        )
        gains, highs = [], []
        for k in range(len(self.labels) + 1):
            at = one if k == 0 else one.at_point(k - 1)
            gains.append(
                float(_improvement(at.samples, at.weights, bests[k], sign, given_start=False)[0])
            )
            highs.append(_upper(at.samples[:, 0], at.weights, sign))
        spread = float(_spread(one.samples, one.weights)[0])
        if self.aim == "survey":
            p = float(odds[pick])
            score = spread + (min(p, 1.0 - p) if edge else 0.0)
        else:
            score = float(self._shares([np.array([g]) for g in gains], bests).max())
        return _Settled(options[pick], score, float(odds[pick]), pred.crash_reason[pick],
                        tuple(gains), tuple(highs), spread)  # fmt: skip

    def combos(self) -> list[dict[str, Any]]:
        """Every speculative combination of the space (the searched knobs but the settled
        ones), draft tokens within the engine's bounds, each once."""
        out: list[dict[str, Any]] = []
        keys: set[Any] = set()

        def walk(i: int, chosen: dict[str, Any]) -> None:
            if i == len(self.searched):
                combo = self.repair({**chosen, **self.settled})
                combo = {k: v for k, v in combo.items() if k not in self.settled}
                key = _combo_key(combo)
                if key not in keys:
                    keys.add(key)
                    out.append(combo)
                return
            param = self.searched[i]
            if not param.active({**self.space.fixed, **chosen}):
                walk(i + 1, chosen)
                return
            for value in _values(param, 9):
                walk(i + 1, {**chosen, param.name: value})

        walk(0, {})
        return out


@dataclass(frozen=True)
class _Settled:
    """One shortlisted combination with its settled knobs (see :meth:`TwinSampler._settle`)."""

    params: dict[str, Any]
    #: What the proposal is ranked by: the expected improvement (with a load mix, the largest
    #: over the objective and each load point, each as a share of its best measured).
    score: float
    odds: float
    reason: str | None
    #: Per target (the objective, then each load point): the expected gain over its best
    #: measured, and the optimistic value (None: no particle starts it).
    gains: tuple[float, ...]
    highs: tuple[float | None, ...]
    #: The relative spread of the twin's belief about its value (:func:`_spread`).
    spread: float = 0.0


def _improvement(
    samples: np.ndarray,
    weights: np.ndarray,
    best: float | None,
    sign: float,
    *,
    given_start: bool,
    margin: float = MARGIN,
) -> np.ndarray:
    """Expected improvement over ``best`` by more than ``margin`` of it, across the particles
    (a crash improves nothing); ``given_start``: given that the configuration starts. Without a
    measured value: the expected value itself."""
    ok = ~np.isnan(samples)
    values = np.where(ok, sign * samples, 0.0)
    if best is None:
        gain = values
    else:
        bar = sign * best + margin * abs(best)
        # beyond the margin; a tiny share of the plain improvement breaks ties among those
        # that are all within it (most likely the best of them first)
        plain = np.maximum(0.0, values - sign * best)
        gain = np.maximum(0.0, values - bar) + 1e-3 * plain
    gain = np.where(ok, gain, 0.0)
    w = weights[:, None] * (ok if given_start else np.ones_like(ok))
    total = w.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(total > 0, (w * gain).sum(axis=0) / total, -np.inf)
    return np.asarray(out)


def _spread(samples: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per configuration: the weighted standard deviation of the particles' values over their
    weighted mean, among the particles that start it, times the share that start it (what a
    measurement there would teach the twin; 0 where none starts)."""
    ok = ~np.isnan(samples)
    w = weights[:, None] * ok
    total = w.sum(axis=0)
    values = np.where(ok, samples, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (w * values).sum(axis=0) / total
        var = (w * (values - mean) ** 2).sum(axis=0) / total
        rel = np.sqrt(var) / np.abs(mean)
    share = total / weights.sum()
    return np.asarray(np.where((total > 0) & np.isfinite(rel), rel * share, 0.0))


def _upper(values: np.ndarray, weights: np.ndarray, sign: float, q: float = 0.975) -> float | None:
    """The particles' weighted ``q`` quantile of a configuration's value, on the side of
    improvement (the upper for a maximised objective), over those that start it."""
    ok = ~np.isnan(values)
    if not ok.any():
        return None
    v, w = sign * values[ok], weights[ok]
    order = np.argsort(v)
    cum = np.cumsum(w[order]) / w.sum()
    i = int(np.searchsorted(cum, q))
    return float(sign * v[order][min(i, len(v) - 1)])


def _values(param: ParamSpec, continuous: int) -> list[Any]:
    values = param.values()
    if values is not None:
        return list(values)
    assert param.low is not None and param.high is not None
    return [param.normalise(v) for v in np.linspace(param.low, param.high, continuous)]


def _settled_grid(params: Sequence[ParamSpec], most: int = SETTLED_VALUES) -> list[dict[str, Any]]:
    """The settled knobs' grid: at most ``most`` values of each, evenly spread."""
    axes = []
    for param in params:
        values = _values(param, most)
        if len(values) > most:
            idx = np.linspace(0, len(values) - 1, most).round().astype(int)
            values = [values[i] for i in sorted(set(idx))]
        axes.append([(param.name, v) for v in values])
    return [dict(items) for items in itertools.product(*axes)] if axes else []


def _start_settled(space: SearchSpace, params: Sequence[ParamSpec]) -> dict[str, Any]:
    """The settled knobs before the twin has chosen: the space's first configuration's, else
    the middle of each range."""
    first = space.enqueued[0] if space.enqueued else {}
    out = {}
    for param in params:
        values = _values(param, SETTLED_VALUES)
        out[param.name] = first.get(param.name, values[len(values) // 2])
    return out


def _combo_key(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(
        sorted(
            (k, round(v, 6) if isinstance(v, float) else v)
            for k, v in params.items()
            if k not in SETTLED_KNOBS
        )
    )


def _tried_combos(study: optuna.Study, searched: Sequence[ParamSpec]) -> set[Any]:
    """The speculative combinations of trials run, running or queued (their settled knobs
    aside)."""
    names = {p.name for p in searched}
    out = set()
    for t in study.get_trials(deepcopy=False):
        params = t.params or fixed_params(t) or {}
        if params and any(k in names for k in params):
            out.add(_combo_key({k: v for k, v in params.items() if k in names}))
    return out


def _short(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())
