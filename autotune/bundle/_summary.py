"""The printed account of a build: what it carries, what it replaces on the box, what it
leaves out and why, what the trim rules removed, and the parts."""

from __future__ import annotations

from typing import Any

from autotune.bundle._pack import Stage
from autotune.bundle._resolve import Resolution
from autotune.bundle._target import Target

#: How many of the largest unpacked packages the summary lists.
LARGEST = 12


def size(n: int) -> str:
    """Bytes as MB and MiB (the part and transfer limits are in MiB)."""
    return f"{n / 1e6:.1f} MB ({n / (1 << 20):.1f} MiB)"


def _asked(by: tuple[str, ...]) -> str:
    return "asked by " + ", ".join(by)


def summary_lines(
    resolution: Resolution, stage: Stage | None, manifest: dict[str, Any] | None, target: Target
) -> list[str]:
    lines = [f"target: {target.describe()}"]
    if resolution.cuda_major is None:
        lines.append("CUDA: no chosen wheel says which CUDA it needs")
    else:
        lines.append(f"CUDA: {resolution.cuda_major} ({resolution.cuda_evidence})")
    wheel_bytes = sum(c.wheel.path.stat().st_size for c in resolution.chosen.values())
    lines.append(f"carried: {len(resolution.chosen)} packages ({size(wheel_bytes)} of wheels)")
    for name, chosen in resolution.chosen.items():
        lines.append(
            f"  {name} {chosen.wheel.version}  [{chosen.wheel.path.name}, from the "
            f"{chosen.source}]  {_asked(chosen.requested_by)}"
        )
    lines.append(f"box packages replaced: {len(resolution.replaced)}")
    for r in resolution.replaced:
        lines.append(f"  {r.name} {r.box_version} -> {r.replaced_by}  ({_asked(r.requested_by)})")
    boxed = ", ".join(f"{b.name} {b.box_version}" for b in resolution.from_box)
    lines.append(
        f"left to the box: {len(resolution.from_box)} packages" + (f": {boxed}" if boxed else "")
    )
    lines.append(f"not carried (excluded): {len(resolution.excluded)}")
    for e in resolution.excluded:
        box = f"; the box has {e.box_version}" if e.box_version is not None else ""
        lines.append(f"  {e.name}: {e.reason}{box}  [{'; '.join(e.requirements)}]")
    if stage is None or manifest is None:
        return lines
    lines.append("trimmed:")
    for t in stage.tallies:
        lines.append(f"  {t.rule.pattern}: {t.files} files, {size(t.bytes)}  ({t.rule.reason})")
    removed = sum(t.bytes for t in stage.tallies)
    lines.append(f"  in all: {size(removed)}")
    lines.append(f"largest unpacked (of {size(stage.unpacked_bytes)}, {len(stage.files)} files):")
    tops = sorted(stage.sizes_by_top().items(), key=lambda kv: -kv[1])[:LARGEST]
    lines.extend(f"  {top}: {size(n)}" for top, n in tops)
    archive, parts = manifest["archive"], manifest["parts"]
    lines.append(f"packed: {size(archive['size'])} in {len(parts)} parts (xz -{archive['preset']})")
    lines.extend(f"  {p['name']}: {p['size']} bytes, sha256 {p['sha256'][:16]}..." for p in parts)
    return lines
