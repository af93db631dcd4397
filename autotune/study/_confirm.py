"""Confirmation: the best candidates and the baseline re-measured, interleaved, with statistics.

After the search, the best few distinct configurations (``confirm.candidates``; after a
twin-guided search, also the twin's best of its own best few where the measurements left it out:
:func:`candidates`) and the no-speculation baseline are started again in rounds: baseline, A,
B, C, then B, C, baseline, A, and so on (the order turns each round), one start of each per
round, so drift between rounds (a warming box, a neighbour's job) hits all alike. The noise
that decides is between starts: a start is one measurement, never several runs of one server
(on a real SGLang the runs of one start are not independent: the first is a warm-up, and the
acceptance of NGRAM climbs while the server stays up; :mod:`autotune.searchbench._oracle` says
what the simulator assumes). Each
candidate is judged by its ratio to the baseline of the same round: the geometric mean over
rounds with a Student-t interval (:func:`autotune._stats.ratio_interval`). The intervals are
family-wise over the candidates and over the looks: the rounds stop at the first round from
``min_rounds`` on at which the answer is decided, so with ``k`` candidates each interval is
taken at the one nominal level at which, over the rounds from ``min_rounds`` to ``max_rounds``,
the chance that it misses at any of them is ``(1 - confidence) / k`` (Pocock's group-sequential
boundary, calibrated for these looks: :func:`autotune._stats.group_sequential_level`), and the
chance that any reported interval misses, at whichever round the rounds stopped, is at most
``1 - confidence``. (An interval at ``1 - (1 - confidence) / k`` looked at after every round
is not: with no true gain it says "pays" in about 8% of confirmations, not 2.5%; Bonferroni
over the looks is, but takes each look as if the others told nothing, and buys its safety
with rounds.)

After ``min_rounds``, a candidate whose interval against the leader lies wholly below it is
dropped (it stops being started); with a load mix, only when it lies below the leader at every
load point too (:mod:`autotune.study._paired`): a candidate behind by the weighted objective is
kept for the points where it may still be the best, each point's choice is made among its own
contenders, and rounds go on while a point's leader is not told apart from them. A candidate
that fails to start twice is dropped as unstable, and one that breaks the space's limits
(``objective.constraints``) in two runs and in more than half of its runs, or whose mean figure
after ``min_rounds`` lies, with its confidence bound, beyond a limit, is dropped as not within
them; in its place the next best measured configuration joins (up to ``LIMIT_RESERVE`` of them),
with rounds of its own.
The confirmation ends when the leader is decided against the baseline (its interval above 1,
below 1, or within ``margin`` of 1) and stands apart from the others (alone, or every other
within ``margin``), and, with a load mix, each point's leader stands apart from its contenders
there; or when every candidate still in the running is slower than the baseline (each
interval wholly below 1; at a load point, each contender there): the choice is then no
speculation whichever of them leads, and ranking them would cost a start of each per round; or
when ``max_rounds`` is reached. The verdict follows
(:class:`~autotune.study._verdict.Verdict`).

After each round from ``min_rounds`` on, a line says where the leader stands against the baseline
and, while that is undecided, how many rounds in all (starts, GPU hours) would decide it if its
mean and its spread so far held (:func:`autotune._stats.rounds_to_decide`), so that a
confirmation of long starts says how long it may take. When the rounds run out with the
leader undecided, the verdict's note gives that projection and the ``autotune study confirm
--max-rounds`` command that goes on from the rounds measured.

Every measurement is written to the study (user attribute ``autotune:confirmation``) as soon as
it is taken, so a confirmation stopped by Ctrl-C or a kill goes on where it stopped
(``autotune study confirm`` or ``autotune study resume``). The search's own measurements of the
candidates and the baseline stand as a round before the first, while the baseline's confirmation
runs say the box has not drifted since (:meth:`Confirmation._search_round`), but only in
choosing whom to go on measuring: a candidate clearly behind with them is dropped a round sooner.
No interval the verdict states counts them (they chose the candidates: counting them would
favour the lucky).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._knobs import ServerConfig
from autotune._stats import group_sequential_level, mean_interval, rounds_to_decide
from autotune.space import ConfirmSpec, SearchSpace
from autotune.study._evaluate import TrialContext, TrialEvaluator, TrialFiles, TrialHooks
from autotune.study._paired import CHOICE_CONFIDENCE, Paired
from autotune.study._record import (
    STUDY_CONFIRMATION,
    TrialRecord,
    feasible_trials,
    first_value,
    twin_ranking,
)
from autotune.study._verdict import ArmFigure, LoadChoice, Verdict, judge

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

log = logging.getLogger("autotune.study")

BASELINE = "baseline"
#: Starts of a candidate that may fail in a confirmation before it is dropped as unstable.
MAX_FAILED_STARTS = 2
#: With a load mix: the best few at each load point that join the candidates (each point's
#: winner is then chosen on confirmed figures too, not on one lucky measurement).
LOAD_CANDIDATES = 3
#: With latency limits: measured configurations held in reserve, the best after the
#: candidates; each joins the confirmation when a candidate is dropped as not within the limits
#: (near a limit the best few may all be just over it, and no speculation may be over it too).
LIMIT_RESERVE = 3
#: Most rounds a projection looks ahead (:func:`~autotune._stats.rounds_to_decide`): a leader
#: not decided by then is as good as no different from the baseline at this noise.
PROJECTION_CAP = 100
#: The round the search's own measurements stand in (:meth:`Confirmation._search_round`).
SEARCH_ROUND = -1
#: The level of the test that the box has not drifted between the search and the confirmation.
DRIFT_CONFIDENCE = 0.99
_VERSION = 1
#: How the reasons of candidates dropped as not within the limits begin.
_OVER = ("not within ", "broke ")


@dataclass(frozen=True)
class Arm:
    """One configuration under confirmation: the baseline or a trial of the search."""

    key: str
    trial: int | None
    config: ServerConfig
    params: Mapping[str, Any] | None
    #: The search's single measurement that made it a candidate.
    searched: float | None = None
    #: Held in reserve: measured only once a candidate is dropped as not within the limits.
    reserve: bool = False
    #: A candidate for the twin's value of it, not its measurement (:func:`candidates`).
    twin: bool = False


def candidates(
    study: optuna.Study,
    space: SearchSpace,
    count: int,
    *,
    per_load: int = LOAD_CANDIDATES,
    reserve: int = 0,
) -> list[Arm]:
    """The baseline and the ``count`` best distinct measured configurations within the limits
    (the search's figures rank them; ties: the earlier trial); then, where the twin sampler
    ranked the study's measured trials as they are (:func:`twin_ranking`), the first of
    its ``count`` best not among them yet; with a load mix, then the ``per_load`` best at each
    load point not among them yet; last, the ``reserve`` next best (marked :attr:`Arm.reserve`).

    The search's figures are single runs: with a few per cent of run-to-run noise, the
    configurations measured best are those within the noise of the best that ran lucky, and
    the best of all may have run unlucky. The twin's ranking weighs every measurement around
    a configuration as well as its own, so its best joins the rounds, where the runs decide."""
    from optuna.trial import TrialState

    maximize = space.objective.direction == "maximize"
    usable = []
    for t in feasible_trials(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))):
        record = TrialRecord.from_trial(t)
        if record.role == BASELINE or not record.measured or record.value is None:
            continue
        usable.append((t, record))
    arms = [Arm(BASELINE, None, space.baseline_config(), None)]
    seen = [arms[0].config]

    def take(
        by: Callable[[FrozenTrial, TrialRecord], float | None],
        how_many: int,
        spare: bool = False,
        twin: bool = False,
    ) -> None:
        ranked = []
        for t, record in usable:
            value = by(t, record)
            if value is not None:
                ranked.append((value if maximize else -value, -t.number, t))
        ranked.sort(key=lambda x: (x[0], x[1]), reverse=True)
        taken = 0
        for _, _, t in ranked:
            if taken >= how_many:
                break
            config = space.config_for(t.params)
            if config in seen:
                continue
            seen.append(config)
            arms.append(
                Arm(
                    f"trial {t.number}",
                    t.number,
                    config,
                    dict(t.params),
                    first_value(t),
                    spare,
                    twin,
                )
            )
            taken += 1

    take(lambda t, r: r.value, count)
    ranked = twin_ranking(study)
    if ranked is not None:
        order = {n: i for i, n in enumerate(ranked[:count]) if isinstance(n, int)}
        first = -1 if maximize else 1  # the ranking's first is the best either way
        take(lambda t, r: first * order[t.number] if t.number in order else None, 1, twin=True)
    for point in space.objective.loads if len(space.objective.loads) > 1 else ():
        take(functools.partial(_at_load, label=point.label), per_load)
    take(lambda t, r: r.value, reserve, spare=True)
    return arms


def _at_load(trial: FrozenTrial, record: TrialRecord, *, label: str) -> float | None:
    return record.at_load(label)


@dataclass
class Measurement:
    round: int
    arm: str
    value: float | None
    outcome: str
    gpu_s: float
    #: The space's limits this run broke (``tpot_p99_ms <= 50``), if any.
    broke: tuple[str, ...] = ()
    #: With a load mix: the run's figure at each load point, by label.
    loads: Mapping[str, float] = field(default_factory=dict)
    #: The run's figure of each metric the space's limits bound, by metric.
    limited: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "arm": self.arm,
            "value": self.value,
            "outcome": self.outcome,
            "gpu_s": round(self.gpu_s, 3),
            "broke": list(self.broke),
            **({"loads": dict(self.loads)} if self.loads else {}),
            **({"limited": dict(self.limited)} if self.limited else {}),
        }


class Confirmation:
    """Runs the confirmation of one study (see the module docstring).

    ``evaluator`` starts and measures each configuration (the study's own: a real server, or
    the search benchmark's oracle) and prices each run in GPU seconds
    (:meth:`~autotune.study._evaluate.TrialEvaluator.gpu_seconds`, ``gpus`` GPUs held);
    ``hooks`` makes each run's callbacks (process record, cancellation), ``after_run`` is
    called when a run ended however it ended, ``on_run`` when one begins (its round, the least
    and most rounds, the runs of its round left counting it, the arms measured each round: the
    study's progress plans from them); ``on_line`` receives a line per measurement, and
    after each round from ``min_rounds`` on where the leader stands (:meth:`_standing`).
    """

    def __init__(
        self,
        study: optuna.Study,
        space: SearchSpace,
        evaluator: TrialEvaluator,
        *,
        spec: ConfirmSpec | None = None,
        folder: Path,
        gpus: int,
        hooks: Callable[[], TrialHooks] = TrialHooks,
        on_line: Callable[[str], None] | None = None,
        after_run: Callable[[], None] | None = None,
        on_run: Callable[[int, tuple[int, int], int, int], None] | None = None,
    ) -> None:
        self.study = study
        self.space = space
        self.evaluator = evaluator
        self.spec = spec or space.confirm
        self.folder = folder
        self.gpus = gpus
        self.hooks = hooks
        self.on_line = on_line or (lambda line: None)
        self.after_run = after_run or (lambda: None)
        self.on_run = on_run or (lambda r, rounds, left, arms: None)
        self.maximize = space.objective.direction == "maximize"

    # --- state -----------------------------------------------------------------------------
    def _load(self, arms: list[Arm], spare: list[Arm]) -> list[Measurement]:
        """The measurements recorded for these arms (none when the candidates changed); the
        reserve arms that had joined join ``arms`` again (taken from ``spare``)."""
        state = self.study.user_attrs.get(STUDY_CONFIRMATION)
        if not isinstance(state, dict) or state.get("version") != _VERSION:
            return []
        stored = state.get("arms")
        keys = [a.key for a in arms]
        joined = len(stored) - len(keys) if isinstance(stored, list) else -1
        if joined < 0 or joined > len(spare) or stored != keys + [a.key for a in spare[:joined]]:
            return []
        arms.extend(spare[:joined])
        del spare[:joined]
        out = []
        for m in state.get("measurements") or []:
            value = m.get("value")
            out.append(
                Measurement(
                    int(m["round"]),
                    str(m["arm"]),
                    float(value) if isinstance(value, (int, float)) else None,
                    str(m.get("outcome") or "ok"),
                    float(m.get("gpu_s") or 0.0),
                    tuple(str(b) for b in m.get("broke") or ()),
                    _floats(m.get("loads")),
                    _floats(m.get("limited")),
                )
            )
        return out

    def _save(self, arms: Sequence[Arm], done: list[Measurement], verdict: Verdict | None) -> None:
        state: dict[str, Any] = {
            "version": _VERSION,
            "arms": [a.key for a in arms],
            "configs": {a.key: dict(a.params) if a.params is not None else None for a in arms},
            "searched": {a.key: a.searched for a in arms},
            "spec": {
                "candidates": self.spec.candidates,
                "min_rounds": self.spec.min_rounds,
                "max_rounds": self.spec.max_rounds,
                "confidence": self.spec.confidence,
                "margin": self.spec.margin,
            },
            "measurements": [m.to_dict() for m in done],
        }
        if verdict is not None:
            state["verdict"] = verdict.to_dict()
        self.study.set_user_attr(STUDY_CONFIRMATION, state)

    # --- the rounds ------------------------------------------------------------------------
    def run(self) -> Verdict:
        """Confirm the study's best candidates; the verdict is also written to the study."""
        reserve = LIMIT_RESERVE if self.space.objective.constraints else 0
        pool = candidates(self.study, self.space, self.spec.candidates, reserve=reserve)
        arms = [a for a in pool if not a.reserve]
        spare = [a for a in pool if a.reserve]
        first = len(arms)
        done = self._load(arms, spare)
        for arm in arms if not done else ():
            if arm.twin:
                line = (
                    f"{arm.key} joins the candidates: the twin values it among the best "
                    f"{self.spec.candidates} measured, by the runs around it as well as its own"
                )
                log.info("%s", line)
                self.on_line(line)
        reported = 0
        while len(arms) > 1:
            figures = self._figures(arms, done, len(arms) - 1)
            over = [f for f in figures if f.dropped is not None and f.dropped.startswith(_OVER)]
            if spare and len(over) > len(arms) - first:
                arms.append(spare.pop(0))
                self._save(arms, done, None)
                continue
            dropped = {f.key for f in figures if f.dropped is not None}
            r = self._next_round(arms, done, dropped)
            if r >= self.spec.max_rounds or (
                r >= self.spec.min_rounds
                and self._settled(arms, done, dropped)
                and self._decided(figures, done)
            ):
                break
            if r >= max(2, self.spec.min_rounds) and r != reported:
                reported = r
                where = self._standing(figures, done, r)
                if where is not None:
                    log.info("%s", where)
                    self.on_line(where)
            self._round(arms, done, dropped, r)
        k = len(arms) - 1
        figures = self._figures(arms, done, k) if k else []
        notes = []
        if any(m.arm == BASELINE and m.value is None for m in done):
            failed = sum(1 for m in done if m.arm == BASELINE and m.value is None)
            notes.append(
                f"the baseline did not start in {failed} run(s): those rounds are left out"
            )
        standing = [f.key for f in figures if f.running]
        if standing:
            paired = self._paired(done)
            level = self._level(k)
            contest = paired.contest(standing, level, self.spec.margin)
            if not contest.apart and self._all_slower(paired, standing, level):
                notes.append(
                    "every candidate still measured runs slower than no speculation (each "
                    "interval below x1.00): which of them is the fastest does not change the "
                    "choice, so they were not ranked further"
                )
            undecided = self._projection(figures, done)
            if undecided is not None:
                notes.append(undecided)
        base_runs = [m for m in done if m.arm == BASELINE and m.value is not None]
        base_over = [m for m in base_runs if m.broke]
        if base_over and 2 * len(base_over) > len(base_runs):
            notes.append(
                f"no speculation breaks {base_over[-1].broke[0]} too, in {len(base_over)} of "
                f"{len(base_runs)} runs"
            )
        verdict = judge(
            figures,
            rounds=self._next_round(arms, done, {f.key for f in figures if f.dropped}),
            starts=len(done),
            gpu_hours=sum(m.gpu_s for m in done) / 3600.0,
            spec=self.spec,
            shown=[p.name for p in self.space.parameters],
            notes=notes,
            loads=self._load_choices(arms, figures, done),
        )
        self._save(arms, done, verdict)
        return verdict

    # --- where the rounds stand ---------------------------------------------------------------
    def _leader(self, figures: Sequence[ArmFigure]) -> ArmFigure | None:
        """The candidate the verdict would choose now (the best ratio among those running)."""
        standing = [f for f in figures if f.running and f.low is not None]
        return max(standing, key=lambda f: f.ratio or 0.0) if standing else None

    def _undecided(self, leader: ArmFigure) -> bool:
        """The leader's interval against the baseline still holds 1 and reaches past the
        margin: neither "pays" nor "costs" nor "no different" can be said yet."""
        assert leader.low is not None and leader.high is not None
        margin = self.spec.margin
        within = leader.low >= 1.0 - margin and leader.high <= 1.0 + margin
        return leader.low <= 1.0 <= leader.high and not within

    def _rounds_needed(self, leader: ArmFigure, done: Sequence[Measurement], k: int) -> int | None:
        """Rounds in all that would decide the leader against the baseline if its mean and its
        spread so far held (None: not even :data:`PROJECTION_CAP`)."""
        pairs = self._paired(done).pairs(leader.key, BASELINE)
        return rounds_to_decide(pairs, self._level(k), self.spec.margin, cap=PROJECTION_CAP)

    def _standing(
        self, figures: Sequence[ArmFigure], done: Sequence[Measurement], rounds: int
    ) -> str | None:
        """A line after each round from ``min_rounds`` on: the leader against the baseline
        and, while that is undecided, how many rounds (starts, GPU hours) would decide it at
        the spread so far, so that a long confirmation says how long it may take."""
        leader = self._leader(figures)
        if leader is None:
            return None
        head = f"after round {rounds}: {leader.key} leads at {leader.interval()} over the baseline"
        if not self._undecided(leader):
            return f"{head}; decided against the baseline"
        need = self._rounds_needed(leader, done, len(figures))
        if need is None:
            return (
                f"{head}; undecided, and at this spread not even {PROJECTION_CAP} rounds would "
                "tell it from no speculation"
            )
        more = max(need - rounds, 1)
        starts = more * (1 + sum(1 for f in figures if f.dropped is None))
        measured = [m.gpu_s for m in done if m.gpu_s > 0]
        cost = ""
        if measured:
            cost = f", about {starts * sum(measured) / len(measured) / 3600:.1f} GPU h"
        tail = ""
        if need > self.spec.max_rounds:
            tail = f"; this confirmation stops at {self.spec.max_rounds}"
        return (
            f"{head}; undecided: if its mean and spread hold, about {need} rounds in all decide "
            f"it ({more} more, {starts} starts{cost}){tail}"
        )

    def _projection(self, figures: Sequence[ArmFigure], done: Sequence[Measurement]) -> str | None:
        """The verdict's note when the rounds ran out with the leader undecided: how many rounds
        in all would decide it at the spread measured, and the command that goes on."""
        leader = self._leader(figures)
        if leader is None or not self._undecided(leader):
            return None
        rounds = len(self._paired(done).pairs(leader.key, BASELINE))
        need = self._rounds_needed(leader, done, len(figures))
        if need is None:
            return (
                f"{leader.key}'s x{leader.ratio:.3f} over {rounds} rounds is so near x1.00 for "
                f"its spread that not even {PROJECTION_CAP} rounds would tell it from no "
                "speculation: as good as no difference at this noise"
            )
        return (
            f"if {leader.key}'s x{leader.ratio:.3f} and its spread over {rounds} rounds hold, "
            f"about {need} rounds in all would decide it: `autotune study confirm --study-name "
            f"{self.study.study_name} --max-rounds {need}` goes on from these rounds"
        )

    @staticmethod
    def _next_round(arms: Sequence[Arm], done: Sequence[Measurement], dropped: set[str]) -> int:
        """The round to measure next: the last one while an arm still standing lacks its run
        there (a confirmation stopped half-way goes on inside its round), else a new one. It is
        also the number of rounds complete."""
        if not done:
            return 0
        last = max(m.round for m in done)
        taken = {m.arm for m in done if m.round == last}
        standing = [a.key for a in arms if a.key not in dropped]
        return last if any(key not in taken for key in standing) else last + 1

    def _round(
        self, arms: Sequence[Arm], done: list[Measurement], dropped: set[str], r: int
    ) -> None:
        """Measure round ``r`` (what of it is not recorded yet), in the round's turned order."""
        standing = [a for a in arms if a.key not in dropped]
        shift = r % len(standing)
        taken = {m.arm for m in done if m.round == r}
        todo = [a for a in standing[shift:] + standing[:shift] if a.key not in taken]
        for i, arm in enumerate(todo):
            self.on_run(
                r, (self.spec.min_rounds, self.spec.max_rounds), len(todo) - i, len(standing)
            )
            m = self._measure(arm, r, len(done))
            done.append(m)
            self._save(arms, done, None)
            self.on_line(self._line(m, done))

    def _measure(self, arm: Arm, r: int, index: int) -> Measurement:
        label = "baseline" if arm.trial is None else f"t{arm.trial:04d}"
        files = TrialFiles(self.folder / f"r{r + 1:02d}-{label}")
        context = TrialContext(index, "confirm", arm.params, files, self.hooks())
        started = time.monotonic()
        try:
            record = self.evaluator.evaluate(arm.config, context)
        finally:
            self.after_run()
        wall = time.monotonic() - started
        value = record.value if record.measured else None
        cost = self.evaluator.gpu_seconds(record, wall, self.gpus)
        broke = tuple(
            c.describe()
            for c in self.space.objective.constraints
            if value is not None and c.violation(record.metric(c.metric)) > 0
        )
        loads = {label: v for label in record.loads if (v := record.at_load(label)) is not None}
        limited = {
            c.metric: v
            for c in self.space.objective.constraints
            if (v := record.metric(c.metric)) is not None and math.isfinite(v)
        }
        if value is None:
            loads, limited = {}, {}
        return Measurement(r, arm.key, value, str(record.outcome), cost, broke, loads, limited)

    def _line(self, m: Measurement, done: Sequence[Measurement]) -> str:
        metric = self.space.objective.metric
        head = f"confirm round {m.round + 1} (at most {self.spec.max_rounds}): {m.arm}"
        if m.value is None:
            return f"{head} {m.outcome}"
        base = next(
            (x.value for x in done if x.round == m.round and x.arm == BASELINE and x.value), None
        )
        tail = ""
        if base and m.arm != BASELINE:
            tail = f" (x{self._good(m.value, base):.3f} over this round's baseline)"
        return f"{head} {m.value:.2f} {metric}{tail}"

    # --- the statistics --------------------------------------------------------------------
    def _good(self, value: float, base: float) -> float:
        """How many times better ``value`` is than ``base`` (the ratio, or its inverse when the
        objective is minimised)."""
        return value / base if self.maximize else base / value

    def _points(self) -> list[str]:
        """The labels of the load points (none without a load mix)."""
        points = self.space.objective.loads
        return [p.label for p in points] if len(points) > 1 else []

    def _level(self, k: int) -> float:
        """The level of each interval over ``k`` candidates: family-wise over the candidates
        and over the rounds at which the confirmation may stop (from ``min_rounds`` to
        ``max_rounds``), so the verdict holds at whichever look ended the rounds
        (:func:`~autotune._stats.group_sequential_level`)."""
        low = max(2, self.spec.min_rounds)
        return group_sequential_level(
            self.spec.confidence, max(1, k), low, max(low, self.spec.max_rounds)
        )

    def _paired(self, done: Sequence[Measurement]) -> Paired:
        runs = [(m.round, m.arm, m.value, m.loads) for m in done]
        return Paired(runs, baseline=BASELINE, maximize=self.maximize, pool=True)

    def _load_choices(
        self, arms: Sequence[Arm], figures: Sequence[ArmFigure], done: Sequence[Measurement]
    ) -> tuple[LoadChoice, ...]:
        """With a load mix: at each load point, the candidate with the best confirmed ratio to
        the baseline there (at the verdict's confidence, family-wise over the candidates), among
        those that may still be the best there (all, when none is judged yet)."""
        if len(arms) < 2:
            return ()
        level = self._level(len(arms) - 1)
        paired = self._paired(done)
        trials = {a.key: a.trial for a in arms}
        out = []
        for label in self._points():
            contenders = [f.key for f in figures if f.dropped is None and label in f.contends]
            contest = paired.contest(
                contenders or [a.key for a in arms[1:]], level, self.spec.margin, label
            )
            if contest.leader is None:
                continue
            interval = paired.to_baseline(contest.leader, level, label)
            assert interval is not None
            ratio, low, high = interval
            runs = len(paired.pairs(contest.leader, BASELINE, label))
            out.append(
                LoadChoice(
                    label, contest.leader, trials[contest.leader], ratio, low, high, runs,
                    contest.rivals if contenders else (),
                )
            )  # fmt: skip
        return tuple(out)

    def _figures(self, arms: Sequence[Arm], done: Sequence[Measurement], k: int) -> list[ArmFigure]:
        """Each candidate's ratio to the baseline at the family-wise level, and why it was
        dropped, if it was: unstable, or behind the leader at :data:`CHOICE_CONFIDENCE`."""
        level = self._level(k)
        paired = self._paired(done)
        figures = []
        for arm in arms[1:]:
            failed = sum(1 for m in done if m.arm == arm.key and m.value is None)
            mine = [m for m in done if m.arm == arm.key and m.value is not None]
            over = [m for m in mine if m.broke]
            interval = paired.to_baseline(arm.key, level)
            at_loads = {
                label: i[0]
                for label in self._points()
                if (i := paired.to_baseline(arm.key, level, label)) is not None
            }
            figures.append(
                ArmFigure(
                    key=arm.key,
                    trial=arm.trial,
                    config=arm.config.to_params(),
                    searched=arm.searched,
                    ratio=None if interval is None else interval[0],
                    low=None if interval is None else interval[1],
                    high=None if interval is None else interval[2],
                    runs=sum(1 for m in done if m.arm == arm.key),
                    failed=failed,
                    at_loads=at_loads,
                    dropped=(
                        f"did not start in {failed} confirmation runs"
                        if failed >= MAX_FAILED_STARTS
                        else f"{_OVER[1]}{over[-1].broke[0]} in {len(over)} of {len(mine)} runs"
                        if len(over) >= MAX_FAILED_STARTS and 2 * len(over) > len(mine)
                        else self._over_limits(mine)
                    ),
                )
            )
        rounds = len({m.round for m in done})
        search = self._search_round(arms, done) if rounds else []
        if rounds + (1 if search else 0) < self.spec.min_rounds:
            return figures
        standing = [f.key for f in figures if f.dropped is None and f.ratio is not None]
        if not standing:
            return figures
        chooser = self._paired([*search, *done]) if search else paired
        by_objective = chooser.contest(standing, level, self.spec.margin)
        contests = [chooser.contest(standing, level, self.spec.margin, p) for p in self._points()]
        out = []
        for f in figures:
            if f.key in standing:
                contends = tuple(
                    str(c.load) for c in contests if f.key in c.standing and f.key not in c.behind
                )
                f = dataclasses.replace(f, contends=contends)
                versus = by_objective.behind.get(f.key)
                if versus is not None:
                    why = (
                        f"behind {by_objective.leader}: x{versus[0]:.3f} [{versus[1]:.3f}, "
                        f"{versus[2]:.3f}] of it"
                    )
                    if contends:
                        f = dataclasses.replace(f, behind=why)
                    else:
                        f = f.with_dropped(why + (", and at every load point" if contests else ""))
            out.append(f)
        return out

    def _search_round(self, arms: Sequence[Arm], done: Sequence[Measurement]) -> list[Measurement]:
        """The search's own measurement of the baseline and of each candidate, as a round
        before the first (:data:`SEARCH_ROUND`, no GPU time: it was spent), while the baseline
        re-measured by the confirmation says the box has not drifted since (:meth:`_drifted`);
        none where the search measured no baseline.

        They weigh only in choosing whom to go on measuring (a candidate behind the leader
        with them is dropped a round sooner), never in an interval the verdict states: each
        candidate was chosen for its search figure, and the lucky ones lead there."""
        from optuna.trial import TrialState

        wanted = {a.trial: a.key for a in arms if a.trial is not None}
        out = []
        base: float | None = None
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            record = TrialRecord.from_trial(t)
            if not record.measured or record.value is None or record.value <= 0:
                continue
            if record.role == BASELINE:
                if base is None:
                    base = record.value
                    out.append(Measurement(SEARCH_ROUND, BASELINE, base, "searched", 0.0))
            elif t.number in wanted:
                out.append(
                    Measurement(SEARCH_ROUND, wanted[t.number], record.value, "searched", 0.0)
                )
        if base is None or self._drifted(base, done):
            return []
        return out

    def _drifted(self, searched: float, done: Sequence[Measurement]) -> bool:
        """The baseline's search figure lies outside what its confirmation runs predict (at
        :data:`DRIFT_CONFIDENCE`, the start-to-start spread taken from the pooled spread of
        the paired ratios): the box has changed since the search, and the search's figures
        are left out."""
        runs = [math.log(m.value) for m in done if m.arm == BASELINE and m.value]
        spread = self._paired(done).pooled()
        if not runs or spread is None or spread[0] <= 0:
            return False
        from scipy.stats import t

        one = spread[0] / math.sqrt(2.0)  # a ratio's spread is two starts'
        n = len(runs)
        gap = abs(math.log(searched) - sum(runs) / n) / (one * math.sqrt(1.0 + 1.0 / n))
        return gap > float(t.ppf(0.5 + DRIFT_CONFIDENCE / 2.0, spread[1]))

    def _settled(self, arms: Sequence[Arm], done: Sequence[Measurement], dropped: set[str]) -> bool:
        """Every candidate still standing has had ``min_rounds`` runs (one that joined from
        the reserve late has its own)."""
        return all(
            sum(1 for m in done if m.arm == a.key) >= self.spec.min_rounds
            for a in arms[1:]
            if a.key not in dropped
        )

    def _over_limits(self, mine: Sequence[Measurement]) -> str | None:
        """Why a candidate cannot be trusted to meet a limit, if it cannot: after
        ``min_rounds`` runs, the confidence bound of its mean figure on the limit's side (at
        :data:`CHOICE_CONFIDENCE`, two-sided) lies beyond the limit. Judging the mean with its
        spread, not run by run, keeps a configuration whose true figure sits just over the
        limit from passing on the runs that happened to fall under it."""
        if len(mine) < self.spec.min_rounds:
            return None
        for c in self.space.objective.constraints:
            values = [m.limited[c.metric] for m in mine if c.metric in m.limited]
            interval = mean_interval(values, CHOICE_CONFIDENCE)
            if interval is None:
                continue
            mean, low, high = interval
            if (
                max(
                    c.violation(high) if c.max is not None else -1.0,
                    c.violation(low) if c.min is not None else -1.0,
                )
                > 0
            ):
                return (
                    f"{_OVER[0]}{c.describe()}: mean {mean:.4g} [{low:.4g}, {high:.4g}] "
                    f"over {len(values)} runs"
                )
        return None

    def _decided(self, figures: Sequence[ArmFigure], done: Sequence[Measurement]) -> bool:
        """The leader is decided against the baseline (its interval above 1, below 1, or
        within the margin of 1) and no candidate still in the running may beat it by more than
        the margin (at :data:`CHOICE_CONFIDENCE`); with a load mix, no contender at a load
        point may beat that point's leader there by more than the margin either. A figure at
        which every contender is slower than the baseline (:meth:`_all_slower`) is decided
        whichever of them leads: the choice there is no speculation."""
        standing = [f for f in figures if f.running]
        if not standing:
            return True
        margin = self.spec.margin
        paired = self._paired(done)
        level = self._level(len(figures))
        if not self._all_slower(paired, [f.key for f in standing], level):
            leader = self._leader(figures)
            if leader is None or self._undecided(leader):
                return False
            if not paired.contest([f.key for f in standing], level, margin).apart:
                return False
        for label in self._points():
            contenders = [f.key for f in figures if f.dropped is None and label in f.contends]
            if self._all_slower(paired, contenders, level, label):
                continue
            if not paired.contest(contenders, level, margin, label).apart:
                return False
        return True

    @staticmethod
    def _all_slower(
        paired: Paired, keys: Sequence[str], level: float, load: str | None = None
    ) -> bool:
        """Every one of ``keys`` is slower than the baseline (by the objective, or at one load
        point): its interval against the baseline, at the family-wise ``level``, lies wholly
        below 1. Telling them apart would only rank configurations none of which is chosen,
        so the rounds that would take are saved."""
        if not keys:
            return False
        intervals = [paired.to_baseline(key, level, load) for key in keys]
        return all(i is not None and i[2] < 1.0 for i in intervals)


def _floats(raw: object) -> dict[str, float]:
    """A stored mapping of figures, what is not a number left out."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float))}
