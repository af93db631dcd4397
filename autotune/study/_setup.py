"""Opening a study: checks before anything launches, creation, resumption, first trials."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._errors import ConfigError, StorageError
from autotune._knobs import ServerConfig
from autotune.engines import Engine, SGLangEngine, create_engine, known_flagset
from autotune.space import SearchSpace, load_space, parse_space
from autotune.study._record import (
    STUDY_FINGERPRINT,
    STUDY_METRIC,
    STUDY_SPACE_SOURCE,
    STUDY_SPACE_TEXT,
    STUDY_TARGET,
)
from autotune.study._storage import StudyPaths, open_storage, retry_locked

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
    n_trials: int | None = None
    timeout_s: float | None = None
    seed: int | None = None
    sampler: str = "auto"
    n_startup_trials: int = 6
    informed: bool = True
    progress: bool | None = None


def check_engine(space: SearchSpace, engine: Engine) -> None:
    """Refuse, before any launch, a space that this engine release cannot express."""
    engine.check_installed()
    problems: list[str] = []
    for param in space.parameters:
        if param.kind == "categorical":
            bad = engine.unsupported_values(param.name, param.choices)
            problems += [f"parameters.{param.name}: {v!r}: {why}" for v, why in bad.items()]
    for knob, value in space.fixed.items():
        bad = engine.unsupported_values(knob, [value])
        problems += [f"fixed.{knob}: {v!r}: {why}" for v, why in bad.items()]
    if problems:
        raise ConfigError(
            f"{engine.describe()} cannot run part of this space: " + "; ".join(problems),
            source=space.source,
            hint="remove those values from the space, or use an SGLang release that has them",
        )


def load_study_space(study: optuna.Study, space_path: str | None) -> SearchSpace:
    """The space a study was created with; a given file must match it."""
    text = study.user_attrs.get(STUDY_SPACE_TEXT)
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
    return parse_space(text, source=str(source), base_dir=base)


def create_or_load(
    paths: StudyPaths, space: SearchSpace | None, options: StudyOptions, *, resume: bool
) -> tuple[optuna.Study, SearchSpace]:
    """Create the study (start) or load it (resume), checking it matches the space."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    if resume and paths.sqlite_file is not None and not paths.sqlite_file.exists():
        raise _no_such_study(paths)  # (opening the file would create an empty one)
    storage = open_storage(paths)
    existing = {s.study_name for s in retry_locked(storage.get_all_studies, what="read")}
    if resume:
        if paths.name not in existing:
            raise _no_such_study(paths)
        study = optuna.load_study(study_name=paths.name, storage=storage)
        space = load_study_space(study, options.space_path)
        return study, space
    assert space is not None
    if paths.name in existing:
        study = optuna.load_study(study_name=paths.name, storage=storage)
        if study.user_attrs.get(STUDY_FINGERPRINT) == space.fingerprint():
            raise StorageError(
                f"study {paths.name!r} already exists",
                hint=f"continue it with `autotune study resume --study-name {paths.name}`, or "
                "choose another --study-name",
            )
        raise StorageError(
            f"study {paths.name!r} already exists with another search space",
            hint="choose another --study-name for this space",
        )
    direction = space.objective.direction
    study = optuna.create_study(
        study_name=paths.name,
        storage=storage,
        direction="minimize" if direction == "minimize" else "maximize",
    )
    attrs = {
        STUDY_FINGERPRINT: space.fingerprint(),
        STUDY_SPACE_SOURCE: str(Path(space.source).resolve())
        if Path(space.source).exists()
        else space.source,
        STUDY_SPACE_TEXT: Path(space.source).read_text(encoding="utf-8")
        if Path(space.source).exists()
        else "",
        STUDY_METRIC: space.objective.metric,
    }
    for key, value in attrs.items():
        retry_locked(partial(study.set_user_attr, key, value))
    return study, space


def _no_such_study(paths: StudyPaths) -> StorageError:
    return StorageError(
        f"no study named {paths.name!r} in {paths.storage_url}",
        hint="list studies with `autotune study list`, or start one with "
        "`autotune study start --space FILE`",
    )


def set_target(study: optuna.Study, n_trials: int | None) -> int:
    """The number of finished trials the study aims for (stored, so resume knows it)."""
    if n_trials is not None:
        retry_locked(lambda: study.set_user_attr(STUDY_TARGET, int(n_trials)))
        return n_trials
    stored = study.user_attrs.get(STUDY_TARGET)
    return int(stored) if isinstance(stored, int) else 20


def informed_configs(space: SearchSpace, engine: Engine) -> list[dict[str, Any]]:
    """First trials the tuner chooses itself: SGLang's own automatic speculative choice.

    SGLang picks (steps, top-k, draft tokens) = (5, 4, 8) for Llama and Grok models and
    (3, 1, 4) otherwise; the other knobs come from the first configuration of the space file
    (else the middle of each range). Values outside the space are dropped.
    """
    names = {p.name for p in space.parameters}
    spec_knobs = {"speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"}
    if not spec_knobs <= names:
        return []
    arch = _architecture(engine)
    steps, topk, draft = (5, 4, 8) if arch and ("Llama" in arch or "Grok" in arch) else (3, 1, 4)
    base: dict[str, Any] = dict(space.enqueued[0]) if space.enqueued else {}
    for param in space.parameters:
        if param.name not in base:
            values = param.values()
            if values:
                base[param.name] = values[len(values) // 2]
            elif param.low is not None and param.high is not None:
                base[param.name] = param.normalise((param.low + param.high) / 2)
    base.update(
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft,
    )
    config = {k: v for k, v in base.items() if k in names}
    for param in space.parameters:
        if param.name in config and not param.contains(config[param.name]):
            return []
    if any(_same(config, dict(e)) for e in space.enqueued):
        return []
    return [config]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _architecture(engine: Engine) -> str | None:
    spec = engine.spec
    if spec.kind == "sim":
        from autotune.sim import load_profile

        try:
            return load_profile(spec.sim.profile).model.architecture
        except ConfigError:
            return None
    config_json = Path(spec.model_path) / "config.json"
    try:
        data = json.loads(config_json.read_text())
        archs = data.get("architectures") or []
        return str(archs[0]) if archs else None
    except (OSError, ValueError):
        return None


def make_engine(space: SearchSpace) -> Engine:
    engine = create_engine(space.engine)
    check_engine(space, engine)
    return engine


def enqueue_first(
    study: optuna.Study, space: SearchSpace, engine: Engine, options: StudyOptions
) -> None:
    """Queue the baseline, the space file's configurations and the tuner's informed choice."""
    if space.baseline is not None:
        retry_locked(lambda: study.enqueue_trial({}, user_attrs={"role": "baseline"}))
    for params in space.enqueued:
        retry_locked(partial(study.enqueue_trial, dict(params), user_attrs={"role": "enqueued"}))
    if options.informed:
        for params in informed_configs(space, engine):
            retry_locked(partial(study.enqueue_trial, params, user_attrs={"role": "informed"}))


def sglang_command(space: SearchSpace, engine: Engine) -> Callable[[ServerConfig, int], str] | None:
    """For the simulated engine: the SGLang command line each trial stands for (recorded)."""
    if engine.spec.kind != "sim":
        return None
    # the interpreter of the SGLang installation is not known: the command names python3
    spec = dataclasses.replace(engine.spec, python="python3")
    sglang = SGLangEngine(spec, flags=known_flagset(spec.sim.dialect))

    def command(config: ServerConfig, port: int) -> str:
        return sglang.build_launch(config, port=port, workload=space.workload).display()

    return command
