"""The machine a bundle is for: its Python, its platform tags, the markers its wheels see.

A build runs anywhere; what it chooses must run on the box. :class:`Target` holds what the box
is (CPython ``major.minor``, Linux, x86_64 by default, a glibc no newer than the box's) and
answers the questions the build asks of each wheel: do its tags fit, does its
``Requires-Python`` admit the box's Python, which of its ``Requires-Dist`` apply there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from packaging import tags
from packaging.markers import Marker
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from autotune._errors import BundleError

#: The newest glibc of the default platform list (the box's: Ubuntu 24.04 has 2.39).
DEFAULT_GLIBC = (2, 39)
DEFAULT_ARCH = "x86_64"

_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
_LEGACY = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
_LEGACY_OF = {v: k for k, v in _LEGACY.items()}
_PYTHON = re.compile(r"^3\.(\d+)$")


def manylinux_platforms(
    glibc: tuple[int, int] = DEFAULT_GLIBC, arch: str = DEFAULT_ARCH
) -> list[str]:
    """Every manylinux tag a box with this glibc runs, newest first, with the legacy aliases
    (``manylinux2014`` is ``manylinux_2_17``) beside the tags they stand for."""
    major, newest = glibc
    out: list[str] = []
    for minor in range(newest, 4, -1):
        out.append(f"manylinux_{major}_{minor}_{arch}")
        legacy = _LEGACY_OF.get((major, minor))
        if legacy is not None:
            out.append(f"{legacy}_{arch}")
    return out


def expand_platforms(given: Sequence[str]) -> list[str]:
    """The platform tags the target accepts: each manylinux tag given stands for itself and
    every older glibc (a box with glibc 2.39 runs a ``manylinux_2_17`` wheel); other tags
    (``linux_x86_64``, ``any``) stand for themselves."""
    out: list[str] = []
    for tag in given:
        tag = tag.strip()
        match = _MANYLINUX.match(tag)
        legacy = next((k for k in _LEGACY if tag.startswith(k + "_")), None)
        if match:
            glibc = (int(match.group(1)), int(match.group(2)))
            expanded = manylinux_platforms(glibc, match.group(3))
        elif legacy is not None:
            expanded = manylinux_platforms(_LEGACY[legacy], tag[len(legacy) + 1 :])
        else:
            expanded = [tag]
        out.extend(t for t in expanded if t not in out)
    if not out:
        raise BundleError(
            "no platform tag given", kind="option", hint="e.g. --platform manylinux_2_39_x86_64"
        )
    return out


@dataclass(frozen=True)
class Target:
    """CPython ``python`` (``"3.12"``) on Linux with ``platforms`` (tags, newest first)."""

    python: str = "3.12"
    platforms: tuple[str, ...] = field(default_factory=lambda: tuple(manylinux_platforms()))

    def __post_init__(self) -> None:
        if not _PYTHON.match(self.python):
            raise BundleError(
                f"--python {self.python!r} is not a CPython 3 version as MAJOR.MINOR",
                kind="option",
                expected="3.N",
                found=self.python,
                hint="give the box's Python as major.minor, e.g. --python 3.12",
            )

    @property
    def version_tuple(self) -> tuple[int, int]:
        major, minor = self.python.split(".")
        return int(major), int(minor)

    @property
    def abi(self) -> str:
        return "cp{}{}".format(*self.version_tuple)

    @property
    def machine(self) -> str:
        for tag in self.platforms:
            match = _MANYLINUX.match(tag)
            if match:
                return match.group(3)
            if tag.startswith("linux_"):
                return tag[len("linux_") :]
        return DEFAULT_ARCH

    def supported_tags(self) -> frozenset[tags.Tag]:
        """The wheel tags an installer on the box accepts."""
        version = self.version_tuple
        platforms = list(self.platforms)
        found = set(tags.cpython_tags(version, [self.abi], platforms))
        found.update(tags.compatible_tags(version, self.abi, platforms))
        return frozenset(found)

    def fits(self, wheel_tags: Iterable[tags.Tag]) -> bool:
        """Whether a wheel with these tags installs on the box."""
        supported = self.supported_tags()
        return any(tag in supported for tag in wheel_tags)

    def admits(self, requires_python: str | None) -> bool:
        """Whether a ``Requires-Python`` value admits the box's Python (absent: yes)."""
        if not requires_python:
            return True
        try:
            spec = SpecifierSet(requires_python)
        except InvalidSpecifier:
            return True  # an unreadable value: pip ignores it too
        return spec.contains(f"{self.python}.0", prereleases=True)

    def environment(self, extra: str = "") -> dict[str, str]:
        """The marker environment of the box (PEP 508), with ``extra`` set."""
        full = f"{self.python}.0"
        return {
            "implementation_name": "cpython",
            "implementation_version": full,
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": full,
            "python_version": self.python,
            "sys_platform": "linux",
            "extra": extra,
        }

    def applies(self, marker: Marker | None, extras: Iterable[str] = ()) -> bool:
        """Whether a requirement with this marker applies on the box, with no extra or any of
        ``extras`` requested."""
        if marker is None:
            return True
        return any(marker.evaluate(self.environment(extra)) for extra in ("", *extras))

    def describe(self) -> str:
        newest = self.platforms[0] if self.platforms else "?"
        return f"CPython {self.python} ({self.abi}), {newest} and older"
