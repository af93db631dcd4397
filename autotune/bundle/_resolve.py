"""The greedy walk that chooses which wheels a bundle carries.

Start from the requirements asked for. A requirement the box's installed version satisfies is
left to the box (its package already works with its own dependencies, so the walk does not
descend); any other gets the newest wheel that satisfies every requirement collected on that
name so far (from the wheel cache first, then the index), whose applicable ``Requires-Dist``
join the walk. Each round re-collects the requirements from the roots through the wheels in
use; a wheel that no longer satisfies them (or is no longer needed, or the box now serves) is
dropped and its name re-chosen with the merged specifier, until nothing changes. No
backtracking: when no wheel satisfies a name's merged specifier, the build fails naming every
requirement on it and who asked.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from autotune._errors import BundleError
from autotune.bundle._cuda import CudaEvidence, cuda_major, evidence_of
from autotune.bundle._pip import NoMatchingWheel, PipOptions, download
from autotune.bundle._rules import Addition, Exclusion
from autotune.bundle._target import Target
from autotune.bundle._wheels import Wheel, index_wheels

ROOT = "command line"
MAX_ROUNDS = 60
Fetch = Callable[[Mapping[NormalizedName, str]], dict[NormalizedName, Path]]


@dataclass(frozen=True)
class Constraint:
    """A requirement on a name and who asked for it (``name version`` or the command line)."""

    requirement: Requirement
    by: str

    def describe(self) -> str:
        spec = str(self.requirement.specifier) or "(any version)"
        return f"{canonicalize_name(self.requirement.name)}{spec} (asked by {self.by})"


@dataclass(frozen=True)
class Chosen:
    wheel: Wheel
    source: str  # "cache" or "index"
    requested_by: tuple[str, ...]


@dataclass(frozen=True)
class BoxPackage:
    """A requirement left to the box's installed version (``replaced_by`` None), or a box
    package the bundle replaces with another version."""

    name: NormalizedName
    box_version: Version
    requested_by: tuple[str, ...]
    replaced_by: Version | None = None


@dataclass(frozen=True)
class Excluded:
    name: NormalizedName
    reason: str
    requirements: tuple[str, ...]
    box_version: Version | None


@dataclass
class Resolution:
    chosen: dict[NormalizedName, Chosen] = field(default_factory=dict)
    from_box: list[BoxPackage] = field(default_factory=list)
    replaced: list[BoxPackage] = field(default_factory=list)
    excluded: list[Excluded] = field(default_factory=list)
    cuda_major: int | None = None
    cuda_evidence: str | None = None
    rounds: int = 0


def merged(constraints: Iterable[Constraint]) -> SpecifierSet:
    return functools.reduce(
        lambda a, b: a & b, (c.requirement.specifier for c in constraints), SpecifierSet()
    )


class Resolver:
    """One walk: roots, the box's freeze, the target, exclusions, the wheel cache and pip."""

    def __init__(
        self,
        roots: list[Requirement],
        box: Mapping[NormalizedName, Version],
        target: Target,
        *,
        cache: Path,
        excludes: Iterable[Exclusion] = (),
        additions: Iterable[Addition] = (),
        pip: PipOptions | None = None,
        refresh: bool = False,
        fetch: Fetch | None = None,
        log: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.roots = roots
        self.box = box
        self.target = target
        self.cache = cache
        self.excludes = {e.name: e for e in excludes}
        self.additions: dict[NormalizedName, list[Requirement]] = {}
        for addition in additions:
            self.additions.setdefault(addition.package, []).append(
                Requirement(addition.requirement)
            )
        self.refresh = refresh
        self.log = log
        options = pip or PipOptions()
        self.fetch: Fetch = fetch or (lambda specs: download(specs, target, cache, options))
        self.cached = {} if refresh else index_wheels(cache)
        self.fetched: dict[NormalizedName, list[Wheel]] = {}

    def resolve(self) -> Resolution:
        active: dict[NormalizedName, Chosen] = {}
        for round_number in range(1, MAX_ROUNDS + 1):
            constraints = self._settle(active)
            pending = {
                name: cs
                for name, cs in constraints.items()
                if name not in self.excludes and name not in active and not self._box_ok(name, cs)
            }
            if not pending:
                return self._result(active, constraints, round_number)
            active.update(self._choose(pending))
        raise BundleError(
            f"the choice of wheels did not settle in {MAX_ROUNDS} rounds",
            kind="no-wheel",
            hint="pin the packages that keep changing (see the log) on the command line",
        )

    # -- one round -----------------------------------------------------------------------

    def _settle(
        self, active: dict[NormalizedName, Chosen]
    ) -> dict[NormalizedName, list[Constraint]]:
        """Drop wheels that no longer fit what is asked (or that nothing needs, or that the box
        serves) until the rest are consistent; return the constraints they and the roots make."""
        while True:
            constraints = self._gather(active)
            stale = [
                name
                for name, chosen in active.items()
                if name not in constraints
                or not merged(constraints[name]).contains(chosen.wheel.version, prereleases=True)
                or self._box_ok(name, constraints[name])
            ]
            if not stale:
                return constraints
            for name in stale:
                self.log(f"  dropping {active[name].wheel.label} (no longer fits what is asked)")
                del active[name]

    def _gather(
        self, active: Mapping[NormalizedName, Chosen]
    ) -> dict[NormalizedName, list[Constraint]]:
        found: dict[NormalizedName, list[Constraint]] = {}
        walked: set[tuple[NormalizedName, str]] = set()
        queue = deque(
            Constraint(r, ROOT) for r in self.roots if self.target.applies(r.marker, r.extras)
        )
        while queue:
            constraint = queue.popleft()
            name = canonicalize_name(constraint.requirement.name)
            found.setdefault(name, []).append(constraint)
            chosen = active.get(name)
            if chosen is None or name in self.excludes:
                continue
            for extra in ("", *sorted(constraint.requirement.extras)):
                if (name, extra) in walked:
                    continue
                walked.add((name, extra))
                queue.extend(
                    Constraint(dep, chosen.wheel.label)
                    for dep in chosen.wheel.requires
                    if self._new_under(dep, extra)
                )
                if not extra:
                    label = f"{chosen.wheel.label} (undeclared)"
                    queue.extend(Constraint(r, label) for r in self.additions.get(name, []))
        return found

    def _new_under(self, dep: Requirement, extra: str) -> bool:
        """Whether ``dep`` applies with ``extra`` requested and not already without it."""
        if not extra:
            return self.target.applies(dep.marker)
        return self.target.applies(dep.marker, (extra,)) and not self.target.applies(dep.marker)

    def _box_ok(self, name: NormalizedName, constraints: list[Constraint]) -> bool:
        version = self.box.get(name)
        if version is None:
            return False
        return merged(constraints).contains(Version(version.public), prereleases=True)

    def _choose(
        self, pending: Mapping[NormalizedName, list[Constraint]]
    ) -> dict[NormalizedName, Chosen]:
        picks: dict[NormalizedName, Chosen] = {}
        to_fetch: dict[NormalizedName, str] = {}
        for name, constraints in sorted(pending.items()):
            spec = merged(constraints)
            by = tuple(dict.fromkeys(c.by for c in constraints))
            wheel = self._known(name, spec)
            if wheel is not None:
                source = "index" if wheel in self.fetched.get(name, []) else "cache"
                picks[name] = Chosen(wheel, source, by)
            else:
                to_fetch[name] = str(spec)
        if to_fetch:
            self.log("  asking the index for: " + ", ".join(f"{n}{s}" for n, s in to_fetch.items()))
            try:
                saved = self.fetch(to_fetch)
            except NoMatchingWheel as e:
                raise self._conflict(e.name, pending.get(e.name, []), e.versions) from None
            for name in to_fetch:
                constraints = list(pending[name])
                wheel = self._saved_wheel(name, constraints, saved.get(name))
                self.fetched.setdefault(name, []).append(wheel)
                by = tuple(dict.fromkeys(c.by for c in constraints))
                picks[name] = Chosen(wheel, "index", by)
        for name, chosen in sorted(picks.items()):
            box = self.box.get(name)
            note = f" (the box has {box})" if box is not None else ""
            self.log(f"  {chosen.wheel.label} from the {chosen.source}{note}")
        return picks

    def _saved_wheel(
        self, name: NormalizedName, constraints: list[Constraint], path: Path | None
    ) -> Wheel:
        """The wheel pip saved for ``name``, checked against the target and ``constraints``."""
        spec = merged(constraints)
        wheel: Wheel | None
        if path is not None:
            wheel = self._fitting(Wheel.from_path(path))
            if wheel is None:
                raise self._misfit(Wheel.from_path(path))
        else:  # pip did not say which file: the newest in the cache that satisfies
            wheel = self._newest(index_wheels(self.cache).get(name, []), spec)
        if wheel is None or not spec.contains(wheel.version, prereleases=True):
            raise self._conflict(name, constraints, "")
        return wheel

    def _known(self, name: NormalizedName, spec: SpecifierSet) -> Wheel | None:
        """The newest wheel fetched in this build, else in the cache, that satisfies ``spec``."""
        return self._newest(self.fetched.get(name, []), spec) or self._newest(
            self.cached.get(name, []), spec
        )

    def _newest(self, wheels: list[Wheel], spec: SpecifierSet) -> Wheel | None:
        versions = list(spec.filter({w.version for w in wheels}))
        if not versions:
            return None
        best = max(versions)
        of_best = [w for w in wheels if w.version == best]
        for wheel in of_best:
            fitting = self._fitting(wheel)
            if fitting is not None:
                return fitting
        raise self._misfit(of_best[0])

    def _misfit(self, wrong: Wheel) -> BundleError:
        return BundleError(
            f"the wheel {wrong.path.name} does not fit the target "
            f"({self.target.describe()}): its tags are "
            + ", ".join(sorted(str(t) for t in wrong.tags)),
            kind="tags",
            path=wrong.path,
            expected=self.target.abi,
            found=", ".join(sorted(str(t) for t in wrong.tags)),
            hint=f"remove {wrong.path} from the wheel cache (or use another --wheel-cache) so "
            "the index is asked for a wheel built for the box",
        )

    def _fitting(self, wheel: Wheel) -> Wheel | None:
        if not self.target.fits(wheel.tags):
            return None
        if not self.target.admits(wheel.requires_python):
            raise BundleError(
                f"{wheel.path.name} requires Python {wheel.requires_python}; the box has "
                f"{self.target.python}",
                kind="tags",
                path=wheel.path,
                expected=self.target.python,
                found=wheel.requires_python,
                hint="pin an older release of the package, or remove the wheel from the cache",
            )
        return wheel

    def _conflict(
        self, name: NormalizedName, constraints: list[Constraint], versions: str
    ) -> BundleError:
        asked = "; ".join(c.describe() for c in constraints) or name
        tail = f" (the index has: {_short(versions)})" if versions else ""
        box = self.box.get(name)
        boxed = f"; the box has {box}" if box is not None else ""
        return BundleError(
            f"no wheel of {name} for {self.target.describe()} satisfies every requirement on "
            f"it: {asked}{boxed}{tail}",
            kind="no-wheel",
            requirers=tuple(dict.fromkeys(c.by for c in constraints)),
            found=versions or None,
            hint="pin compatible releases of the packages that ask for it, or --exclude "
            f"{name} if the box can do without it",
        )

    # -- the result ------------------------------------------------------------------------

    def _result(
        self,
        active: dict[NormalizedName, Chosen],
        constraints: dict[NormalizedName, list[Constraint]],
        rounds: int,
    ) -> Resolution:
        result = Resolution(rounds=rounds)
        evidence: list[CudaEvidence] = []
        for name in sorted(active):
            chosen = active[name]
            by = tuple(dict.fromkeys(c.by for c in constraints[name]))
            result.chosen[name] = Chosen(chosen.wheel, chosen.source, by)
            applicable = [r for r in chosen.wheel.requires if self.target.applies(r.marker)]
            evidence += evidence_of(chosen.wheel.label, chosen.wheel.version, applicable)
            box = self.box.get(name)
            if box is not None:
                result.replaced.append(BoxPackage(name, box, by, chosen.wheel.version))
        for name in sorted(constraints):
            by = tuple(dict.fromkeys(c.by for c in constraints[name]))
            if name in self.excludes:
                result.excluded.append(
                    Excluded(
                        name,
                        self.excludes[name].reason,
                        tuple(dict.fromkeys(c.describe() for c in constraints[name])),
                        self.box.get(name),
                    )
                )
            elif name not in active:
                result.from_box.append(BoxPackage(name, self.box[name], by))
        result.cuda_major, result.cuda_evidence = cuda_major(evidence)
        return result


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]
