"""The twin's point estimate as a profile file the simulator loads."""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

import yaml

from autotune.sim import Profile


def profile_mapping(profile: Profile) -> dict[str, Any]:
    """``profile`` in the profile file's schema (:func:`autotune.sim.load_profile` reads it)."""
    hw = profile.hardware
    hardware = _plain(hw)
    hardware["compute_capability"] = list(hw.compute_capability)
    modes: dict[str, Any] = {}
    for mode, mode_data in hw.allreduce.items():
        data = mode_data
        if data.falls_back_to is not None:
            modes[mode] = {"falls_back_to": data.falls_back_to, "why": data.why}
            continue
        entry: dict[str, Any] = {
            "protocols": [
                {k: _round(v) for k, v in dataclasses.asdict(p).items() if v is not None}
                for p in data.protocols
            ]
        }
        if data.extra_memory_gib:
            entry["extra_memory_gib"] = _round(data.extra_memory_gib)
        if data.failure:
            entry["failure"] = data.failure
        if data.failure_with_graphs:
            entry["failure_with_graphs"] = data.failure_with_graphs
        modes[mode] = entry
    hardware["allreduce"] = modes
    model = _plain(profile.model)
    if profile.model.moe is not None:
        model["moe"] = _plain(profile.model.moe)
    else:
        model.pop("moe", None)
    drafts = {}
    for alg, d in profile.drafts.items():
        entry = _plain(d)
        entry.pop("algorithm")
        entry["acceptance"] = _plain(d.acceptance)
        drafts[alg] = entry
    runtime = _plain(profile.runtime)
    runtime["auto_fraction"] = _plain(profile.runtime.auto_fraction)
    workloads = {}
    for name, w in profile.workloads.items():
        wdata = w.to_mapping()
        wdata.pop("name", None)
        for key in ("input_len", "output_len"):
            dist = wdata[key]
            wdata[key] = {
                "mean": dist["mean"],
                "distribution": dist["distribution"],
                "spread": dist["spread"],
                "min": dist["minimum"],
                **({"max": dist["maximum"]} if dist["maximum"] is not None else {}),
            }
        wdata = {k: v for k, v in wdata.items() if v is not None}
        wdata["acceptance_scale"] = profile.acceptance_scale.get(name, 1.0)
        workloads[name] = wdata
    return {
        "name": profile.name,
        "description": profile.description,
        "hardware": hardware,
        "model": model,
        "drafts": drafts,
        "runtime": runtime,
        "startup": _plain(profile.startup),
        "default_workload": profile.default_workload_name,
        "workloads": workloads,
    }


def profile_yaml(profile: Profile, trials: int, coverage: str | None = None) -> str:
    """A twin's point estimate ``profile`` as YAML, headed by what it was fitted to
    (``coverage``: what the started trials covered, :meth:`Twin.coverage`)."""
    head = [
        f"# {profile.description}",
        "# Fitted by autotune's twin: the GPU, interconnect and model config are facts; every",
        "# efficiency, overhead, all-reduce cost, acceptance and memory coefficient is the mean",
        f"# of its posterior after {trials} trials.",
    ]
    if coverage:
        text = f"Measured: {coverage}. Beyond these, a prediction rests on the prior's physics."
        head += ["# " + line for line in textwrap.wrap(text, 96, break_on_hyphens=False)]
    body = yaml.safe_dump(profile_mapping(profile), sort_keys=False, width=100)
    return "\n".join(head) + "\n" + body


def _plain(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) or isinstance(value, dict):
            continue
        if value is None:
            continue
        if isinstance(value, tuple):
            value = list(value)
        out[f.name] = _round(value)
    return out


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value
