"""The GPUs of this machine as NVML reports them, for the SGLang adapter's precheck."""

from __future__ import annotations

import contextlib
from typing import Any

from autotune.engines._base import Hardware


def nvml_hardware() -> Hardware:
    """GPU 0's name, memory and compute capability, the GPU count and the interconnect (NVML).

    Fields are None without the ``nvidia-ml-py`` package, a driver or a GPU.
    """
    try:
        import pynvml
    except ImportError:
        return Hardware()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return Hardware()
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        if count == 0:
            return Hardware(gpu_count=0)
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        return Hardware(
            gpu_name=name.decode() if isinstance(name, bytes) else str(name),
            gpu_count=count,
            memory_gib=float(memory),
            compute_capability=(int(major), int(minor)),
            interconnect=_interconnect(pynvml, handle) if count > 1 else None,
        )
    except pynvml.NVMLError:
        return Hardware()
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _interconnect(pynvml: Any, handle: Any) -> str | None:
    """``nvlink`` when GPU 0 has an active NVLink, else ``pcie``."""
    try:
        links = int(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18))
        for link in range(links):
            try:
                if pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED:
                    return "nvlink"
            except pynvml.NVMLError:
                break
    except Exception:
        return None
    return "pcie"
