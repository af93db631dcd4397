"""A port taken between the check and the server's bind costs a relaunch, not the configuration."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from autotune._knobs import ServerConfig
from autotune.engines import LaunchSpec, SimEngine
from autotune.space import load_space
from autotune.study._evaluate import TrialFiles, TrialHooks
from autotune.study._feasibility import Feasibility
from autotune.study._trial import TrialRunner


class _RacedEngine(SimEngine):
    """The simulated engine, whose first launch goes to a port another program holds."""

    def __init__(self, spec: Any, taken: int) -> None:
        super().__init__(spec)
        self.taken = taken
        self.ports: list[int] = []

    def build_launch(self, config: ServerConfig, *, port: int, workload: Any = None) -> LaunchSpec:
        port = self.taken if not self.ports else port
        self.ports.append(port)
        return super().build_launch(config, port=port, workload=workload)


def test_a_stolen_port_is_relaunched_elsewhere(lab: Any, tmp_path: Path) -> None:
    space = load_space(lab.space("ports"))
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        taken = holder.getsockname()[1]
        engine = _RacedEngine(space.engine, taken)
        runner = TrialRunner(space, engine, Feasibility(space, engine))
        record = runner.run(
            space.baseline_config(),
            None,
            role="baseline",
            files=TrialFiles(tmp_path / "trial"),
            hooks=TrialHooks(),
        )
    finally:
        holder.close()
    assert engine.ports[0] == taken
    assert len(engine.ports) == 2 and engine.ports[1] != taken
    assert record.outcome == "ok", record.failure_line
    assert record.value is not None and record.value > 0
