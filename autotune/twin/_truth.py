"""A simulator profile read in the twin's coefficients: the truth a fitted twin is judged by."""

from __future__ import annotations

from typing import Any

from autotune.sim import Profile
from autotune.twin._prior import _dense_gib


def truth_values(twin: Any, profile: Profile) -> dict[str, float]:
    """The value of each of ``twin``'s coefficients in ``profile`` (the box the twin should
    learn), where the profile's schema gives it directly: efficiencies, overheads, memory,
    acceptance (times the workload's acceptance scale, as the twin sees it), the draft head,
    and each all-reduce mode's alpha and per-KiB cost over the interconnect's template (at the
    first protocol)."""
    layout = twin.layout
    hw, model, rt = profile.hardware, profile.model, profile.runtime
    out: dict[str, float] = {
        "mem_efficiency": hw.mem_efficiency,
        "compute_efficiency": hw.compute_efficiency,
        "dense_scale": model.dense_gib / _dense_gib(layout.facts),
        "replicated_gib": model.replicated_gib,
        "context_gib": hw.context_gib,
        "step_overhead_ms": rt.step_overhead_ms,
        "eager_overhead_ms": rt.eager_overhead_ms,
        "spec_cycle_overhead_ms": rt.spec_cycle_overhead_ms,
        "tree_overhead_ms_per_token": rt.tree_overhead_ms_per_token,
        "activation_gib": rt.activation_gib,
        "graph_base_gib": rt.graph_base_gib,
        "graph_gib_per_token": rt.graph_gib_per_token,
        "auto_base_mib": rt.auto_fraction.base_mib,
        "capture_per_size_s": profile.startup.graph_capture_per_size_s,
    }
    if model.moe is not None:
        out["routing_locality"] = model.moe.routing_locality
    draft = profile.drafts.get(layout.facts.draft_algorithm)
    if draft is not None:
        scale = profile.acceptance_scale.get(twin.space.workload.name, 1.0)
        acc = draft.acceptance
        out.update(
            {
                "draft_weights_gib": draft.weights_gib,
                "draft_step_gib": draft.step_gib,
                "draft_kv_bytes": float(draft.kv_bytes_per_token),
                "draft_step_overhead_ms": draft.step_overhead_ms,
                "draft_branch_overhead_ms": draft.branch_overhead_ms,
                "acc_p1": acc.p1 * scale,
                "acc_decay": acc.decay,
                "acc_floor": acc.floor * scale,
                "acc_rank_share": acc.rank_share,
                "acc_rank_ratio": acc.rank_ratio,
            }
        )
    for mode, template in layout.protocols.items():
        data = hw.allreduce.get(mode)
        if data is None or not data.protocols:
            continue
        first, base = data.protocols[0], template[0]
        out[f"ar_alpha:{mode}"] = first.alpha_us / base[0]
        out[f"ar_beta:{mode}"] = first.us_per_kib / base[1]
        if f"ar_mem:{mode}" in layout.names:
            out[f"ar_mem:{mode}"] = data.extra_memory_gib
    return {k: v for k, v in out.items() if k in layout.names}
