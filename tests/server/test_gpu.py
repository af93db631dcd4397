"""GpuMonitor: the skip path on machines without a GPU, and a real release check on a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest

from autotune._errors import ServerError
from autotune.server import GpuMonitor, LogFollower, ServerProcess

from ._support import running, script, wait_until


def _gpu_present() -> bool:
    with GpuMonitor() as monitor:
        return monitor.available()


HAS_GPU = _gpu_present()


@pytest.mark.skipif(HAS_GPU, reason="this machine has an NVIDIA GPU")
def test_without_a_gpu_the_check_is_skipped_with_a_reason() -> None:
    monitor = GpuMonitor()
    assert monitor.available() is False
    assert monitor.reason
    with pytest.raises(ServerError, match="cannot read GPU memory") as info:
        monitor.snapshot()
    assert monitor.reason in str(info.value)
    result = monitor.wait_released({1234}, None, timeout_s=5)
    assert result.skipped and not result.released
    assert result.detail == f"GPU release check skipped: {monitor.reason}"


def test_without_the_nvml_package_the_check_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as if nvidia-ml-py were not installed
    monitor = GpuMonitor()
    assert monitor.available() is False
    assert monitor.reason is not None and "nvidia-ml-py" in monitor.reason
    assert monitor.wait_released(set(), None, timeout_s=1).skipped


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU")
def test_memory_of_a_killed_child_is_released(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    mib = 1024
    log = tmp_path / "hold.log"
    with GpuMonitor(indices=[0]) as monitor:
        baseline = monitor.snapshot()
        proc = ServerProcess.start(
            script("gpu_hold.py", mib, 0), log_path=log, term_timeout_s=0.5, kill_timeout_s=10
        )
        with proc:
            follower = LogFollower(log)
            wait_until(
                lambda: (
                    proc.poll() is not None
                    or any("holding" in line for line in follower.read_new_lines())
                ),
                timeout_s=120,
            )
            assert proc.poll() is None, log.read_text(errors="replace")
            held = monitor.snapshot()[0]
            assert held.used_mib - baseline[0].used_mib >= mib * 0.9
            # NVML reports host pids; inside a container without the host's pid namespace
            # they name no process here, and only the memory figure can be compared.
            if held.pids <= set(psutil.pids()):
                assert proc.pid in held.pids
            pids = proc.tree_pids()
            outcome = proc.stop()
        assert outcome.forced  # the child ignores SIGTERM
        assert not running(proc.pid)
        result = monitor.wait_released(pids, baseline, timeout_s=60)
        assert result.released, result.detail
        assert not result.skipped and result.holders == ()
        after = monitor.snapshot()[0]
        assert after.used_mib - baseline[0].used_mib < 256
        assert proc.pid not in after.pids
