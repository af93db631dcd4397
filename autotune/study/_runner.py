"""The tuning loop: ``autotune study start`` and ``autotune study resume``.

Trial 0 is the no-speculation baseline (unless the space turns it off), then the configurations
of the space file, then the tuner's own informed first trials, then the sampler's proposals,
until the study holds the requested number of finished trials or the time budget is spent.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._errors import AutotuneError, Interrupted
from autotune._knobs import ServerConfig
from autotune.bench import BenchmarkResult
from autotune.engines import Engine, SGLangEngine, known_flagset
from autotune.space import SearchSpace, load_space
from autotune.study._feasibility import Feasibility
from autotune.study._interrupts import Interrupts
from autotune.study._progress import (
    StudyProgress,
    close_debug_log,
    open_debug_log,
    progress_wanted,
)
from autotune.study._record import (
    INTERRUPTED,
    OK,
    STUDY_REFUSED,
    SYS_PROCESS,
    SYS_TUNER,
    TrialRecord,
    is_crash,
)
from autotune.study._sampler import build_sampler
from autotune.study._setup import (
    StudyOptions,
    create_or_load,
    informed_configs,
    make_engine,
    recover_stale,
    requeue,
    set_target,
    tuner_identity,
)
from autotune.study._storage import StudyPaths, artifact_store, retry_locked, study_paths
from autotune.study._trial import TrialFiles, TrialHooks, TrialRunner

if TYPE_CHECKING:
    import optuna

log = logging.getLogger("autotune.study")

#: A configuration whose first repeat is below this share of the best so far is not repeated.
EARLY_STOP_RATIO = 0.7


@dataclass(frozen=True)
class StudySummary:
    name: str
    storage_url: str
    finished: int
    target: int
    ran: int
    debug_log: Path
    stopped_by: str | None = None


def start_study(options: StudyOptions) -> StudySummary:
    """Create a study from a space file and run it."""
    if options.space_path is None:
        raise AutotuneError("a study needs a search space", hint="give one with --space FILE")
    space = load_space(options.space_path)
    name = options.study_name or space.name
    paths = study_paths(
        name,
        storage=options.storage,
        studies_dir=options.studies_dir,
        artifacts_dir=options.artifacts_dir,
    )
    engine = make_engine(space)
    study, space = create_or_load(paths, space, options, resume=False)
    target = set_target(study, options.n_trials)
    _enqueue_first(study, space, engine, options)
    return StudyRunner(study, space, engine, paths, options, target).run()


def resume_study(options: StudyOptions) -> StudySummary:
    """Continue a study: fail and re-queue trials of a dead tuner, then run to the target."""
    if options.study_name is None:
        raise AutotuneError("which study?", hint="give --study-name NAME")
    paths = study_paths(
        options.study_name,
        storage=options.storage,
        studies_dir=options.studies_dir,
        artifacts_dir=options.artifacts_dir,
    )
    study, space = create_or_load(paths, None, options, resume=True)
    engine = make_engine(space)
    recovered = recover_stale(study)
    if recovered:
        log.warning("re-running interrupted trials %s", recovered)
    target = set_target(study, options.n_trials)
    return StudyRunner(study, space, engine, paths, options, target).run()


def _enqueue_first(
    study: optuna.Study, space: SearchSpace, engine: Engine, options: StudyOptions
) -> None:
    if space.baseline is not None:
        retry_locked(lambda: study.enqueue_trial({}, user_attrs={"role": "baseline"}))
    for params in space.enqueued:
        retry_locked(partial(study.enqueue_trial, dict(params), user_attrs={"role": "enqueued"}))
    if options.informed:
        for params in informed_configs(space, engine):
            retry_locked(partial(study.enqueue_trial, params, user_attrs={"role": "informed"}))


class StudyRunner:
    """Runs one study to its target. See the module docstring."""

    def __init__(
        self,
        study: optuna.Study,
        space: SearchSpace,
        engine: Engine,
        paths: StudyPaths,
        options: StudyOptions,
        target: int,
    ) -> None:
        self.study = study
        self.space = space
        self.engine = engine
        self.paths = paths
        self.options = options
        self.target = target
        self.feasibility = Feasibility(space, engine)
        self.refused: Counter[str] = Counter(study.user_attrs.get(STUDY_REFUSED) or {})
        self.sampler = build_sampler(
            options.sampler,
            space,
            self.feasibility,
            seed=options.seed,
            constraints=self.constraints,
            on_refusal=self._refused,
            n_startup_trials=options.n_startup_trials,
        )
        study.sampler = self.sampler
        self.store = artifact_store(paths)
        self.trials = TrialRunner(
            space, engine, self.feasibility, sglang_command=self._sglang_command()
        )
        self.interrupts = Interrupts()

    # --- the loop --------------------------------------------------------------------------
    def run(self) -> StudySummary:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        debug_log = open_debug_log(self.paths.logs_dir)
        log.info(
            "study %s on %s, %s",
            self.study.study_name,
            self.paths.storage_url,
            self.engine.describe(),
        )
        started = time.monotonic()
        ran = 0
        stopped_by: str | None = None
        try:
            with (
                self.interrupts.installed(),
                StudyProgress(
                    self.target,
                    enabled=progress_wanted(self.options.progress),
                    title=self.study.study_name,
                ) as progress,
            ):
                while self.finished_count() < self.target:
                    if self.options.timeout_s is not None and (
                        time.monotonic() - started >= self.options.timeout_s
                    ):
                        stopped_by = "timeout"
                        break
                    self.run_one(progress)
                    ran += 1
        except Interrupted:
            raise
        except AutotuneError as e:
            log.error("study stopped: %s", e)
            e.hint = (e.hint + "; " if e.hint else "") + f"debug log: {debug_log}"
            raise
        except Exception as e:
            log.exception("internal error")
            raise AutotuneError(
                f"the study stopped on an internal error: {type(e).__name__}: {e}",
                hint=f"the traceback is in the debug log {debug_log}",
            ) from e
        finally:
            close_debug_log(debug_log)
        return StudySummary(
            self.study.study_name,
            self.paths.storage_url,
            self.finished_count(),
            self.target,
            ran,
            debug_log,
            stopped_by,
        )

    def finished_count(self) -> int:
        from optuna.trial import TrialState

        states = (TrialState.COMPLETE, TrialState.PRUNED)
        return len(self.study.get_trials(deepcopy=False, states=states))

    def run_one(self, progress: StudyProgress) -> None:
        from optuna.trial import TrialState

        self.feasibility.learn(self._crash_history())
        trial = retry_locked(self.study.ask, what="ask")
        number = trial.number
        storage = self.study._storage
        retry_locked(
            lambda: storage.set_trial_system_attr(trial._trial_id, SYS_TUNER, tuner_identity())
        )
        role = str(trial.user_attrs.get("role") or "search")
        params: dict[str, Any] | None
        if role == "baseline":
            params, config = None, self.space.baseline_config()
        else:
            params = self.space.suggest(trial)
            config = self.space.config_for(params)
        files = TrialFiles(self.paths.artifacts_dir / "trials" / f"{number:04d}")
        hooks = TrialHooks(
            on_launch=lambda identity: self._launched(trial, identity),
            on_phase=lambda phase: progress.phase(number, phase),
            early_stop=self._early_stop(),
        )
        try:
            record = self.trials.run(config, params, role=role, files=files, hooks=hooks)
        except KeyboardInterrupt:
            self._record_interrupted(trial, params, role, files)
            raise Interrupted(
                f"stopped by {self.interrupts.signal_name or 'SIGINT'}: the server of trial "
                f"{number} was stopped and the trial recorded as failed; it runs again on "
                f"`autotune study resume --study-name {self.study.study_name}`"
            ) from None
        finally:
            self.interrupts.watch_server(None)
        self._save(trial, record, config, files)
        state = TrialState.COMPLETE if record.measured else TrialState.PRUNED
        values = record.value if record.measured else None
        retry_locked(lambda: self.study.tell(trial, values, state=state), what="tell")
        progress.finished(
            self.finished_count(), self._line(number, record, config), best=self._best_text()
        )

    # --- recording -------------------------------------------------------------------------
    def _launched(self, trial: optuna.Trial, identity: dict[str, Any]) -> None:
        self.interrupts.watch_server(identity)
        retry_locked(
            lambda: self.study._storage.set_trial_system_attr(
                trial._trial_id, SYS_PROCESS, identity
            )
        )

    def _save(
        self, trial: optuna.Trial, record: TrialRecord, config: ServerConfig, files: TrialFiles
    ) -> None:
        base = self.baseline_value()
        if record.measured and record.value is not None:
            if record.role == "baseline":
                record.extra["speedup"] = 1.0
            elif base:
                ratio = record.value / base
                if self.space.objective.direction == "minimize":
                    ratio = base / record.value
                record.extra["speedup"] = round(ratio, 4)
        defaults = ServerConfig().to_params(include_unset=True)
        record.extra["config"] = {
            k: v for k, v in config.to_params().items() if v != defaults.get(k) or k == "tp_size"
        }
        for key, value in record.user_attrs().items():
            retry_locked(partial(trial.set_user_attr, key, value))
        attrs = record.user_attrs()
        names = ["starts"] + [c.describe() for c in self.space.objective.constraints]
        for name, value in zip(names, self._constraint_values(attrs), strict=True):
            retry_locked(partial(trial.set_constraint, name, value))
        self._upload(trial, files)
        retry_locked(lambda: self.study.set_user_attr(STUDY_REFUSED, dict(self.refused)))

    def _upload(self, trial: optuna.Trial, files: TrialFiles) -> None:
        from optuna.artifacts import upload_artifact

        for path in files.existing():
            try:
                upload_artifact(
                    artifact_store=self.store,
                    file_path=str(path),
                    study_or_trial=trial,
                    mimetype="application/json" if path.suffix == ".json" else "text/plain",
                )
            except OSError as e:
                log.warning("could not store artifact %s: %s", path, e)

    def _record_interrupted(
        self, trial: optuna.Trial, params: dict[str, Any] | None, role: str, files: TrialFiles
    ) -> None:
        from optuna.trial import TrialState

        reason = f"interrupted by {self.interrupts.signal_name or 'SIGINT'}"
        record = TrialRecord(outcome=INTERRUPTED, role=role, failure_line=reason)
        for key, value in record.user_attrs().items():
            retry_locked(partial(trial.set_user_attr, key, value))
        self._upload(trial, files)
        retry_locked(lambda: self.study.tell(trial, state=TrialState.FAIL), what="tell")
        requeue(self.study, params or {}, trial.number, role)

    # --- what the study knows so far ---------------------------------------------------------
    def _completed(self) -> list[optuna.trial.FrozenTrial]:
        from optuna.trial import TrialState

        return self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))

    def baseline_value(self) -> float | None:
        for t in self._completed():
            if t.user_attrs.get("role") == "baseline" and t.value is not None:
                return float(t.value)
        return None

    def _crash_history(self) -> list[tuple[int, dict[str, Any], str]]:
        from optuna.trial import TrialState

        out = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)):
            outcome = t.user_attrs.get("outcome")
            if t.params and is_crash(outcome):
                out.append((t.number, dict(t.params), str(outcome)))
        return out

    def constraints(self, trial: optuna.trial.FrozenTrial) -> list[float]:
        """``starts`` (<= 0: the server started and was measured), then the space's limits."""
        return self._constraint_values(trial.user_attrs)

    def _constraint_values(self, attrs: Mapping[str, Any]) -> list[float]:
        values = [-1.0 if attrs.get("outcome") == OK else 1.0]
        for c in self.space.objective.constraints:
            values.append(c.violation(attrs.get(c.metric)))
        return values

    def _best(self) -> optuna.trial.FrozenTrial | None:
        feasible = [
            t
            for t in self._completed()
            if t.value is not None and all(v <= 0 for v in self.constraints(t))
        ]
        if not feasible:
            return None
        maximize = self.space.objective.direction == "maximize"
        return (max if maximize else min)(feasible, key=lambda t: float(t.value or 0.0))

    def _best_text(self) -> str:
        best = self._best()
        if best is None or best.value is None:
            return "-"
        speedup = best.user_attrs.get("speedup")
        text = f"{best.value:.1f} (trial {best.number})"
        return text + (f" x{speedup:.2f}" if isinstance(speedup, (int, float)) else "")

    def _early_stop(self) -> Any:
        best = self._best()
        if best is None or best.value is None:
            return None
        metric = self.space.objective.metric
        maximize = self.space.objective.direction == "maximize"
        best_value = float(best.value)

        def stop(results: Sequence[BenchmarkResult]) -> bool:
            values = [r.metrics().get(metric) for r in results]
            known = [v for v in values if v is not None]
            if not known:
                return False
            mine = sorted(known)[len(known) // 2]
            return (
                mine < EARLY_STOP_RATIO * best_value
                if maximize
                else (mine > best_value / EARLY_STOP_RATIO)
            )

        return stop

    def _refused(self, category: str) -> None:
        self.refused[category] += 1

    def _sglang_command(self) -> Any:
        if self.engine.spec.kind != "sim":
            return None
        spec = self.engine.spec
        sglang = SGLangEngine(spec, flags=known_flagset(spec.sim.dialect))

        def command(config: ServerConfig, port: int) -> str:
            return sglang.build_launch(config, port=port, workload=self.space.workload).display()

        return command

    def _line(self, number: int, record: TrialRecord, config: ServerConfig) -> str:
        knobs = " ".join(
            f"{k}={v}"
            for k, v in (record.extra.get("config") or {}).items()
            if k != "speculative_algorithm"
        )
        if record.measured:
            speedup = record.extra.get("speedup")
            tail = f" x{speedup:.2f}" if isinstance(speedup, (int, float)) else ""
            return (
                f"trial {number} [{record.role}] ok: {record.value:.1f} "
                f"{self.space.objective.metric}{tail}  {knobs}"
            )
        when = f" after {record.startup_s:.1f} s" if record.startup_s is not None else ""
        return f"trial {number} [{record.role}] {record.outcome}{when}  {knobs}"
