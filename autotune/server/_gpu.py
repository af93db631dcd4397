"""GPU memory through NVIDIA's NVML: who holds it, and waiting until a stopped server let go."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from autotune._errors import ServerError
from autotune.server._closing import Closing

_MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuUsage:
    """One GPU's memory at one moment, and the pids of the compute processes on it.

    The pids are as NVML reports them: in the host's pid namespace, which differs from the
    tuner's inside a container that does not share it.
    """

    index: int
    used_mib: float
    total_mib: float
    pids: frozenset[int]


@dataclass(frozen=True)
class GpuReleaseResult:
    """Whether the GPUs were released after a stop, and how long that took.

    ``skipped`` is True when no check was possible (no NVML, no GPU); ``released`` is then
    False and ``detail`` says why. ``holders`` lists the given pids still on a GPU at the end,
    ``over_baseline`` the GPUs (index, used MiB, baseline MiB) still above their baseline.
    """

    released: bool
    waited_s: float
    detail: str
    skipped: bool = False
    holders: tuple[int, ...] = ()
    over_baseline: tuple[tuple[int, float, float], ...] = ()


class GpuMonitor(Closing):
    """Reads GPU memory and compute processes with NVML (package ``nvidia-ml-py``).

    NVML is loaded on first use. :meth:`available` says whether it can be used on this machine,
    and :attr:`reason` why not. NVML sees every GPU of the host regardless of
    ``CUDA_VISIBLE_DEVICES``; pass ``indices`` to watch only some.
    """

    def __init__(self, *, indices: Sequence[int] | None = None) -> None:
        self._indices = None if indices is None else tuple(indices)
        self._nvml: ModuleType | None = None
        self._reason: str | None = None
        self._checked = False

    @property
    def reason(self) -> str | None:
        """Why NVML cannot be used (None when it can, or before :meth:`available` ran)."""
        return self._reason

    def available(self) -> bool:
        """Whether GPU memory can be read here: NVML's library loads and sees at least one GPU."""
        if not self._checked:
            self._checked = True
            self._nvml, self._reason = _load_nvml()
        return self._nvml is not None

    def snapshot(self) -> list[GpuUsage]:
        """Memory used and compute processes of each watched GPU, now.

        Raises:
            ServerError: NVML is not available, or a query failed.
        """
        nvml = self._require()
        try:
            count = nvml.nvmlDeviceGetCount()
            indices = self._indices if self._indices is not None else tuple(range(count))
            usages = []
            for index in indices:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                usages.append(
                    GpuUsage(
                        index=index,
                        used_mib=memory.used / _MIB,
                        total_mib=memory.total / _MIB,
                        pids=frozenset(int(p.pid) for p in procs),
                    )
                )
        except nvml.NVMLError as e:
            raise ServerError(
                f"cannot read GPU memory through NVML: {e}",
                hint="check the driver with nvidia-smi; the indices watched must exist",
            ) from e
        return usages

    def wait_released(
        self,
        pids: Iterable[int],
        baseline: list[GpuUsage] | None,
        timeout_s: float,
        *,
        tolerance_mib: float = 256.0,
        poll_interval_s: float = 0.25,
    ) -> GpuReleaseResult:
        """Wait until none of ``pids`` holds GPU memory and each GPU is back near ``baseline``.

        "Near" is within ``tolerance_mib`` of the baseline's used memory (a snapshot taken
        before the server started); without a baseline only the pids are checked. Never raises
        for a missing GPU: the result is then ``skipped``.
        """
        started = time.monotonic()
        if not self.available():
            return GpuReleaseResult(
                released=False,
                waited_s=0.0,
                detail=f"GPU release check skipped: {self._reason}",
                skipped=True,
            )
        wanted = set(pids)
        before = {u.index: u.used_mib for u in baseline or []}
        deadline = started + max(timeout_s, 0.0)
        while True:
            now_usage = self.snapshot()
            holders = sorted({pid for u in now_usage for pid in u.pids if pid in wanted})
            over = tuple(
                (u.index, round(u.used_mib, 1), round(before[u.index], 1))
                for u in now_usage
                if u.index in before and u.used_mib - before[u.index] > tolerance_mib
            )
            waited = time.monotonic() - started
            if not holders and not over:
                return GpuReleaseResult(
                    released=True,
                    waited_s=waited,
                    detail=f"GPU memory released after {waited:.2f} s",
                )
            if time.monotonic() >= deadline:
                parts = []
                if holders:
                    parts.append(f"processes {holders} still hold GPU memory")
                for index, used, base in over:
                    parts.append(f"GPU {index} uses {used:.0f} MiB, {base:.0f} MiB before")
                return GpuReleaseResult(
                    released=False,
                    waited_s=waited,
                    detail=f"GPU memory not released within {timeout_s:g} s: " + "; ".join(parts),
                    holders=tuple(holders),
                    over_baseline=over,
                )
            time.sleep(min(poll_interval_s, max(deadline - time.monotonic(), 0.0)))

    def close(self) -> None:
        """Release NVML (a later call loads it again)."""
        if self._nvml is not None:
            nvml = self._nvml
            self._nvml = None
            self._checked = False
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()

    def _require(self) -> Any:
        if not self.available():
            raise ServerError(
                f"cannot read GPU memory: {self._reason}",
                hint="check GpuMonitor.available() first; on a machine without GPUs skip the check",
            )
        return self._nvml


def _load_nvml() -> tuple[ModuleType | None, str | None]:
    """NVML's module, initialised, or None and the reason it cannot be used."""
    try:
        import pynvml
    except ImportError as e:
        return None, f"the nvidia-ml-py package is not installed ({e})"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return None, f"NVML cannot start ({e}): no NVIDIA driver on this machine?"
    except OSError as e:
        return None, f"NVML cannot start ({e})"
    try:
        count = int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as e:
        pynvml.nvmlShutdown()
        return None, f"NVML cannot count the GPUs ({e})"
    if count == 0:
        pynvml.nvmlShutdown()
        return None, "no NVIDIA GPU is visible"
    return pynvml, None
