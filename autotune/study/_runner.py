"""The tuning loop: ``autotune study start`` and ``autotune study resume``.

Trial 0 is the no-speculation baseline (unless the space turns it off), then the configurations
of the space file, then the tuner's own informed first trials, then the sampler's proposals,
until the study holds the requested number of finished trials or the time budget is spent.

The loop judges each configuration before launch and records what its evaluator found
(:mod:`autotune.study._evaluate`): the real trial (launch, follow the log, benchmark), or, in
``autotune bench search``, the simulator's model; everything else is the same code for both.
"""

from __future__ import annotations

import contextlib
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._errors import AutotuneError, Cancelled, ConfigError, Interrupted, StorageError
from autotune._knobs import ServerConfig
from autotune._redact import redact_url
from autotune.bench import BenchmarkResult
from autotune.engines import Engine
from autotune.space import SearchSpace, load_space
from autotune.study._choice import (
    TWIN_SAMPLERS,
    SamplerChoice,
    build_sampler,
    choose_sampler,
    twin_ready,
)
from autotune.study._claims import (
    claim,
    configuration,
    count_claims,
    file_lock,
    recover_stale,
    requeue,
    rerun_then_fail,
    stop_confirmation_server,
    take_over_dead_run,
    waiting_baseline,
)
from autotune.study._evaluate import (
    RulesOnly,
    TrialContext,
    TrialEvaluator,
    TrialFiles,
    TrialHooks,
    refusal,
)
from autotune.study._feasibility import Feasibility
from autotune.study._hooks import pause_at
from autotune.study._interrupts import Interrupts
from autotune.study._liveness import Heartbeat, refuse_if_running
from autotune.study._notes import save_trial_note, save_verdict_note
from autotune.study._optuna import (
    get_trial,
    set_trial_system_attr,
    take_waiting_trial,
    trial_id_of,
)
from autotune.study._progress import (
    StudyProgress,
    close_debug_log,
    open_debug_log,
    progress_wanted,
)
from autotune.study._record import (
    STUDY_CONFIRM_PROCESS,
    STUDY_CONFIRMED_TRIAL,
    STUDY_CONFIRMING,
    STUDY_REFUSED,
    STUDY_TWIN_RANKING,
    STUDY_VERDICT,
    SYS_PROCESS,
    Outcome,
    TrialRecord,
    best_feasible_trial,
    feasible_trials,
    first_value,
    outcome_of,
    twin_ranking,
)
from autotune.study._setup import (
    StudyOptions,
    confirm_settings,
    create_or_load,
    finish_setup,
    keep_confirm_settings,
    make_engine,
    set_target,
    setup_complete,
    setup_lock,
    setup_lock_path,
    with_start_options,
)
from autotune.study._storage import (
    StudyPaths,
    artifact_store,
    check_writable,
    checkpoint,
    study_paths,
    upload_artifacts,
)
from autotune.study._trial import ServerEvaluator, TrialRunner
from autotune.study._verdict import Verdict

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
    #: ``timeout`` (the time budget), ``others`` (other workers run the last trials),
    #: ``twin`` (the twin sampler expects nothing better among the combinations left) or None.
    stopped_by: str | None = None
    #: Trials other workers were running when this one stopped.
    running_elsewhere: int = 0
    #: The confirmation's verdict (None: not confirmed by this run).
    verdict: Verdict | None = None
    #: Why the twin stopped the search, in its words (``stopped_by`` ``twin``).
    stop_reason: str | None = None


def start_study(options: StudyOptions) -> StudySummary:
    """Create a study from a space file and run it."""
    if options.space_path is None:
        raise AutotuneError("a study needs a search space", hint="give one with --space FILE")
    space = load_space(options.space_path)
    # a sampler that cannot run here is refused before the study is created
    _sampler_choice(space, options)
    _facts(space, options)
    name = options.study_name or space.name
    paths = study_paths(
        name,
        storage=options.storage,
        studies_dir=options.studies_dir,
        artifacts_dir=options.artifacts_dir,
    )
    engine = make_engine(space)
    # the set-up in an order a kill at any instant leaves usable: the study row, its space
    # (fingerprint last), the target, the first trials, then the "complete" marker; a `start`
    # or `resume` after a kill finishes it (see create_or_load). Under the study's lock, so two
    # simultaneous starts give one study and one "already exists".
    with setup_lock(paths):
        study, space = create_or_load(paths, space, options, resume=False)
        target = set_target(study, options.n_trials)
        pause_at("target")
        finish_setup(study, space, engine, options)
        heartbeat = Heartbeat(study, db=paths.sqlite_file)
        heartbeat.write()  # under the lock: a resume from now on sees this tuner alive
    with _ended_on_error(heartbeat):
        runner = StudyRunner(study, space, engine, paths, options, target, heartbeat=heartbeat)
    return runner.run()


def resume_study(options: StudyOptions) -> StudySummary:
    """Continue a study: fail and re-queue trials of a dead tuner, then run to the target.

    What the options leave out is as the study was started: its target (``--n-trials``) and
    its ``--confirm``/``--no-confirm``."""
    paths, study, space, heartbeat = _existing(options, command="study resume")
    with _ended_on_error(heartbeat):
        options = with_start_options(study, options)  # e.g. --no-confirm, unless overridden
        space = _with_confirm_settings(space, confirm_settings(study, {}))
        _sampler_choice(space, options)
        _facts(space, options)
        engine = make_engine(space)
        target = set_target(study, options.n_trials, more=options.more_trials)
        if not setup_complete(study):  # its `start` was killed: finish the set-up from its space
            with setup_lock(paths):
                if not setup_complete(study):
                    log.warning(
                        "study %r was left half-created by a stopped `study start`; queueing "
                        "its first trials",
                        study.study_name,
                    )
                    finish_setup(study, space, engine, options)
        runner = StudyRunner(study, space, engine, paths, options, target, heartbeat=heartbeat)
    return runner.run(recover=True)


@contextlib.contextmanager
def _ended_on_error(heartbeat: Heartbeat) -> Iterator[None]:
    """A tuner refused after its first beat ended (its record says so); it did not die."""
    try:
        yield
    except BaseException:
        heartbeat.stop()
        raise


def _with_confirm_settings(space: SearchSpace, settings: dict[str, Any]) -> SearchSpace:
    """``space`` with the confirmation settings a ``study confirm`` of the study was given."""
    import dataclasses

    if not settings:
        return space
    spec = dataclasses.replace(space.confirm, **settings)
    if spec.max_rounds < spec.min_rounds:
        return space
    return dataclasses.replace(space, confirm=spec)


def _sampler_choice(space: SearchSpace, options: StudyOptions) -> SamplerChoice:
    """The sampler ``options`` ask for on ``space`` (see :func:`choose_sampler`).

    Raises:
        ConfigError: an unknown sampler, or one that cannot run here.
    """
    twin = twin_ready(space, facts_known=options.facts is not None)
    return choose_sampler(options.sampler, conditional=space.conditional, twin=twin)


def _facts(space: SearchSpace, options: StudyOptions) -> Any:
    """The box's facts for the twin sampler (``--sampler twin``, or ``auto`` where the twin can
    serve the study); None for other samplers.

    Raises:
        ConfigError: the twin sampler on a real box without ``--facts``.
    """
    wanted = options.sampler in TWIN_SAMPLERS or (
        options.sampler == "auto" and twin_ready(space, facts_known=options.facts is not None)
    )
    if not wanted:
        return None
    from autotune.study._twin_trials import twin_facts

    return twin_facts(space, options.facts)


def _existing(
    options: StudyOptions, *, command: str
) -> tuple[StudyPaths, optuna.Study, SearchSpace, Heartbeat]:
    """The study ``options`` names, with its stored space (``resume`` and ``confirm``), and
    this tuner's heartbeat in it (written; the runner keeps it beating).

    First, before the space is read or checked, the servers of a dead run of the study are
    stopped and its trials taken over (:func:`take_over_dead_run`), also when the resume is
    then refused; each is said on stderr. Then a study with a live worker is refused unless
    ``options.join`` (:func:`refuse_if_running`); the check and this tuner's first beat are
    made under the study's lock, so two resumes at one instant do not both go on.
    """
    if options.study_name is None:
        raise AutotuneError("which study?", hint="give --study-name NAME")
    paths = study_paths(
        options.study_name,
        storage=options.storage,
        studies_dir=options.studies_dir,
        artifacts_dir=options.artifacts_dir,
    )
    lock = setup_lock_path(paths)

    beats: list[Heartbeat] = []

    def take_over(study: optuna.Study) -> None:
        # before the space is read (it may refuse the resume): no server of a dead run is left
        # holding the GPUs, whatever comes next
        for line in take_over_dead_run(study, lock=lock):
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        with file_lock(lock):
            if not options.join:
                refuse_if_running(study, command=command)
            beats.append(Heartbeat(study, db=paths.sqlite_file))
            beats[0].write()

    try:
        study, space = create_or_load(paths, None, options, resume=True, on_loaded=take_over)
    except BaseException:
        for beat in beats:  # refused after the first beat: this tuner ended, it did not die
            beat.stop()
        raise
    return paths, study, space, beats[0]


def confirm_study(options: StudyOptions, **changes: Any) -> StudySummary:
    """Confirm a study's best candidates (``changes``: settings of the space's ``confirm``
    to override, None for "as the space says")."""
    import dataclasses

    paths, study, space, heartbeat = _existing(options, command="study confirm")
    with _ended_on_error(heartbeat):
        # given now, or kept from an earlier `study confirm` of this study
        given = confirm_settings(study, changes)
        spec = dataclasses.replace(space.confirm, enabled=True, **given)
        if spec.max_rounds < spec.min_rounds:
            raise ConfigError(
                f"--max-rounds {spec.max_rounds} is below the minimum of {spec.min_rounds} rounds",
                hint="give --max-rounds at least --min-rounds",
            )
        keep_confirm_settings(study, given)
        space = dataclasses.replace(space, confirm=spec)
        engine = make_engine(space)
        target = set_target(study, None)
        runner = StudyRunner(study, space, engine, paths, options, target, heartbeat=heartbeat)
    return runner.run(recover=True, search=False)


class StudyRunner:
    """Runs one study to its target. See the module docstring.

    The keywords are the loop's seams, for the search benchmark (``autotune bench search``),
    which runs this same loop on the simulator's model: ``evaluator`` runs each configuration
    (default: launch the server and benchmark it, :class:`ServerEvaluator`); ``sampler``
    replaces :func:`build_sampler`'s (Optuna's samplers as they come); ``learn=False`` keeps
    crashes from the sampler's model and from the lessons; ``refuse=False`` refuses before
    launch only what SGLang's rules refuse (:class:`RulesOnly`); ``quiet`` prints no trial lines.
    """

    def __init__(
        self,
        study: optuna.Study,
        space: SearchSpace,
        engine: Engine,
        paths: StudyPaths,
        options: StudyOptions,
        target: int,
        *,
        evaluator: TrialEvaluator | None = None,
        sampler: optuna.samplers.BaseSampler | None = None,
        learn: bool = True,
        refuse: bool = True,
        quiet: bool = False,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        self.study = study
        #: This tuner's record in the study (None: no liveness record, the search benchmark).
        self.heartbeat = heartbeat
        self.space = space
        self.engine = engine
        self.paths = paths
        self.options = options
        self.target = target
        self.learn = learn
        self.quiet = quiet
        self.feasibility = Feasibility(space, engine) if refuse else RulesOnly(space, engine)
        self.refused: Counter[str] = Counter(study.user_attrs.get(STUDY_REFUSED) or {})
        #: The sampler's note (TPE in place of GP without PyTorch), printed once by :meth:`run`.
        self.sampler_note: str | None = None
        if sampler is None:
            choice = _sampler_choice(space, options)
            self.sampler_note = choice.note
        self.sampler = sampler or build_sampler(
            options.sampler,
            space,
            self.feasibility,
            seed=options.seed,
            constraints=self.constraints,
            on_refusal=self._refused,
            n_startup_trials=options.n_startup_trials,
            learn_from_crashes=learn,
            facts=_facts(space, options),
            twin_errors=dict(options.twin_errors),
        )
        study.sampler = self.sampler
        self.store = artifact_store(paths)
        self.evaluator = evaluator or ServerEvaluator(TrialRunner(space, engine, self.feasibility))
        self.interrupts = Interrupts()

    # --- the loop --------------------------------------------------------------------------
    def run(self, *, recover: bool = False, search: bool = True) -> StudySummary:
        """Run to the target (``recover``: first take over the trials of tuners that are gone),
        then confirm the best candidates where the space or the options ask for it;
        ``search=False`` confirms only (``autotune study confirm``)."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        debug_log = open_debug_log(self.paths.logs_dir)
        log.info(
            "study %s on %s, %s",
            self.study.study_name,
            redact_url(self.paths.storage_url),
            self.engine.describe(),
        )
        base = getattr(self.sampler, "base", None)
        aim = getattr(self.sampler, "aim", None)
        log.info(
            "sampler: %s%s%s",
            type(self.sampler).__name__,
            f" (aim: {aim})" if aim else "",
            "" if base is None else f" over {type(base).__name__}",
        )
        started = time.monotonic()
        beating = self.heartbeat if self.heartbeat is not None else contextlib.nullcontext()
        ran = elsewhere = 0
        stopped_by: str | None = None
        stop_reason: str | None = None
        verdict: Verdict | None = None
        try:
            with (
                beating,
                self.interrupts.installed(linger=True),
                StudyProgress(
                    self.target if search else self.finished_count(),
                    enabled=progress_wanted(self.options.progress),
                    title=self.study.study_name,
                    quiet=self.quiet,
                    confirm_runs=self._confirm_runs_planned(search),
                    searched=self.finished_count(),
                ) as progress,
            ):
                if search and self.sampler_note is not None:
                    log.warning("%s", self.sampler_note)
                    progress.note(self.sampler_note)
                lock = setup_lock_path(self.paths)
                for trial in recover_stale(self.study, lock=lock) if recover else []:
                    progress.finished(self.finished_count(), trial.line())
                while search:
                    # workers watch each other: the trial of a tuner of this host that died
                    # (kill -9) has its server stopped and runs again (a baseline first)
                    for trial in recover_stale(self.study, lock=lock, dead_only=True):
                        progress.finished(self.finished_count(), trial.line())
                    if self.interrupts.interrupted:  # noticed here, in ordinary code
                        raise self._between_trials()
                    claims = count_claims(self.study, self.engine.spec.timeouts)
                    if claims.finished >= self.target:
                        break
                    if claims.total >= self.target:
                        stopped_by, elsewhere = "others", claims.running
                        break
                    if self.options.timeout_s is not None and (
                        time.monotonic() - started >= self.options.timeout_s
                    ):
                        stopped_by = "timeout"
                        progress.search_stopped(f"--timeout {self.options.timeout_s:g} s reached")
                        break
                    why = self._twin_stop()
                    if why is not None:
                        log.info("the twin stops the search: %s", why)
                        progress.search_stopped(why)
                        stopped_by, stop_reason = "twin", why
                        break
                    # a disk that filled up since the last trial stops the study here, before a
                    # launch whose log could not be written (it would read as a start-up time-out)
                    check_writable(self.paths.artifacts_dir, what="artifacts")
                    self._check_storage()
                    if self.run_one(progress):
                        ran += 1
                    else:  # another worker asked at the same moment: let one of us go first
                        self.interrupts.sleep(random.uniform(0.2, 1.0))
                if not search or (stopped_by in (None, "twin") and self.confirm_wanted()):
                    verdict = self.confirm(progress)
                self._check_storage()
        except Interrupted:
            self._checkpoint()
            raise
        except KeyboardInterrupt:  # between trials: nothing was running
            raise self._between_trials() from None
        except AutotuneError as e:
            self._stop_on_full_disk(e)
            log.error("study stopped: %s", e)
            e.hint = (e.hint + "; " if e.hint else "") + f"debug log: {debug_log}"
            raise
        except Exception as e:
            self._stop_on_full_disk(e)
            log.exception("internal error")
            raise AutotuneError(
                f"the study stopped on an internal error: {type(e).__name__}: {e}",
                hint=f"the traceback is in the debug log {debug_log}",
            ) from e
        finally:
            close_debug_log(debug_log)
        self._checkpoint()
        return StudySummary(
            self.study.study_name,
            self.paths.storage_url,
            self.finished_count(),
            self.target,
            ran,
            debug_log,
            stopped_by,
            elsewhere,
            verdict,
            stop_reason,
        )

    def _check_storage(self) -> None:
        """Stop if the SQLite file under the study was deleted or replaced (see
        :class:`~autotune.study._liveness.Heartbeat`)."""
        if self.heartbeat is not None:
            self.heartbeat.check_storage()

    def _checkpoint(self) -> None:
        """Move what SQLite's write-ahead log holds into the study file (``NAME.db`` alone is
        then the study, to copy or share); nothing when the file is not the one opened."""
        if self.heartbeat is not None and self.heartbeat.check_storage_quietly() is not None:
            return
        checkpoint(self.paths)

    def confirm_wanted(self) -> bool:
        """Whether the study confirms its best after the search (the option, else the space;
        a survey's trials add to what the twin knows, not to the choice, so a survey confirms
        only when asked)."""
        if self.options.confirm is not None:
            return self.options.confirm
        return self.space.confirm.enabled and self.options.sampler != "survey"

    def _confirm_runs_planned(self, search: bool) -> int:
        """The confirmation's starts as planned before it begins: its candidates and the
        baseline for its least rounds (none where the study does not confirm)."""
        if search and not self.confirm_wanted():
            return 0
        spec = self.space.confirm
        return (spec.candidates + 1) * spec.min_rounds

    def confirm(self, progress: StudyProgress) -> Verdict | None:
        """Confirm the best candidates (:mod:`autotune.study._confirm`); None when another
        live worker of the study is confirming it."""
        from autotune.study._claims import tuner_alive, tuner_identity
        from autotune.study._confirm import Confirmation

        holder = self.study.user_attrs.get(STUDY_CONFIRMING)
        me = tuner_identity()
        if isinstance(holder, dict) and holder != me and tuner_alive(holder):
            progress.note("another worker is confirming this study; its verdict is in the report")
            return None
        self._stop_confirmation_server()
        self._keep_twin_ranking()
        self.study.set_user_attr(STUDY_CONFIRMING, me)
        if self.heartbeat is not None:
            self.heartbeat.doing("confirming", max_rounds=self.space.confirm.max_rounds)

        def ended() -> None:
            self._confirm_run_ended()
            progress.confirm_ended()

        confirmation = Confirmation(
            self.study,
            self.space,
            self.evaluator,
            folder=self.paths.artifacts_dir / "confirm",
            gpus=self.engine.spec.tp_size,
            hooks=self._confirm_hooks,
            on_line=progress.note,
            on_run=progress.confirming,
            after_run=ended,
        )
        try:
            verdict = confirmation.run()
        except (Cancelled, KeyboardInterrupt):
            raise Interrupted(
                f"stopped by {self.interrupts.signal_name or 'SIGINT'} during the confirmation; "
                "its measurements so far are kept: continue with `autotune study confirm "
                f"--study-name {self.study.study_name}`"
            ) from None
        finally:
            self.study.set_user_attr(STUDY_CONFIRMING, None)
            if self.heartbeat is not None:
                self.heartbeat.doing("search")
        self.study.set_user_attr(STUDY_VERDICT, verdict.headline)
        self.study.set_user_attr(STUDY_CONFIRMED_TRIAL, verdict.choice)
        save_verdict_note(self.study, verdict)
        log.info("verdict: %s", verdict.headline)
        return verdict

    def _keep_twin_ranking(self) -> None:
        """Write the twin sampler's ranking of the measured configurations to the study, where
        the confirmation takes its best few among the candidates; kept as it is while the
        study's measured trials are those it ranked (a confirmation that goes on keeps its
        candidates)."""
        from optuna.trial import TrialState

        from autotune.study._twin_sampler import TwinSampler

        if not isinstance(self.sampler, TwinSampler) or twin_ranking(self.study) is not None:
            return
        complete = sorted(
            t.number for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        )
        ranking = self.sampler.ranking(self.study)
        self.study.set_user_attr(STUDY_TWIN_RANKING, {"trials": complete, "ranking": ranking})
        log.info("the twin's ranking of the measured configurations: %s", ranking[:10])

    def _confirm_hooks(self) -> TrialHooks:
        return TrialHooks(
            before_launch=lambda pending: self.study.set_user_attr(STUDY_CONFIRM_PROCESS, pending),
            on_launch=self._confirm_launched,
            launching=self.interrupts.deferred,
            cancelled=self.interrupts.stop_requested,
            urgent=self.interrupts.urgent,
        )

    def _confirm_launched(self, identity: dict[str, Any]) -> None:
        self.interrupts.watch_server(identity)
        self.study.set_user_attr(STUDY_CONFIRM_PROCESS, identity)

    def _confirm_run_ended(self) -> None:
        self.interrupts.watch_server(None)
        self.study.set_user_attr(STUDY_CONFIRM_PROCESS, None)

    def _stop_confirmation_server(self) -> None:
        """Stop the server of a confirmation whose tuner was killed (it outlived its tuner)."""
        stop_confirmation_server(self.study)

    def _between_trials(self) -> Interrupted:
        return Interrupted(
            f"stopped by {self.interrupts.signal_name or 'SIGINT'} between trials; continue "
            f"with `autotune study resume --study-name {self.study.study_name}`"
        )

    def _stop_on_full_disk(self, error: BaseException) -> None:
        """On a full disk (ENOSPC, SQLite's "database or disk is full"), stop with one message.

        The trial this tuner was running is recorded as interrupted and queued again where the
        database still takes the writes; where it does not, the trial stays RUNNING under this
        tuner's identity and ``study resume`` recovers it (the tuner is gone by then). Returns
        when ``error`` is not a full disk.
        """
        from optuna.trial import TrialState

        from autotune.study._claims import tuner_identity
        from autotune.study._record import SYS_TUNER
        from autotune.study._storage import disk_full, full_disk_file, full_folder

        if not disk_full(error):
            return
        log.error("study stopped: the disk is full: %s", error)
        me = tuner_identity()
        recorded: list[int] = []
        left: list[int] = []
        try:
            running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        except Exception:  # the storage cannot even be read: resume will sort it out
            running = []
        for trial in running:
            owner = trial.system_attrs.get(SYS_TUNER)
            if not isinstance(owner, dict) or (owner.get("host"), owner.get("pid")) != (
                me["host"],
                me["pid"],
            ):
                continue
            try:
                rerun_then_fail(self.study, trial, "the disk filled up during this trial")
                recorded.append(trial.number)
            except Exception:
                left.append(trial.number)
        name = self.study.study_name
        db = self.paths.sqlite_file
        where = (
            full_disk_file(error)
            or full_folder([db.parent if db else None, self.paths.artifacts_dir])
            or db
            or self.paths.artifacts_dir
        )
        if recorded:
            what = (
                f"trial {', '.join(map(str, recorded))} was recorded as interrupted and runs "
                "again on resume"
            )
        elif left:
            what = (
                f"trial {', '.join(map(str, left))} could not be recorded (the database is "
                "full too); `study resume` recovers it"
            )
        else:
            what = "no trial was running"
        raise StorageError(
            f"the disk filled up during study {name!r} ({where}): the study stopped; {what}",
            url=self.paths.storage_url,
            hint=f"free some space on that disk, then continue with "
            f"`autotune study resume --study-name {name}`",
        ) from None

    def _twin_stop(self) -> str | None:
        """Why the twin sampler ends the search now (None: go on, or another sampler); never
        while trials are queued."""
        from optuna.trial import TrialState

        from autotune.study._twin_sampler import TwinSampler

        if not isinstance(self.sampler, TwinSampler):
            return None
        if self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return None
        return self.sampler.stop_reason(self.study)

    def finished_count(self) -> int:
        from optuna.trial import TrialState

        states = (TrialState.COMPLETE, TrialState.PRUNED)
        return len(self.study.get_trials(deepcopy=False, states=states))

    def run_one(self, progress: StudyProgress) -> bool:
        """Run the next trial; False when it was given back unrun (see :mod:`._claims`)."""
        from optuna.trial import TrialState

        if self.learn:
            self.feasibility.learn_from(self.study)
        trial = self._ask()
        number = trial.number
        role = str(trial.user_attrs.get("role") or "search")
        files = TrialFiles(self.paths.artifacts_dir / "trials" / f"{number:04d}")
        try:
            if not claim(self.study, trial_id_of(trial), self.target, self.engine.spec.timeouts):
                return False
            if self.heartbeat is not None:
                self.heartbeat.doing("search", number)
            params: dict[str, Any] | None
            if role == "baseline":
                params, config = None, self.space.baseline_config()
            else:
                params = self.space.suggest(trial)
                config = self.space.config_for(params)
            hooks = TrialHooks(
                before_launch=lambda pending: set_trial_system_attr(
                    self.study, trial_id_of(trial), SYS_PROCESS, pending
                ),
                on_launch=lambda identity: self._launched(trial, identity),
                launching=self.interrupts.deferred,
                on_phase=lambda phase: progress.phase(number, phase),
                early_stop=self._early_stop(),
                early_stop_at=self._early_stop_at,
                cancelled=self.interrupts.stop_requested,
                urgent=self.interrupts.urgent,
            )
            # refused before launch (no GPU time), else run by the evaluator
            record = refusal(self.feasibility, config, params, role=role)
            if record is None:
                progress.started()
                context = TrialContext(number, role, params, files, hooks)
                record = self.evaluator.evaluate(config, context)
            self._save(trial, record, config, files)
        except (Cancelled, KeyboardInterrupt):
            self._record_interrupted(trial, role, files)
            raise Interrupted(
                f"stopped by {self.interrupts.signal_name or 'SIGINT'}: the server of trial "
                f"{number} was stopped and the trial recorded as failed; it runs again on "
                f"`autotune study resume --study-name {self.study.study_name}`"
            ) from None
        finally:
            self.interrupts.watch_server(None)
        state = TrialState.COMPLETE if record.measured else TrialState.PRUNED
        values: float | Sequence[float] | None = None
        if record.measured:
            values = record.values if self.space.objective.multi else record.value
        self.study.tell(trial, values, state=state)
        if self.heartbeat is not None:
            self.heartbeat.doing("search")
        self._checkpoint()
        progress.finished(
            self.finished_count(),
            record.line(number, self.space.objective.metric),
            best=self._best_text(),
        )
        return True

    # --- recording -------------------------------------------------------------------------
    def _launched(self, trial: optuna.Trial, identity: dict[str, Any]) -> None:
        self.interrupts.watch_server(identity)
        set_trial_system_attr(self.study, trial_id_of(trial), SYS_PROCESS, identity)

    def _save(
        self, trial: optuna.Trial, record: TrialRecord, config: ServerConfig, files: TrialFiles
    ) -> None:
        base = self.baseline_value()
        if record.measured and record.value is not None:
            if record.role == "baseline":
                record.speedup = 1.0
            elif base:
                ratio = record.value / base
                if self.space.objective.direction == "minimize":
                    ratio = base / record.value
                record.speedup = round(ratio, 4)
        # what differs from SGLang's defaults, and every searched knob even at its default
        defaults = ServerConfig().to_params(include_unset=True)
        searched = set(self.space.distributions())
        record.config = {
            k: v
            for k, v in config.to_params().items()
            if v != defaults.get(k) or k == "tp_size" or k in searched
        }
        for key, value in record.user_attrs().items():
            trial.set_user_attr(key, value)
        save_trial_note(trial, record, self.space.objective.metric)
        attrs = record.user_attrs()
        names = ["starts"] + [c.describe() for c in self.space.objective.constraints]
        for name, value in zip(names, self._constraint_values(attrs), strict=True):
            trial.set_constraint(name, value)
        upload_artifacts(self.store, trial, files.existing())
        self.study.set_user_attr(STUDY_REFUSED, dict(self.refused))

    def _record_interrupted(self, trial: optuna.Trial, role: str, files: TrialFiles) -> None:
        """Record the trial as interrupted: its re-run queued first, then the trial failed (a
        kill between leaves a RUNNING trial of a dead tuner whose re-run is already queued:
        ``resume`` fails it without queueing it twice)."""
        from optuna.trial import TrialState

        reason = f"interrupted by {self.interrupts.signal_name or 'SIGINT'}"
        record = TrialRecord(outcome=Outcome.INTERRUPTED, role=role, failure_line=reason)
        for key, value in record.user_attrs().items():
            trial.set_user_attr(key, value)
        save_trial_note(trial, record, self.space.objective.metric)
        upload_artifacts(self.store, trial, files.existing())
        frozen = get_trial(self.study, trial_id_of(trial))
        requeue(self.study, configuration(frozen), trial.number, role, trial_id=trial_id_of(trial))
        self.study.tell(trial, state=TrialState.FAIL)

    def _ask(self) -> optuna.Trial:
        """The next trial: a baseline re-run queued behind other waiting trials first (Optuna
        pops waiting trials in number order), so the trials after it carry a speed-up."""
        trial_id = waiting_baseline(self.study)
        if trial_id is not None:
            taken = take_waiting_trial(self.study, trial_id)
            if taken is not None:
                return taken
        return self.study.ask()

    # --- what the study knows so far ---------------------------------------------------------
    def _completed(self) -> list[optuna.trial.FrozenTrial]:
        from optuna.trial import TrialState

        return self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))

    def baseline_value(self) -> float | None:
        for t in self._completed():
            value = first_value(t)
            if t.user_attrs.get("role") == "baseline" and value is not None:
                return value
        return None

    def constraints(self, trial: optuna.trial.FrozenTrial) -> list[float]:
        """``starts`` (<= 0: the server started and was measured), then the space's limits."""
        return self._constraint_values(trial.user_attrs)

    def _constraint_values(self, attrs: Mapping[str, Any]) -> list[float]:
        values = [-1.0 if outcome_of(attrs) is Outcome.OK else 1.0]
        for c in self.space.objective.constraints:
            values.append(c.violation(attrs.get(c.metric)))
        return values

    def _best(self) -> optuna.trial.FrozenTrial | None:
        """The best feasible trial by the (first) objective."""
        maximize = self.space.objective.direction == "maximize"
        return best_feasible_trial(
            self._completed(), maximize=maximize, constraints=self.constraints
        )

    def _best_text(self) -> str:
        best = self._best()
        value = None if best is None else first_value(best)
        if best is None or value is None:
            return "-"
        speedup = TrialRecord.from_trial(best).speedup
        text = f"{value:.1f} (trial {best.number})"
        return text + (f" x{speedup:.2f}" if speedup is not None else "")

    def _early_stop(self) -> Any:
        best = self._best()
        best_value = None if best is None else first_value(best)
        if best_value is None:
            return None
        return self._stop_short_of(best_value)

    def _early_stop_at(self, label: str) -> Any:
        """The early stop at one load point of a load mix: against the best figure any
        feasible measured trial reached at that point."""
        maximize = self.space.objective.direction == "maximize"
        figures = [
            v
            for t in feasible_trials(self._completed(), self.constraints)
            if (v := TrialRecord.from_trial(t).at_load(label)) is not None
        ]
        if not figures:
            return None
        return self._stop_short_of(max(figures) if maximize else min(figures))

    def _stop_short_of(self, best_value: float) -> Any:
        """Stop the repeats once their median is clearly worse than ``best_value``."""
        metric = self.space.objective.metric
        maximize = self.space.objective.direction == "maximize"

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
