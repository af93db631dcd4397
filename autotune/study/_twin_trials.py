"""What the twin of a study reads: the box's facts and each finished trial's figures.

:func:`twin_facts` gives the facts the twin's prior is built from (a facts file, or the
simulator profile's knowable fields on the simulator); :func:`observation` turns a finished
trial into the configuration it launched and what it measured (outcome, figures, memory lines,
start-up time). The twin sampler and ``autotune twin export`` read a study alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from optuna.trial import FrozenTrial

from autotune._errors import ConfigError
from autotune._knobs import ServerConfig
from autotune.space import SearchSpace
from autotune.study._record import TrialRecord

if TYPE_CHECKING:
    from autotune.twin import BoxFacts

#: Outcomes of trials that tell the twin nothing about the box.
UNOBSERVED = ("infeasible", "unknown", "surplus", "interrupted")


def twin_facts(space: SearchSpace, facts_file: str | None) -> BoxFacts:
    """The box's facts: from a facts file, or from the simulator profile of a study on the
    simulator.

    Raises:
        ConfigError: a vLLM engine (the twin models SGLang), a real engine and no facts
            file, or a facts file that cannot be read.
    """
    from autotune.engines import engine_class
    from autotune.twin import BoxFacts

    engine = engine_class(space.engine.kind)
    if not engine.twin_models:
        raise ConfigError(
            f"the twin models an SGLang server; this space's engine is {space.engine.kind}",
            hint="choose --sampler auto",
        )
    if facts_file is not None:
        return BoxFacts.from_file(facts_file)
    profile = engine.facts_profile(space.engine)
    if profile is None:
        raise ConfigError(
            f"the twin needs the facts of the box the study runs on (engine {space.engine.kind})",
            hint="give them with --facts FILE (GPU name, memory, count, interconnect, the "
            "model's config: see search_spaces/README.md)",
        )
    return BoxFacts.from_profile(profile)


class Observed:
    """One finished trial as the twin reads it (:class:`autotune.twin.TrialFacts`)."""

    def __init__(self, attrs: Mapping[str, Any], record: TrialRecord) -> None:
        self.outcome = record.outcome
        self.metrics = record.metrics
        self.loads = record.loads
        self.startup_s = record.startup_s
        memory = attrs.get("memory")
        self.extra = {"memory": memory} if isinstance(memory, Mapping) else {}


def observation(space: SearchSpace, trial: FrozenTrial) -> tuple[ServerConfig, Observed] | None:
    """What ``trial`` (finished) tells the twin: its launched configuration and its figures;
    None for a trial that never launched."""
    record = TrialRecord.from_trial(trial)
    if record.outcome.value in UNOBSERVED:
        return None
    if record.role == "baseline":
        config = space.baseline_config()
    elif record.config is not None:
        config = ServerConfig.from_params({**record.config, "tp_size": space.engine.tp_size})
    else:
        config = space.config_for(trial.params)
    return config, Observed(trial.user_attrs, record)
