"""Wheels and the box's freeze: what a wheel file is and needs, what the box already holds.

A :class:`Wheel` is a wheel file read without installing it: its name, version and tags from
the file name, its ``Requires-Dist`` and ``Requires-Python`` from ``METADATA``. :func:`read_freeze`
reads ``pip freeze`` output from the box into ``{canonical name: version}``.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from autotune._errors import BundleError

Warn = Callable[[str], None]


@dataclass
class Wheel:
    """A wheel file; its metadata is read on first use."""

    path: Path
    name: NormalizedName
    version: Version
    tags: frozenset[Tag]
    _requires: list[Requirement] | None = field(default=None, repr=False)
    _requires_python: str | None = field(default=None, repr=False)

    @classmethod
    def from_path(cls, path: Path) -> Wheel:
        """The wheel at ``path``; a file name that is not a wheel's raises :class:`BundleError`."""
        try:
            name, version, _build, wheel_tags = parse_wheel_filename(path.name)
        except (InvalidWheelFilename, InvalidVersion) as e:
            raise BundleError(
                f"{path.name} is not a wheel file name ({e})",
                kind="tags",
                path=path,
                hint="remove it from the wheel cache",
            ) from e
        return cls(path=path, name=name, version=version, tags=wheel_tags)

    @property
    def label(self) -> str:
        """``name version``, as requirements name who asked for them."""
        return f"{self.name} {self.version}"

    @property
    def requires(self) -> list[Requirement]:
        """Every ``Requires-Dist`` of the wheel (markers not evaluated)."""
        self._read_metadata()
        assert self._requires is not None
        return self._requires

    @property
    def requires_python(self) -> str | None:
        self._read_metadata()
        return self._requires_python

    def _read_metadata(self) -> None:
        if self._requires is not None:
            return
        text = self._metadata_text()
        message = Parser().parsestr(text, headersonly=True)
        requires: list[Requirement] = []
        for line in message.get_all("Requires-Dist") or []:
            try:
                requires.append(Requirement(line))
            except InvalidRequirement as e:
                raise BundleError(
                    f"{self.path.name}: unreadable Requires-Dist {line!r} ({e})",
                    kind="tags",
                    path=self.path,
                    hint="remove the wheel from the cache or exclude the package (--exclude)",
                ) from e
        self._requires = requires
        self._requires_python = message.get("Requires-Python")

    def _metadata_text(self) -> str:
        try:
            with zipfile.ZipFile(self.path) as z:
                names = [
                    n
                    for n in z.namelist()
                    if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
                ]
                if not names:
                    raise BundleError(
                        f"{self.path.name} has no .dist-info/METADATA",
                        kind="tags",
                        path=self.path,
                        hint="the file is not a wheel: remove it from the cache",
                    )
                return z.read(names[0]).decode("utf-8", errors="replace")
        except (OSError, zipfile.BadZipFile) as e:
            raise BundleError(
                f"cannot read the wheel {self.path}: {e}",
                kind="tags",
                path=self.path,
                hint="remove the damaged file from the wheel cache and build again",
            ) from e


def index_wheels(folder: Path) -> dict[NormalizedName, list[Wheel]]:
    """The wheels in ``folder`` by canonical name (files that are not wheels are skipped)."""
    found: dict[NormalizedName, list[Wheel]] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.whl")):
        try:
            wheel = Wheel.from_path(path)
        except BundleError:
            continue
        found.setdefault(wheel.name, []).append(wheel)
    return found


def read_freeze(path: Path, warn: Warn) -> dict[NormalizedName, Version]:
    """``pip freeze`` output from the box: ``{canonical name: version}``.

    ``name==version`` (and ``===``) lines count; comments and blank lines are skipped;
    editable (``-e``), ``name @ URL`` and other lines are skipped with a warning, as the
    build cannot know their versions.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BundleError(
            f"cannot read the freeze file {path}: {e}",
            kind="freeze",
            path=path,
            hint="run `python -m pip freeze > box-freeze.txt` on the box and pass that file",
        ) from e
    box: dict[NormalizedName, Version] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path.name}:{number}"
        if line.startswith(("-e", "--editable")) or " @ " in line or "://" in line:
            warn(f"{where}: skipped {line!r} (editable or from a URL: its version is unknown)")
            continue
        name, sep, version = line.partition("===")
        if not sep:
            name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            warn(f"{where}: skipped {line!r} (not name==version)")
            continue
        try:
            box[canonicalize_name(name.strip())] = Version(version.strip())
        except InvalidVersion:
            warn(f"{where}: skipped {line!r} (not a PEP 440 version)")
    if not box:
        raise BundleError(
            f"the freeze file {path} names no package as name==version",
            kind="freeze",
            path=path,
            hint="pass the output of `python -m pip freeze` run with the box's Python",
        )
    return box
