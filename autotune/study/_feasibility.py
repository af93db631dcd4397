"""What the tuner knows, before launching, about configurations that cannot start.

Four sources, cheapest first, the first three the engine's (:class:`autotune.engines.Engine`):

* the engine's own argument rules (:meth:`Engine.check_rules`);
* the engine release: a knob it cannot express (:meth:`Engine.precheck`);
* known incompatibilities of the engine with the GPUs it reports
  (:meth:`Engine.incompatibility`: for SGLang, all-reduce kernels by architecture and NCCL Tree
  under CUDA-graph capture); and a memory estimate from the weights' size and the GPUs' memory
  (:meth:`Engine.memory_need_gib`: a static fraction that cannot even hold the weights);
* what the study has learned from its own crashes, attributed to the knobs that cause them:
  a KV pool that does not fit the budget at fraction ``f`` means every fraction ``<= f`` fails
  too, with the same algorithm and with every algorithm that needs at least as much of the static
  pool (any algorithm where the engine sizes the pool before loading a draft,
  :meth:`Engine.draft_in_static`; else one whose draft weighs at least as much); one that ran out
  of GPU memory while being allocated (the engine's crash rules tell the two apart from the
  deciding log line) means every fraction ``>= f`` with the same algorithm does; a CUDA-graph
  capture out of memory at ``(f, max_bs, draft tokens, top-k)`` means every configuration at
  least as large in all of them fails too; an all-reduce mode that fails on the architecture or
  under graph capture fails whatever the other knobs are; any other crash rules out that exact
  configuration;
* what the study's own starts printed about their memory (:mod:`autotune.study._memory`): a
  KV pool or CUDA-graph capture that the engine predicts, from a start's memory lines, to run out
  of memory at another fraction or graph size.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune._knobs import ServerConfig
from autotune.engines import Engine, Hardware, Infeasible
from autotune.space import SearchSpace
from autotune.study._memory import MemoryReadings
from autotune.study._record import Outcome, outcome_of

if TYPE_CHECKING:
    import optuna

#: All-reduce modes that are safe defaults: their crashes are never blamed on the mode alone.
_PLAIN_MODES = frozenset({"nccl", "custom", "nccl_ring"})


class LessonKind(enum.Enum):
    """What a learned rule rules out, and the knob a refusal by it blames."""

    #: A KV pool that did not fit at fraction ``f``: every fraction ``<= f`` (same algorithm).
    KV_BELOW = "kv_below"
    #: A KV pool sized at fraction ``f`` that ran out of GPU memory while being allocated: every
    #: fraction ``>= f`` (same algorithm).
    KV_ABOVE = "kv_above"
    #: A CUDA-graph capture out of memory: every configuration at least as large in each knob.
    GRAPH_ABOVE = "graph_above"
    #: An all-reduce mode that fails on these GPUs, whatever the other knobs.
    MODE = "mode"
    #: An all-reduce mode that fails under CUDA-graph capture.
    MODE_GRAPHS = "mode_graphs"
    #: Any other crash: that exact configuration only.
    EXACT = "exact"

    @property
    def knob(self) -> str | None:
        """The knob a refusal names (``None``: the whole configuration)."""
        return _KNOBS.get(self)


_KNOBS: dict[LessonKind, str] = {
    LessonKind.KV_BELOW: "mem_fraction_static",
    LessonKind.KV_ABOVE: "mem_fraction_static",
    LessonKind.GRAPH_ABOVE: "mem_fraction_static",
    LessonKind.MODE: "allreduce",
    LessonKind.MODE_GRAPHS: "allreduce",
}


@dataclass(frozen=True)
class _Lesson:
    """One learned rule: ``kind``, the crash it was learned from, and the values it is about."""

    kind: LessonKind
    category: Outcome
    trial: int
    values: tuple[Any, ...]


class Feasibility:
    """Judges configurations before launch. See the module docstring."""

    def __init__(self, space: SearchSpace, engine: Engine) -> None:
        self.space = space
        self.engine = engine
        self._hardware: Hardware | None = None
        self._weights: dict[str, tuple[float | None, float | None]] = {}
        self._lessons: list[_Lesson] = []
        #: The memory readings of the study's starts (recorded by the trials, read back here).
        self.memory = MemoryReadings(engine)

    # --- what is known -------------------------------------------------------------------
    @property
    def hardware(self) -> Hardware:
        if self._hardware is None:
            self._hardware = self.engine.hardware()
        return self._hardware

    def weights(self, algorithm: str) -> tuple[float | None, float | None]:
        """The engine's weight sizes with ``algorithm``'s draft (read once per algorithm)."""
        if algorithm not in self._weights:
            self._weights[algorithm] = self.engine.weights_gib(algorithm)
        return self._weights[algorithm]

    def check(
        self, config: ServerConfig, params: Mapping[str, Any] | None = None
    ) -> Infeasible | None:
        """Why ``config`` cannot start, or ``None`` when nothing known rules it out."""
        return (
            self.engine.check_rules(config)
            or self.engine.precheck(config)
            or self.known(config)
            or self.learned(config, params)
        )

    def known(self, config: ServerConfig) -> Infeasible | None:
        return self.engine.incompatibility(config, self.hardware) or self._memory(config)

    def _memory(self, config: ServerConfig) -> Infeasible | None:
        total = self.hardware.memory_gib
        fraction = config.mem_fraction_static
        if total is None or fraction is None:
            return None
        weights = self.weights(config.speculative_algorithm)
        need = self.engine.memory_need_gib(config, weights=weights)
        if need is None:
            return None
        static = total * fraction
        if static <= need:
            return Infeasible(
                f"mem_fraction_static={fraction} gives {static:.1f} GiB per GPU, not even the "
                f"{need:.1f} GiB of weights (with any memory the engine reserves beside them): "
                "no KV pool is left",
                "oom_kv_pool",
                "mem_fraction_static",
            )
        return None

    # --- what was learned ------------------------------------------------------------------
    def learn(
        self,
        trials: Iterable[tuple[int, Mapping[str, Any], Outcome]],
        failure_lines: Mapping[int, str] | None = None,
    ) -> None:
        """Rebuild the learned rules from ``(trial number, params, outcome)`` of past trials and
        the log lines that decided their crashes (``failure_lines``, by trial number)."""
        lines = failure_lines or {}
        self._lessons = []
        for number, params, outcome in trials:
            lesson = self._lesson(number, params, Outcome(outcome), lines.get(number))
            if lesson is not None:
                self._lessons.append(lesson)

    def learn_from(self, study: optuna.Study) -> None:
        """Rebuild the learned rules from the crashed and refused trials of ``study``, and the
        memory readings from every finished trial that recorded one."""
        from optuna.trial import TrialState

        self.memory.learn_from(study)
        pruned = study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
        outcomes = [(t, outcome_of(t.user_attrs)) for t in pruned if t.params]
        learned = [(t, o) for t, o in outcomes if o is not None and o.unmeasurable]
        lines = {
            t.number: line
            for t, _ in learned
            if isinstance(line := t.user_attrs.get("failure_line"), str)
        }
        self.learn(((t.number, dict(t.params), o) for t, o in learned), lines)

    @property
    def lessons(self) -> int:
        return len(self._lessons)

    def _lesson(
        self, number: int, params: Mapping[str, Any], outcome: Outcome, failure_line: str | None
    ) -> _Lesson | None:
        if not outcome.unmeasurable:  # a taken port: nothing to learn of the configuration
            return None
        try:
            config = self.space.config_for(params)
        except Exception:  # a record from another space version: nothing to learn
            return None
        fraction = config.mem_fraction_static
        special = config.allreduce not in _PLAIN_MODES
        if outcome is Outcome.OOM_KV_POOL and fraction is not None:
            values = (config.speculative_algorithm, fraction)
            fix = self.engine.crash_rules().fraction_fix(outcome.value, failure_line)
            kind = LessonKind.KV_ABOVE if fix == "lower" else LessonKind.KV_BELOW
            return _Lesson(kind, outcome, number, values)
        if outcome is Outcome.OOM_CUDA_GRAPH and fraction is not None:
            return _Lesson(LessonKind.GRAPH_ABOVE, outcome, number, _graph_point(config))
        if outcome in (Outcome.UNSUPPORTED_ARCH, Outcome.NCCL_ERROR) and special:
            return _Lesson(LessonKind.MODE, outcome, number, (config.allreduce,))
        if outcome is Outcome.GRAPH_CAPTURE_OTHER and special:
            return _Lesson(LessonKind.MODE_GRAPHS, outcome, number, (config.allreduce,))
        if outcome.crashed:
            # any other crash: not blamed on one knob, only this exact configuration
            return _Lesson(LessonKind.EXACT, outcome, number, (_key(params),))
        return None

    def learned(
        self, config: ServerConfig, params: Mapping[str, Any] | None = None
    ) -> Infeasible | None:
        for lesson in self._lessons:
            reason = self._applies(lesson, config, params)
            if reason is not None:
                return Infeasible(reason, lesson.category.value, lesson.kind.knob)
        return self.memory.refusal(config)

    def _applies(
        self, lesson: _Lesson, config: ServerConfig, params: Mapping[str, Any] | None
    ) -> str | None:
        n = lesson.trial
        if lesson.kind is LessonKind.KV_BELOW:
            algorithm, fraction = lesson.values
            f = config.mem_fraction_static
            if f is None or f > fraction:
                return None
            why = self._kv_condemns(algorithm, config.speculative_algorithm)
            if why is not None:
                return f"trial {n}: the KV pool did not fit at mem_fraction_static={fraction}{why}"
        elif lesson.kind is LessonKind.KV_ABOVE:
            algorithm, fraction = lesson.values
            f = config.mem_fraction_static
            if f is not None and config.speculative_algorithm == algorithm and f >= fraction:
                return (
                    f"trial {n}: the KV pool sized at mem_fraction_static={fraction} ran out of "
                    "GPU memory while being allocated"
                )
        elif lesson.kind is LessonKind.GRAPH_ABOVE:
            f = config.mem_fraction_static
            if f is not None and all(
                mine >= theirs
                for mine, theirs in zip(_graph_point(config), lesson.values, strict=True)
            ):
                return (
                    f"trial {n}: CUDA-graph capture ran out of memory with a configuration "
                    "no larger than this one"
                )
        elif lesson.kind is LessonKind.MODE:
            if config.allreduce == lesson.values[0]:
                return f"trial {n}: all-reduce mode {config.allreduce} fails on these GPUs"
        elif lesson.kind is LessonKind.MODE_GRAPHS:
            if config.allreduce == lesson.values[0] and not config.disable_cuda_graph:
                return f"trial {n}: all-reduce mode {config.allreduce} fails under CUDA graphs"
        elif (
            lesson.kind is LessonKind.EXACT
            and params is not None
            and _key(params) == lesson.values[0]
        ):
            return f"trial {n} crashed ({lesson.category}) with exactly this configuration"
        return None

    def _kv_condemns(self, failed: str, other: str) -> str | None:
        """Whether a KV pool that did not fit with algorithm ``failed`` at a fraction fails there
        with ``other`` too: the explanation to add to the refusal ("" for the same algorithm),
        or None when it need not."""
        if failed == other:
            return ""
        if not self.engine.draft_in_static():
            return (
                f" with speculative_algorithm {failed}, and {self.engine.describe()} sizes the "
                "KV pool before any draft is loaded: it fails the same with any algorithm"
            )
        if other == "none":
            return None
        if failed != "none":
            smaller, larger = self.weights(failed)[1], self.weights(other)[1]
            if smaller is None or larger is None or larger < smaller:
                return None
        return (
            f" with speculative_algorithm {failed}, and {other}'s draft weights come out of "
            "the same static pool"
        )


#: Random proposals a space is judged by at study start (:func:`fixed_refusal`).
FIXED_PROBE_PROPOSALS = 200


def fixed_refusal(space: SearchSpace, engine: Engine) -> str | None:
    """Why the engine's rules refuse every proposal of ``space`` for one of its fixed knobs
    (NGRAM fixed with adaptive speculation on), whatever the sampler tunes; None otherwise.

    A rule that refuses only some proposals, or blames a tuned knob, is left to the study: the
    sampler learns around it.
    """
    blamed: Infeasible | None = None
    for params in space.sample(FIXED_PROBE_PROPOSALS, seed=0):
        refusal = engine.check_rules(space.config_for(params))
        if refusal is None or refusal.knob not in space.fixed:
            return None
        blamed = blamed or refusal
    if blamed is None:
        return None
    return f"fixed.{blamed.knob}: {blamed.reason}"


def _graph_point(config: ServerConfig) -> tuple[float, float, float, float]:
    """Knobs that grow the CUDA-graph pool or shrink the memory outside the static pool."""
    steps = config.speculative_num_steps or 0
    return (
        float(config.mem_fraction_static or 0.0),
        float(config.cuda_graph_max_bs or 0),
        float(config.speculative_num_draft_tokens or (steps + 1 if config.speculative else 0)),
        float(config.speculative_eagle_topk or 0),
    )


def _key(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, _norm(v)) for k, v in params.items()))


def _norm(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value
