"""The memory lines of a study's server starts, and the crashes they predict.

Every start's log is read by the engine (:meth:`autotune.engines.Engine.read_memory`: weights,
KV pool, CUDA graphs and what each left, per GPU) and the reading is kept on the trial as its
``memory`` user attribute. Before a launch, every reading of the study (read back from the
stored trials, so a resumed study knows them too) asks the engine whether the configuration
would run out of memory (:meth:`autotune.engines.Engine.memory_refusal`); a clear prediction
refuses it, the engine's arithmetic in the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from autotune._knobs import Infeasible, ServerConfig
from autotune.engines import Engine, MemoryReading

if TYPE_CHECKING:
    import optuna

    from autotune.study._record import TrialRecord

log = logging.getLogger(__name__)

#: The user attribute that holds a start's :class:`MemoryReading` (as a mapping).
MEMORY_ATTR = "memory"


class MemoryReadings:
    """The memory readings of a study's starts, by trial number, and what they refuse."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._readings: list[tuple[int, MemoryReading]] = []

    def __len__(self) -> int:
        return len(self._readings)

    def record(self, config: ServerConfig, record: TrialRecord, server_log: Path | None) -> None:
        """Read the memory lines of a start of ``config`` from ``server_log`` into ``record``
        (nothing when the log has none or cannot be read)."""
        if server_log is None:
            return
        try:
            lines = server_log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as e:
            log.warning(
                "the server log %s could not be read for its memory lines: %s", server_log, e
            )
            return
        reading = self.engine.read_memory(lines, config)
        if reading is not None:
            record.extra[MEMORY_ATTR] = reading.to_dict()

    def learn(self, readings: Iterable[tuple[int, MemoryReading]]) -> None:
        """Replace the readings with ``(trial number, reading)`` of past starts."""
        self._readings = list(readings)

    def learn_from(self, study: optuna.Study) -> None:
        """The readings of every finished trial of ``study`` that recorded one."""
        from optuna.trial import TrialState

        states = (TrialState.COMPLETE, TrialState.PRUNED)
        found = []
        for trial in study.get_trials(deepcopy=False, states=states):
            reading = MemoryReading.from_dict(trial.user_attrs.get(MEMORY_ATTR))
            if reading is not None:
                found.append((trial.number, reading))
        self.learn(sorted(found, key=lambda item: item[0]))

    def refusal(self, config: ServerConfig) -> Infeasible | None:
        """Why ``config`` would run out of memory at start-up, by the first reading that
        predicts it clearly (``trial N:`` and the engine's arithmetic); else ``None``."""
        for number, reading in self._readings:
            verdict = self.engine.memory_refusal(reading, config)
            if verdict is not None:
                return Infeasible(
                    f"trial {number}: {verdict.reason}", verdict.category, verdict.knob
                )
        return None
