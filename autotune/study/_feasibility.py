"""What the tuner knows, before launching, about configurations that cannot start.

Four sources, cheapest first:

* SGLang's own argument rules (:func:`autotune.space.check_rules`);
* the engine release: a knob it cannot express (:meth:`Engine.precheck`);
* known incompatibilities of SGLang with the GPUs the engine reports: FlashInfer all-reduce
  fusion only on SM90/SM100, torch symmetric memory only on SM90 (4, 6, 8 ranks) and SM100
  (6, 8 ranks), NCCL Tree not under CUDA-graph capture; and a memory estimate from the weights'
  size and the GPUs' memory (a static fraction that cannot even hold the weights);
* what the study has learned from its own crashes, attributed to the knobs that cause them:
  a KV-pool failure at fraction ``f`` means every fraction ``<= f`` fails too; a CUDA-graph
  capture out of memory at ``(f, max_bs, draft tokens, top-k)`` means every configuration at
  least as large in all of them fails too; an all-reduce mode that fails on the architecture or
  under graph capture fails whatever the other knobs are; any other crash rules out that exact
  configuration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune._knobs import ServerConfig
from autotune.engines import Engine, Hardware, Infeasible
from autotune.space import SearchSpace, check_rules
from autotune.study._record import CRASH_OUTCOMES, is_crash

if TYPE_CHECKING:
    import optuna

#: All-reduce modes that are safe defaults: their crashes are never blamed on the mode alone.
_PLAIN_MODES = frozenset({"nccl", "custom", "nccl_ring"})


@dataclass(frozen=True)
class _Lesson:
    """One learned rule: ``kind`` and the values it is about."""

    kind: str  # "kv_below", "graph_above", "mode", "mode_graphs", "exact"
    category: str
    trial: int
    values: tuple[Any, ...]


class Feasibility:
    """Judges configurations before launch. See the module docstring."""

    def __init__(self, space: SearchSpace, engine: Engine) -> None:
        self.space = space
        self.engine = engine
        self._hardware: Hardware | None = None
        self._weights: tuple[float | None, float | None] | None = None
        self._lessons: list[_Lesson] = []

    # --- what is known -------------------------------------------------------------------
    @property
    def hardware(self) -> Hardware:
        if self._hardware is None:
            self._hardware = self.engine.hardware()
        return self._hardware

    def weights(self, algorithm: str) -> tuple[float | None, float | None]:
        if self._weights is None:
            self._weights = self.engine.weights_gib(algorithm)
        return self._weights

    def check(
        self, config: ServerConfig, params: Mapping[str, Any] | None = None
    ) -> Infeasible | None:
        """Why ``config`` cannot start, or ``None`` when nothing known rules it out."""
        return (
            check_rules(config)
            or self.engine.precheck(config)
            or self.known(config)
            or self.learned(config, params)
        )

    def known(self, config: ServerConfig) -> Infeasible | None:
        hw = self.hardware
        tp = config.tp_size
        cc = hw.compute_capability
        if tp > 1 and cc is not None:
            sm = f"SM{cc[0]}{cc[1]}"
            if config.allreduce == "flashinfer_fusion" and cc[0] not in (9, 10):
                return Infeasible(
                    f"FlashInfer all-reduce fusion supports SM90 and SM100 only; "
                    f"these GPUs are {sm}",
                    "unsupported_arch",
                    "allreduce",
                )
            symm = {9: (4, 6, 8), 10: (6, 8)}
            if config.allreduce == "torch_symm_mem" and tp not in symm.get(cc[0], ()):
                return Infeasible(
                    f"torch symmetric memory all-reduce does not support {sm} with {tp} ranks "
                    "(SM90: 4, 6, 8; SM100: 6, 8)",
                    "unsupported_arch",
                    "allreduce",
                )
        if tp > 1 and config.allreduce == "nccl_tree" and not config.disable_cuda_graph:
            return Infeasible(
                "NCCL_ALGO=Tree cannot be captured in CUDA graphs; it needs --disable-cuda-graph",
                "graph_capture_other",
                "allreduce",
            )
        return self._memory(config)

    def _memory(self, config: ServerConfig) -> Infeasible | None:
        total = self.hardware.memory_gib
        fraction = config.mem_fraction_static
        if total is None or fraction is None:
            return None
        target, draft = self.weights(config.speculative_algorithm)
        if target is None:
            return None
        tp = max(1, config.tp_size)
        need = target / tp
        if config.speculative and draft is not None:
            # the simulated engine reports the draft head per GPU, a checkpoint its total
            need += draft if self.engine.spec.kind == "sim" else draft / tp
        static = total * fraction
        if static <= need:
            return Infeasible(
                f"mem_fraction_static={fraction} gives {static:.1f} GiB per GPU, not even the "
                f"{need:.1f} GiB of weights: no KV pool is left",
                "oom_kv_pool",
                "mem_fraction_static",
            )
        return None

    # --- what was learned ------------------------------------------------------------------
    def learn(self, trials: Iterable[tuple[int, Mapping[str, Any], str]]) -> None:
        """Rebuild the learned rules from ``(trial number, params, outcome)`` of past trials."""
        self._lessons = []
        for number, params, outcome in trials:
            lesson = self._lesson(number, params, outcome)
            if lesson is not None:
                self._lessons.append(lesson)

    def learn_from(self, study: optuna.Study) -> None:
        """Rebuild the learned rules from the crashed and refused trials of ``study``."""
        from optuna.trial import TrialState

        self.learn(
            (t.number, dict(t.params), str(t.user_attrs.get("outcome")))
            for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
            if t.params and is_crash(t.user_attrs.get("outcome"))
        )

    @property
    def lessons(self) -> int:
        return len(self._lessons)

    def _lesson(self, number: int, params: Mapping[str, Any], outcome: str) -> _Lesson | None:
        try:
            config = self.space.config_for(params)
        except Exception:  # a record from another space version: nothing to learn
            return None
        if outcome == "oom_kv_pool" and config.mem_fraction_static is not None:
            return _Lesson(
                "kv_below",
                outcome,
                number,
                (config.speculative_algorithm, config.mem_fraction_static),
            )
        if outcome == "oom_cuda_graph" and config.mem_fraction_static is not None:
            return _Lesson("graph_above", outcome, number, _graph_point(config))
        if outcome in ("unsupported_arch", "nccl_error") and config.allreduce not in _PLAIN_MODES:
            return _Lesson("mode", outcome, number, (config.allreduce,))
        if outcome == "graph_capture_other" and config.allreduce not in _PLAIN_MODES:
            return _Lesson("mode_graphs", outcome, number, (config.allreduce,))
        if outcome in CRASH_OUTCOMES:
            # any other crash: not blamed on one knob, only this exact configuration
            return _Lesson("exact", outcome, number, (_key(params),))
        return None

    def learned(
        self, config: ServerConfig, params: Mapping[str, Any] | None = None
    ) -> Infeasible | None:
        for lesson in self._lessons:
            reason = self._applies(lesson, config, params)
            if reason is not None:
                knob = {
                    "kv_below": "mem_fraction_static",
                    "graph_above": "mem_fraction_static",
                    "mode": "allreduce",
                    "mode_graphs": "allreduce",
                }.get(lesson.kind)
                return Infeasible(reason, lesson.category, knob)
        return None

    def _applies(
        self, lesson: _Lesson, config: ServerConfig, params: Mapping[str, Any] | None
    ) -> str | None:
        n = lesson.trial
        if lesson.kind == "kv_below":
            algorithm, fraction = lesson.values
            f = config.mem_fraction_static
            if f is not None and config.speculative_algorithm == algorithm and f <= fraction:
                return f"trial {n}: the KV pool did not fit at mem_fraction_static={fraction}"
        elif lesson.kind == "graph_above":
            f = config.mem_fraction_static
            if f is not None and all(
                mine >= theirs
                for mine, theirs in zip(_graph_point(config), lesson.values, strict=True)
            ):
                return (
                    f"trial {n}: CUDA-graph capture ran out of memory with a configuration "
                    "no larger than this one"
                )
        elif lesson.kind == "mode":
            if config.allreduce == lesson.values[0]:
                return f"trial {n}: all-reduce mode {config.allreduce} fails on these GPUs"
        elif lesson.kind == "mode_graphs":
            if config.allreduce == lesson.values[0] and not config.disable_cuda_graph:
                return f"trial {n}: all-reduce mode {config.allreduce} fails under CUDA graphs"
        elif lesson.kind == "exact" and params is not None and _key(params) == lesson.values[0]:
            return f"trial {n} crashed ({lesson.category}) with exactly this configuration"
        return None


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
