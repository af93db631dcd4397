"""``autotune bundle build``: choose the wheels, trim, pack, split, write the manifest.

:func:`build_bundle` runs on a machine that can reach a package index (or a ``--find-links``
folder); what it writes (``manifest.json`` and ``bundle.tar.xz.NNN``) travels to the box, where
:func:`autotune.bundle.install_bundle` unpacks it with the standard library alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from autotune._errors import BundleError
from autotune.bundle._manifest import FORMAT, FORMAT_VERSION, sha256_of, write_manifest
from autotune.bundle._pack import ARCHIVE, Stage, pack, parse_preset, plan_stage
from autotune.bundle._pip import PipOptions
from autotune.bundle._resolve import Resolution, Resolver
from autotune.bundle._rules import (
    DEFAULT_ADDITIONS,
    DEFAULT_EXCLUDES,
    DEFAULT_TRIM,
    Addition,
    TrimRule,
    exclusion,
)
from autotune.bundle._summary import size, summary_lines
from autotune.bundle._target import Target, expand_platforms
from autotune.bundle._wheels import read_freeze

MIB = 1 << 20
DEFAULT_IMPORT_CHECK = ("sglang", "sgl_kernel")
Log = Callable[[str], None]


def default_wheel_cache() -> Path:
    """``$XDG_CACHE_HOME/autotune/wheels`` (``~/.cache/autotune/wheels``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotune" / "wheels"


@dataclass(frozen=True)
class BuildOptions:
    """Everything a build is asked; see ``autotune bundle build --help``."""

    requirements: tuple[str, ...]
    freeze: Path
    out: Path
    python: str = "3.12"
    platforms: tuple[str, ...] = ()
    part_size: int = 60 * MIB
    wheel_cache: Path | None = None
    pip: PipOptions = field(default_factory=PipOptions)
    excludes: tuple[str, ...] = ()
    default_excludes: bool = True
    default_additions: bool = True
    trim: bool = True
    extra_trim: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    import_check: tuple[str, ...] = DEFAULT_IMPORT_CHECK
    refresh: bool = False
    xz_preset: str = "9e"
    dry_run: bool = False


@dataclass
class BuildResult:
    out: Path
    resolution: Resolution
    manifest: dict[str, Any] | None
    stage: Stage | None
    seconds: dict[str, float]
    lines: list[str]

    def report(self) -> list[str]:
        """The summary of the build, then where it went and how long it took."""
        times = ", ".join(f"{k} {v:.0f} s" for k, v in self.seconds.items())
        if self.manifest is None:
            return [*self.lines, f"dry run: nothing written ({times})"]
        total = self.manifest["archive"]["size"]
        parts = len(self.manifest["parts"])
        return [
            *self.lines,
            f"wrote {self.out}: manifest.json and {parts} parts, {size(total)} ({times})",
        ]


def read_requirements(path: Path) -> list[str]:
    """Requirement lines of a requirements file (comments, blanks and options skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BundleError(f"cannot read {path}: {e}", kind="option", path=path) from e
    lines = (line.split(" #", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith(("#", "-"))]


def parse_requirements(texts: tuple[str, ...]) -> list[Requirement]:
    out: list[Requirement] = []
    for text in texts:
        try:
            req = Requirement(text)
        except InvalidRequirement as e:
            raise BundleError(
                f"{text!r} is not a requirement ({str(e).splitlines()[0]})",
                kind="option",
                found=text,
                hint="write requirements as pip does, e.g. 'sglang==0.5.17' 'optuna>=5.0,<5.1'",
            ) from e
        if req.url:
            raise BundleError(
                f"{text!r} names a URL; a bundle carries wheels from an index",
                kind="option",
                found=text,
                hint="put the wheel in a folder and pass --find-links FOLDER with the name",
            )
        out.append(req)
    if not out:
        raise BundleError(
            "no requirement given", kind="option", hint="e.g. autotune bundle build sglang==0.5.17"
        )
    return out


def _target(options: BuildOptions) -> Target:
    if options.platforms:
        return Target(options.python, tuple(expand_platforms(options.platforms)))
    return Target(options.python)


def build_bundle(options: BuildOptions, log: Log = print) -> BuildResult:
    """Build the bundle ``options`` ask for into ``options.out``; return what was done."""
    started = time.monotonic()
    preset = parse_preset(options.xz_preset)
    if options.part_size < 1:
        raise BundleError(
            f"a part size of {options.part_size} bytes",
            kind="option",
            found=str(options.part_size),
            hint="give --part-size-mib a positive size, e.g. 60",
        )
    target = _target(options)
    box = read_freeze(options.freeze, lambda message: log(f"warning: {message}"))
    roots = parse_requirements(options.requirements)
    excludes = list(DEFAULT_EXCLUDES) if options.default_excludes else []
    excludes += [exclusion(name, "asked with --exclude") for name in options.excludes]
    additions = DEFAULT_ADDITIONS if options.default_additions else ()
    cache = options.wheel_cache or default_wheel_cache()
    log(f"choosing wheels for {target.describe()} (wheel cache: {cache})")
    resolution = Resolver(
        roots,
        box,
        target,
        cache=cache,
        excludes=excludes,
        additions=additions,
        pip=options.pip,
        refresh=options.refresh,
        log=log,
    ).resolve()
    seconds = {"choose": time.monotonic() - started}
    if options.dry_run:
        lines = summary_lines(resolution, None, None, target)
        return BuildResult(options.out, resolution, None, None, seconds, lines)

    rules: tuple[TrimRule, ...] = ()
    if options.trim:
        extra = tuple(TrimRule(p, "asked with --trim") for p in options.extra_trim)
        rules = DEFAULT_TRIM + extra
    wheels = [chosen.wheel for chosen in resolution.chosen.values()]
    stage = plan_stage(wheels, rules, options.keep)
    total = stage.unpacked_bytes
    log(f"packing {len(stage.files)} files ({total / 1e6:.1f} MB) with xz -{options.xz_preset}")
    step = [0.1]

    def progress(done: int) -> None:
        if total and done / total >= step[0]:
            log(f"  {done / total:.0%} ({time.monotonic() - packing:.0f} s)")
            step[0] += 0.1

    created = datetime.now(timezone.utc).replace(microsecond=0)
    packing = time.monotonic()
    try:
        options.out.mkdir(parents=True, exist_ok=True)
        parts = pack(
            stage,
            options.out,
            part_size=options.part_size,
            preset=preset,
            mtime=int(created.timestamp()),
            progress=progress,
        )
    except OSError as e:
        raise BundleError(
            f"cannot write the bundle into {options.out}: {e}",
            kind="output",
            path=options.out,
            hint="choose an --out folder you can write, on a disk with room for the parts",
        ) from e
    seconds["pack"] = time.monotonic() - packing
    added = [a for a in additions if a.package in resolution.chosen]
    manifest = _manifest(options, target, resolution, stage, parts, created, len(box), added)
    write_manifest(options.out, manifest)
    seconds["total"] = time.monotonic() - started
    lines = summary_lines(resolution, stage, manifest, target)
    return BuildResult(options.out, resolution, manifest, stage, seconds, lines)


def _manifest(
    options: BuildOptions,
    target: Target,
    resolution: Resolution,
    stage: Stage,
    parts: list[Any],
    created: datetime,
    box_packages: int,
    added: list[Addition],
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": created.isoformat().replace("+00:00", "Z"),
        "target": {
            "python": target.python,
            "implementation": "cp",
            "platforms": list(target.platforms),
        },
        "cuda_major": resolution.cuda_major,
        "cuda_evidence": resolution.cuda_evidence,
        "packages": [
            {
                "name": name,
                "version": str(chosen.wheel.version),
                "wheel": chosen.wheel.path.name,
                "sha256": sha256_of(chosen.wheel.path),
                "size": chosen.wheel.path.stat().st_size,
                "source": chosen.source,
                "requested_by": list(chosen.requested_by),
            }
            for name, chosen in resolution.chosen.items()
        ],
        "replaced": [
            {
                "name": r.name,
                "box_version": str(r.box_version),
                "version": str(r.replaced_by),
                "requested_by": list(r.requested_by),
            }
            for r in resolution.replaced
        ],
        "from_box": [
            {
                "name": b.name,
                "box_version": str(b.box_version),
                "requested_by": list(b.requested_by),
            }
            for b in resolution.from_box
        ],
        "excluded": [
            {
                "name": e.name,
                "reason": e.reason,
                "requirements": list(e.requirements),
                "box_version": None if e.box_version is None else str(e.box_version),
            }
            for e in resolution.excluded
        ],
        "added": [
            {"package": a.package, "requirement": a.requirement, "reason": a.reason} for a in added
        ],
        "trim": [
            {"pattern": t.rule.pattern, "reason": t.rule.reason, "files": t.files, "bytes": t.bytes}
            for t in stage.tallies
        ],
        "kept": list(options.keep),
        "archive": {
            "name": ARCHIVE,
            "compression": "xz",
            "preset": options.xz_preset,
            "size": sum(p.size for p in parts),
        },
        "parts": [{"name": p.name, "size": p.size, "sha256": p.sha256} for p in parts],
        "unpacked_bytes": stage.unpacked_bytes,
        "files": len(stage.files),
        "import_check": list(options.import_check),
        "freeze": {
            "file": options.freeze.name,
            "sha256": sha256_of(options.freeze),
            "packages": box_packages,
        },
    }
