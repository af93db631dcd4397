"""The client-capacity benchmark against the simulated server it starts itself."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from autotune.bench import run_client_capacity


@pytest.mark.timeout(120)
def test_capacity_starts_the_simulator_streams_and_stops_it(tmp_path: Path) -> None:
    result = run_client_capacity(8, 1.0, output_len=32, log_dir=tmp_path)
    assert result.server_command is not None and "autotune.sim" in result.server_command
    assert result.requests_failed == 0
    assert result.streamed_tokens > 0
    assert result.streamed_tokens >= 32 * result.requests_completed
    assert result.cpu_s > 0 and result.cpu_ms_per_1k_tokens > 0
    log = (tmp_path / "sim-server.log").read_text()
    assert "The server is fired up and ready to roll!" in log
    port = int(result.url.rsplit(":", 1)[1])
    listening = {c.laddr.port for c in psutil.net_connections("tcp") if c.status == "LISTEN"}
    assert port not in listening  # the server was stopped with the benchmark
