"""``manifest.json``: what a bundle holds and what the box must be; read with the standard
library only, as the box reads it before anything else is installed.

Keys (format version 1): ``format``, ``format_version``, ``created``, ``target`` (``python``,
``implementation``, ``platforms``), ``cuda_major`` (null when no wheel tells),
``cuda_evidence``, ``packages`` (``name``, ``version``, ``wheel``, ``sha256``, ``size``,
``source``, ``requested_by``), ``from_box``, ``replaced`` (``name``, ``box_version``,
``version``, ``requested_by``), ``excluded``, ``trim`` (``pattern``, ``reason``, ``files``,
``bytes``), ``kept``, ``archive`` (``name``, ``compression``, ``preset``, ``size``),
``parts`` (``name``, ``size``, ``sha256``), ``unpacked_bytes``, ``files``,
``import_check``, ``freeze``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune._errors import BundleError

FORMAT = "autotune-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: The copy of the manifest an install leaves in its target folder.
INSTALLED = ".bundle-manifest.json"
REQUIRED_KEYS = ("target", "parts", "archive", "import_check", "cuda_major")


@dataclass(frozen=True)
class PartEntry:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """A read and checked manifest; ``data`` is the whole JSON object."""

    path: Path
    data: dict[str, Any]

    @property
    def target_python(self) -> str:
        return str(self.data["target"]["python"])

    @property
    def cuda_major(self) -> int | None:
        value = self.data["cuda_major"]
        return None if value is None else int(value)

    @property
    def parts(self) -> tuple[PartEntry, ...]:
        return tuple(
            PartEntry(str(p["name"]), int(p["size"]), str(p["sha256"])) for p in self.data["parts"]
        )

    @property
    def import_check(self) -> tuple[str, ...]:
        return tuple(str(m) for m in self.data["import_check"])

    @property
    def unpacked_bytes(self) -> int:
        return int(self.data.get("unpacked_bytes", 0))


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _bad(path: Path, what: str, found: str | None = None) -> BundleError:
    return BundleError(
        f"{path}: {what}",
        kind="manifest",
        path=path,
        found=found,
        hint="copy the bundle folder again, exactly as `autotune bundle build` wrote it",
    )


def read_manifest(folder: Path) -> Manifest:
    """The manifest of the bundle in ``folder``, checked for its format and keys."""
    path = folder / MANIFEST
    if not path.is_file():
        raise BundleError(
            f"{path} is missing: {folder} is not a bundle folder",
            kind="manifest",
            path=path,
            hint="pass the folder `autotune bundle build --out` wrote (manifest.json and the "
            "bundle.tar.xz.NNN parts)",
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise _bad(path, f"unreadable ({e})") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _bad(path, f"not an {FORMAT} manifest")
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise BundleError(
            f"{path}: format version {version!r}; this autotune reads version {FORMAT_VERSION}",
            kind="manifest",
            path=path,
            expected=str(FORMAT_VERSION),
            found=str(version),
            hint="install with the autotune release that built the bundle, or build it again",
        )
    missing = [key for key in REQUIRED_KEYS if key not in data]
    if missing:
        raise _bad(path, "missing " + ", ".join(missing))
    manifest = Manifest(path, data)
    try:
        manifest.parts, manifest.import_check, manifest.target_python, manifest.cuda_major  # noqa: B018
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(path, f"malformed ({e!r})") from e
    if not manifest.parts:
        raise _bad(path, "lists no parts")
    for part in manifest.parts:
        if "/" in part.name or "\\" in part.name or part.name in ("", ".", ".."):
            raise _bad(path, f"a part name that is not a file name: {part.name!r}", part.name)
    return manifest


def write_manifest(folder: Path, data: dict[str, Any], name: str = MANIFEST) -> Path:
    """Write ``data`` as ``folder/name`` (sorted keys off: the order is the reading order)."""
    path = folder / name
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path
