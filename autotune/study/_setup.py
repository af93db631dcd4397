"""Opening a study: checks before anything launches, creation, resumption, first trials."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._errors import ConfigError, StorageError
from autotune._redact import redact_url
from autotune.engines import Engine, create_engine
from autotune.space import SearchSpace, load_space, parse_space
from autotune.study._feasibility import fixed_refusal
from autotune.study._hooks import pause_at
from autotune.study._optuna import fixed_params
from autotune.study._record import (
    STUDY_CONFIRMED_TRIAL,
    STUDY_FINGERPRINT,
    STUDY_OPTIONS,
    STUDY_SPACE_SOURCE,
    STUDY_TARGET,
    STUDY_VERDICT,
    SYS_RERUN_OF,
)
from autotune.study._space_record import name_objectives, store_space, stored_space_text
from autotune.study._storage import StudyPaths, open_storage

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class StudyOptions:
    """How ``autotune study start`` / ``resume`` was asked to run."""

    study_name: str | None = None
    space_path: str | None = None
    storage: str | None = None
    studies_dir: str = "studies"
    artifacts_dir: str | None = None
    #: The total of finished trials to reach (``start --n-trials``, ``resume --target-trials``).
    n_trials: int | None = None
    #: Finished trials to add to those the study has (``resume --n-trials``); wins over n_trials.
    more_trials: int | None = None
    timeout_s: float | None = None
    seed: int | None = None
    sampler: str = "auto"
    n_startup_trials: int = 6
    informed: bool = True
    progress: bool | None = None
    #: Confirm the best candidates after the search (None: as the space's ``confirm`` says).
    confirm: bool | None = None
    #: The box's facts file, for ``--sampler twin`` on a real box (the simulator's profile
    #: gives them on the simulator).
    facts: str | None = None
    #: What the twin's prior is deliberately wrong by, (group, factor) pairs: the search
    #: benchmark's ``--twin-errors``.
    twin_errors: tuple[tuple[str, float], ...] = ()
    #: Run next to a live worker of the study on purpose (``resume --join``): a second worker.
    join: bool = False

    def __post_init__(self) -> None:
        """Refuse bad options before anything is opened or created (each names its option).

        Raises:
            ConfigError: a study name unsafe as a file name, an in-memory storage, a count,
                timeout or seed out of range, an unknown sampler, a ``--space`` or
                ``--facts`` that is a FIFO, a device or a directory (not a regular file).
        """
        from autotune.space._schema import special_file
        from autotune.study._choice import SAMPLERS
        from autotune.study._storage import check_storage_url, check_study_name

        if self.study_name is not None:
            check_study_name(self.study_name)
        for option, file in (("--space", self.space_path), ("--facts", self.facts)):
            what = None if file is None else special_file(file)
            if what is not None:
                raise ConfigError(
                    f"{file} is {what}, not a regular file",
                    source=option,
                    hint=f"give {option} the path of a file (YAML) on disk",
                )
        if self.storage is not None:
            check_storage_url(self.storage)
        for option, value in (("--n-trials", self.n_trials), ("--n-trials", self.more_trials)):
            if value is not None and not 1 <= value <= MAX_TRIALS:
                raise ConfigError(
                    f"must be between 1 and {MAX_TRIALS:,}, got {value}",
                    source=option,
                    hint="the number of finished trials to run",
                )
        if self.timeout_s is not None and not (
            math.isfinite(self.timeout_s) and 0 < self.timeout_s <= MAX_TIMEOUT_S
        ):
            raise ConfigError(
                f"must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:,.0f}, "
                f"got {self.timeout_s!r}",
                source="--timeout",
                hint="e.g. --timeout 3600 stops starting trials after an hour; leave it out for "
                "no limit",
            )
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(
                f"must be between 0 and {MAX_SEED} (2**32 - 1), got {self.seed}",
                source="--seed",
            )
        if self.sampler not in SAMPLERS:
            raise ConfigError(
                f"unknown sampler {self.sampler!r}",
                source="--sampler",
                hint="choose one of: " + ", ".join(SAMPLERS),
            )
        if self.n_startup_trials < 0:
            raise ConfigError(f"must be >= 0, got {self.n_startup_trials}", source="startup trials")


#: Bounds of the options (see :meth:`StudyOptions.__post_init__`).
MAX_TRIALS = 1_000_000
MAX_TIMEOUT_S = 365 * 24 * 3600.0
MAX_SEED = 2**32 - 1


def check_engine(space: SearchSpace, engine: Engine) -> None:
    """Refuse, before any launch, a space that this engine release cannot express."""
    engine.check_installed()
    problems: list[str] = []
    for param in space.parameters:
        # a range is judged by its ends: a knob the engine lacks is refused at either
        ends = (param.low, param.high) if param.low is not None else ()
        values = param.choices if param.kind == "categorical" else ends
        bad = engine.unsupported_values(param.name, values)
        problems += [f"parameters.{param.name}: {v!r}: {why}" for v, why in bad.items()]
    for knob, value in space.fixed.items():
        bad = engine.unsupported_values(knob, [value])
        problems += [f"fixed.{knob}: {v!r}: {why}" for v, why in bad.items()]
    if problems:
        raise ConfigError(
            f"{engine.describe()} cannot run part of this space: " + "; ".join(problems),
            source=space.source,
            hint="remove those values from the space, or use an engine release that has them",
        )
    refused = fixed_refusal(space, engine)
    if refused is not None:
        raise ConfigError(
            f"{engine.describe()} refuses every proposal of this space: {refused}",
            source=space.source,
            hint="change that fixed knob, or tune it under parameters:",
        )


def load_study_space(study: optuna.Study, space_path: str | None) -> SearchSpace:
    """The space a study was created with; a given file must match it."""
    text = stored_space_text(study)
    source = study.user_attrs.get(STUDY_SPACE_SOURCE, "<study>")
    fingerprint = study.user_attrs.get(STUDY_FINGERPRINT)
    if space_path is not None:
        space = load_space(space_path)
        if fingerprint is not None and space.fingerprint() != fingerprint:
            raise StorageError(
                f"study {study.study_name!r} was created with another search space "
                f"({source}); {space_path} differs in its parameters, fixed knobs, objective "
                "or workload",
                hint="resume without --space to use the study's own space, or start a new study "
                "(--study-name) for the new space",
            )
        return space
    if not isinstance(text, str):
        raise StorageError(
            f"study {study.study_name!r} was not created by autotune (no search space recorded)",
            hint="give the space with --space",
        )
    base = Path(source).parent if source and Path(str(source)).parent.exists() else None
    return _with_secrets(parse_space(text, source=str(source), base_dir=base), text)


#: Where a resumed study takes the value of a redacted ``--api-key`` when its file is gone.
API_KEY_ENV = "AUTOTUNE_API_KEY"


def _with_secrets(space: SearchSpace, stored: str) -> SearchSpace:
    """The stored space with the secrets that were redacted from it (``<redacted>``) put back.

    The study keeps its space as a normalised dump with every secret, and every ``engine.env``
    value of a name not known to be safe, replaced by ``<redacted>``
    (:func:`autotune._redact.redact_space_text`). On resume the secrets come from the original
    file when it is still there and differs from the stored space only in them (comments and
    layout aside); otherwise each redacted ``engine.env`` value is taken from the tuner's
    environment variable of the same name, and a redacted ``--api-key`` from
    ``AUTOTUNE_API_KEY``. A secret found nowhere refuses the resume with what to do.

    Raises:
        StorageError: a redacted secret that neither the file nor the environment supplies.
    """

    from autotune._redact import PLACEHOLDER, redact_space_text

    spec = space.engine
    if PLACEHOLDER not in repr(spec):
        return space
    original = Path(space.source)
    try:
        text = original.read_text(encoding="utf-8") if original.is_file() else None
    except (OSError, UnicodeDecodeError):
        text = None
    if text is not None and _same_data(redact_space_text(text), stored):
        return parse_space(text, source=space.source, base_dir=original.resolve().parent)
    env = dict(spec.env)
    missing: list[str] = []
    for name, value in spec.env.items():
        if PLACEHOLDER in value:
            if os.environ.get(name):
                env[name] = os.environ[name]
            else:
                missing.append(f"engine.env.{name} (set {name} in the environment)")
    args = list(spec.extra_args)
    for i, arg in enumerate(args):
        if PLACEHOLDER not in arg:
            continue
        after_key = (i > 0 and args[i - 1] == "--api-key" and arg == PLACEHOLDER) or (
            arg == f"--api-key={PLACEHOLDER}"
        )
        if after_key and os.environ.get(API_KEY_ENV):
            key = os.environ[API_KEY_ENV]
            args[i] = key if arg == PLACEHOLDER else f"--api-key={key}"
        else:
            how = f" (set {API_KEY_ENV} in the environment)" if after_key else ""
            missing.append(f"engine.extra_args[{i}]{how}")
    restored = dataclasses.replace(spec, env=env, extra_args=tuple(args))
    if PLACEHOLDER in repr(dataclasses.replace(restored, env={}, extra_args=())):
        missing.append("engine (a password in a URL or path)")
    if missing:
        raise StorageError(
            f"the study's space had secrets, which are not stored, and {space.source} is gone "
            "or changed: " + "; ".join(missing),
            hint="resume with --space FILE (the space file with its secrets), or supply them "
            "from the environment as listed",
        )
    return dataclasses.replace(space, engine=restored)


def _same_data(a: str, b: str) -> bool:
    """Whether two space texts hold the same YAML data (a study stored before the normalised
    dump kept the file's comments and layout)."""
    import yaml

    try:
        return bool(yaml.safe_load(a) == yaml.safe_load(b))
    except yaml.YAMLError:
        return a == b


#: Study attribute written last when a study is created: its space, target and first trials are
#: all stored. A study without it was left half-created by a tuner killed during ``start``.
STUDY_COMPLETE = "autotune:setup_complete"


log = logging.getLogger("autotune.study")


def setup_lock_path(paths: StudyPaths) -> Path:
    """The lock file that tuners of this host take to create, finish or recover the study.

    Beside the SQLite file (not the ``.lock`` that :func:`open_storage` takes while it creates
    the tables: that one is taken while this one is held), else in the study's logs folder.
    """
    db = paths.sqlite_file
    if db is not None:
        return db.with_name(db.name + ".setup.lock")
    return paths.logs_dir / ".setup.lock"


@contextlib.contextmanager
def setup_lock(paths: StudyPaths) -> Iterator[None]:
    """Hold :func:`setup_lock_path` (see :func:`autotune.study._claims.file_lock`)."""
    from autotune.study._claims import file_lock
    from autotune.study._storage import check_writable

    if paths.sqlite_file is None:
        # a database server that cannot be reached is refused before any folder is made
        open_storage(paths)
    lock = setup_lock_path(paths)
    # the folder must take the lock file: say so as a study-folder problem, before anything
    check_writable(lock.parent, what="study" if paths.sqlite_file is not None else "logs")
    with file_lock(lock):
        yield


def setup_complete(study: optuna.Study) -> bool:
    """Whether the study's set-up finished (or it is a study from before the marker that ran)."""
    from optuna.trial import TrialState

    if study.user_attrs.get(STUDY_COMPLETE):
        return True
    trials = study.get_trials(deepcopy=False)
    return any(t.state != TrialState.WAITING for t in trials)


def create_or_load(
    paths: StudyPaths,
    space: SearchSpace | None,
    options: StudyOptions,
    *,
    resume: bool,
    on_loaded: Callable[[optuna.Study], None] | None = None,
) -> tuple[optuna.Study, SearchSpace]:
    """Create the study (start) or load it (resume), checking it matches the space.

    ``on_loaded`` (resume) is called with the study as soon as it is loaded, before its space
    is read and checked (which may refuse the resume).

    ``start`` is called under :func:`setup_lock`. A study left half-created by a killed tuner
    (no :data:`STUDY_COMPLETE`) is taken over by ``start`` with the same space (its space
    attributes written again; the caller then finishes the set-up) or, with another space or none
    recorded yet, deleted and created again (it never ran a trial).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    if resume and paths.sqlite_file is not None and not paths.sqlite_file.exists():
        raise _no_such_study(paths)  # (opening the file would create an empty one)
    storage = open_storage(paths)
    existing = {s.study_name for s in storage.get_all_studies()}
    if resume:
        if paths.name not in existing:
            raise _no_such_study(paths)
        study = optuna.load_study(study_name=paths.name, storage=storage)
        if on_loaded is not None:
            on_loaded(study)
        if (
            options.space_path is None
            and stored_space_text(study) is None
            and not setup_complete(study)
        ):
            raise StorageError(
                f"study {paths.name!r} was not completely created: its tuner stopped before it "
                "stored the search space",
                hint=f"start it again with `autotune study start --space FILE --study-name "
                f"{paths.name}`: that finishes its set-up",
            )
        space = load_study_space(study, options.space_path)
        if study.metric_names is None:  # a study from before metric names: named now
            name_objectives(study, list(space.objective.metrics))
        return study, space
    assert space is not None
    if paths.name in existing:
        study = optuna.load_study(study_name=paths.name, storage=storage)
        fingerprint = study.user_attrs.get(STUDY_FINGERPRINT)
        if not setup_complete(study):
            if fingerprint == space.fingerprint():
                log.warning(
                    "study %r was left half-created (its tuner stopped during `study start`); "
                    "finishing its set-up",
                    paths.name,
                )
                store_start_options(study, options)
                _store_space(study, space, paths)
                return study, space
            log.warning(
                "study %r was left half-created by a stopped `study start` and never ran a "
                "trial; creating it again",
                paths.name,
            )
            optuna.delete_study(study_name=paths.name, storage=storage)
        elif fingerprint == space.fingerprint():
            raise StorageError(
                f"study {paths.name!r} already exists",
                hint=f"continue it with `autotune study resume --study-name {paths.name}`, or "
                "choose another --study-name",
            )
        else:
            raise StorageError(
                f"study {paths.name!r} already exists with another search space",
                hint="choose another --study-name for this space",
            )
    try:
        study = optuna.create_study(
            study_name=paths.name,
            storage=storage,
            directions=[optuna.study.StudyDirection[d.upper()] for d in space.objective.directions],
        )
    except optuna.exceptions.DuplicatedStudyError as e:
        raise StorageError(
            f"study {paths.name!r} was created by another tuner at the same moment",
            hint=f"join it with `autotune study resume --study-name {paths.name}`, or choose "
            "another --study-name",
        ) from e
    # the options first, so that a study with anything stored has them (a kill between the
    # space and the target no longer sends a 3-trial study towards the default 20)
    store_start_options(study, options)
    pause_at("created")
    _store_space(study, space, paths)
    pause_at("space")
    return study, space


def _store_space(study: optuna.Study, space: SearchSpace, paths: StudyPaths) -> None:
    """The objective's metric names, then the space (see :mod:`autotune.study._space_record`).

    Secrets (API keys, tokens, passwords) in the stored text are replaced; resume takes them
    back from the file or the environment (:func:`_with_secrets`).
    """
    from autotune.study._storage import artifact_store

    name_objectives(study, list(space.objective.metrics))
    try:
        store = artifact_store(paths)
    except StorageError as e:  # the run refuses it with its message; the space is still kept
        log.warning("%s", e)
        store = None
    store_space(study, space, store)


def finish_setup(
    study: optuna.Study, space: SearchSpace, engine: Engine, options: StudyOptions
) -> None:
    """Queue the first trials (those not queued yet) and mark the study complete, last."""
    enqueue_first(study, space, engine, options)
    pause_at("queued")
    study.set_user_attr(STUDY_COMPLETE, True)


def _no_such_study(paths: StudyPaths) -> StorageError:
    return StorageError(
        f"no study named {paths.name!r} in {redact_url(paths.storage_url)}",
        hint="list studies with `autotune study list`, or start one with "
        "`autotune study start --space FILE`",
    )


#: The target of a study that recorded none (Optuna-style default of ``study start``).
DEFAULT_TARGET = 20


def store_start_options(study: optuna.Study, options: StudyOptions) -> None:
    """Record what ``study start`` was asked, in one attribute (:data:`STUDY_OPTIONS`): the
    target (``--n-trials``), ``--confirm``/``--no-confirm`` (None: as the space says), the
    sampler with its startup trials and facts file (not its seed: a resumed random sampler
    with the same seed would propose the first run's configurations again).

    The verdict's attributes come first, holding their place until the confirmation writes
    them: optuna-dashboard lists a study's attributes in the order they were first written,
    so the verdict leads its study page."""
    if STUDY_VERDICT not in study.user_attrs:
        study.set_user_attr(
            STUDY_VERDICT, "not confirmed yet (`autotune study confirm` confirms the search's best)"
        )
        study.set_user_attr(STUDY_CONFIRMED_TRIAL, None)
    study.set_user_attr(
        STUDY_OPTIONS,
        {
            "n_trials": options.n_trials,
            "confirm": options.confirm,
            "sampler": options.sampler,
            "n_startup_trials": options.n_startup_trials,
            "facts": None if options.facts is None else str(Path(options.facts).resolve()),
        },
    )


def start_options(study: optuna.Study) -> dict[str, Any]:
    """The options ``study start`` recorded (empty for a study from before they were)."""
    stored = study.user_attrs.get(STUDY_OPTIONS)
    return dict(stored) if isinstance(stored, dict) else {}


#: The confirmation's settings that ``study confirm`` takes as options (kept once given).
CONFIRM_SETTINGS = ("candidates", "min_rounds", "max_rounds", "confidence")


def with_start_options(study: optuna.Study, options: StudyOptions) -> StudyOptions:
    """``options`` of a resume with what it leaves out taken from the study's start: its
    ``--confirm``/``--no-confirm``, its sampler (with startup trials and facts file); the
    target is the stored one (see :func:`set_target`). An option at its default counts as left
    out (``--sampler auto`` on a study started with ``--sampler tpe`` goes on with TPE)."""
    stored = start_options(study)
    defaults = StudyOptions()
    changes: dict[str, Any] = {}
    kinds: dict[str, tuple[type, ...]] = {
        "confirm": (bool,),
        "sampler": (str,),
        "n_startup_trials": (int,),
        "facts": (str,),
    }
    for name, kind in kinds.items():
        value = stored.get(name)
        if getattr(options, name) != getattr(defaults, name) or value is None:
            continue
        if isinstance(value, kind) and (kind == (bool,) or not isinstance(value, bool)):
            changes[name] = value
    return dataclasses.replace(options, **changes) if changes else options


def confirm_settings(study: optuna.Study, given: dict[str, Any]) -> dict[str, Any]:
    """The settings of the space's ``confirm`` to override: those given now (``study confirm
    --max-rounds ...``) over those an earlier ``study confirm`` of the study was given (see
    :func:`keep_confirm_settings`)."""
    kept = start_options(study).get("confirm_settings")
    settings = {
        k: v for k, v in (kept if isinstance(kept, dict) else {}).items() if k in CONFIRM_SETTINGS
    }
    settings.update({k: v for k, v in given.items() if v is not None and k in CONFIRM_SETTINGS})
    return settings


def keep_confirm_settings(study: optuna.Study, settings: dict[str, Any]) -> None:
    """Store the confirmation settings ``study confirm`` was given with the study's options, so
    that a confirmation resumed later (``study confirm`` or ``study resume`` without them) goes
    on with them."""
    stored = start_options(study)
    if settings and stored.get("confirm_settings") != settings:
        study.set_user_attr(STUDY_OPTIONS, {**stored, "confirm_settings": dict(settings)})


def set_target(study: optuna.Study, n_trials: int | None, *, more: int | None = None) -> int:
    """The number of finished trials the study aims for (stored, so resume knows it).

    ``n_trials`` is a total (``start --n-trials``, ``resume --target-trials``); ``more`` counts
    from the trials the study has already finished (``resume --n-trials``, as Optuna's
    ``n_trials`` does). Neither: the stored target (else the one ``study start`` recorded with
    its options, else :data:`DEFAULT_TARGET`). A total below what is already finished is
    refused rather than stored, so a mistyped number never lowers a shared study's target.

    Raises:
        ConfigError: ``n_trials`` is below the number of finished trials.
    """
    from optuna.trial import TrialState

    if more is not None or n_trials is not None:
        done = len(
            study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        )
        if more is not None:
            target = done + int(more)
        else:
            assert n_trials is not None
            target = int(n_trials)
            if target < done:
                raise ConfigError(
                    f"a target of {target} trials is below the {done} that study "
                    f"{study.study_name!r} has already finished",
                    source="--target-trials",
                    hint=f"--n-trials N runs N more trials; --target-trials must be at least "
                    f"{done}",
                )
        study.set_user_attr(STUDY_TARGET, target)
        return target
    for stored in (study.user_attrs.get(STUDY_TARGET), start_options(study).get("n_trials")):
        if isinstance(stored, int) and not isinstance(stored, bool):
            return int(stored)
    return DEFAULT_TARGET


def informed_configs(space: SearchSpace, engine: Engine) -> list[dict[str, Any]]:
    """First trials the tuner chooses itself: the engine's own automatic speculative choice.

    The knobs the engine picks by itself (:meth:`Engine.automatic_choice`; SGLang's (steps,
    top-k, draft tokens) for the target's architecture) when the space tunes them all; the other
    knobs come from the first configuration of the space file (else the middle of each range).
    A choice outside the space is dropped.
    """
    names = {p.name for p in space.parameters}
    choice = engine.automatic_choice()
    if not choice or not set(choice) <= names:
        return []
    base: dict[str, Any] = dict(space.enqueued[0]) if space.enqueued else {}
    for param in space.parameters:
        if param.name not in base:
            values = param.values()
            if values:
                base[param.name] = values[len(values) // 2]
            elif param.low is not None and param.high is not None:
                base[param.name] = param.normalise((param.low + param.high) / 2)
    base.update(choice)
    config = {k: v for k, v in base.items() if k in names}
    for param in space.parameters:
        if param.name in config and not param.contains(config[param.name]):
            return []
    if any(_same(config, dict(e)) for e in space.enqueued):
        return []
    return [config]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def make_engine(space: SearchSpace) -> Engine:
    engine = create_engine(space.engine)
    check_engine(space, engine)
    return engine


def enqueue_first(
    study: optuna.Study, space: SearchSpace, engine: Engine, options: StudyOptions
) -> None:
    """Queue the baseline, the space file's configurations and the tuner's informed choice.

    Idempotent: a first trial already in the study (queued by a set-up that was killed, in any
    state; re-runs aside) is not queued again.
    """
    known = [
        (t.user_attrs.get("role"), fixed_params(t) or {})
        for t in study.get_trials(deepcopy=False)
        if SYS_RERUN_OF not in t.user_attrs
    ]

    def queue(params: dict[str, Any], role: str) -> None:
        if any(r == role and _same(dict(p), params) for r, p in known):
            return
        study.enqueue_trial(params, user_attrs={"role": role}, skip_if_exists=False)

    if space.baseline is not None:
        queue({}, "baseline")
        pause_at("baseline")
    for params in space.enqueued:
        queue(dict(params), "enqueued")
    if options.informed:
        for params in informed_configs(space, engine):
            queue(params, "informed")
