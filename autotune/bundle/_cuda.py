"""Which CUDA major release a set of wheels was built for, when they say so.

Wheels say it in a few ways: a local version label (``torch 2.11.0+cu130``), a name suffix
(``nvidia-cudnn-cu13``, ``cupy-cuda13x``), an extra on a requirement
(``flashinfer_python[cu13]``), or a bound on CUDA's own Python packages (``cuda-python>=13.0``).
:func:`cuda_major` gathers that evidence from the chosen wheels and their requirements.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from autotune._errors import BundleError

_LOCAL = re.compile(r"^cu(\d{2,3})$")
_SUFFIX = re.compile(r"-cu(\d{2})$|^cupy-cuda(\d{2})x$")
_EXTRA = re.compile(r"^cu(\d{2})$")
#: Packages whose own version is the CUDA version they wrap.
_VERSIONED = frozenset({"cuda-python", "cuda-bindings", "nvidia-cuda-runtime"})


@dataclass(frozen=True)
class CudaEvidence:
    """``major`` and why; ``at_least`` when it is only a lower bound (``cuda-python>=12.0``)."""

    major: int
    why: str
    at_least: bool = False


def _from_local(local: str | None) -> int | None:
    match = _LOCAL.match(local or "")
    return int(match.group(1)[:-1]) if match else None


def _from_name(name: str) -> int | None:
    match = _SUFFIX.search(canonicalize_name(name))
    if not match:
        return None
    return int(match.group(1) or match.group(2))


def _from_requirement(req: Requirement) -> tuple[int, bool] | None:
    """The CUDA major a requirement names, and whether only as a lower bound."""
    for extra in req.extras:
        match = _EXTRA.match(extra.lower())
        if match:
            return int(match.group(1)), False
    named = _from_name(req.name)
    if named is not None:
        return named, False
    if canonicalize_name(req.name) in _VERSIONED:
        for spec in req.specifier:
            if spec.operator in (">=", "==", "~=", "==="):
                try:
                    major = Version(spec.version.rstrip(".*")).major
                except InvalidVersion:
                    continue
                return major, spec.operator == ">="
    return None


def evidence_of(
    label: str, version: Version, requires: Iterable[Requirement]
) -> list[CudaEvidence]:
    """What one chosen wheel (``label``: ``name version``) and its applicable requirements say."""
    found: list[CudaEvidence] = []
    name = label.split(" ", 1)[0]
    for major, why in (
        (_from_local(version.local), f"{label} is a +{version.local} build"),
        (_from_name(name), f"{label} is named for CUDA"),
    ):
        if major is not None:
            found.append(CudaEvidence(major, why))
    for req in requires:
        named = _from_requirement(req)
        if named is not None:
            found.append(CudaEvidence(named[0], f"{label} requires {req}", at_least=named[1]))
    return found


def cuda_major(evidence: Iterable[CudaEvidence]) -> tuple[int | None, str | None]:
    """The one CUDA major the evidence names and the first reason, or ``(None, None)``.

    Exact evidence (a build label, a name, an extra, ``==``) decides; lower bounds alone give
    the highest bound. Wheels for two CUDA majors, or a bound above the exact major, cannot all
    load: that raises :class:`BundleError`.
    """
    items = list(evidence)
    exact = [e for e in items if not e.at_least]
    bounds = [e for e in items if e.at_least]
    majors = sorted({e.major for e in exact})
    if not majors:
        if not bounds:
            return None, None
        top = max(bounds, key=lambda e: e.major)
        return top.major, top.why
    above = [e for e in bounds if e.major > majors[-1]]
    if len(majors) > 1 or above:
        whys = [next(e.why for e in exact if e.major == major) for major in majors]
        whys += [e.why for e in above[:1]]
        raise BundleError(
            f"the chosen wheels are built for different CUDA majors ({'; '.join(whys)})",
            kind="cuda",
            found=", ".join(str(m) for m in sorted({*majors, *(e.major for e in above)})),
            hint="pin the packages to releases built for the box's CUDA, or --exclude one",
        )
    return majors[0], exact[0].why
