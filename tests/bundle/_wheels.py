"""Small real wheels for a fake package index (a --find-links folder)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    *,
    requires: tuple[str, ...] = (),
    tag: str = "py3-none-any",
    files: dict[str, bytes] | None = None,
    extras: tuple[str, ...] = (),
) -> Path:
    """Write ``name-version-tag.whl`` with METADATA, WHEEL, RECORD and ``files`` (default: a
    package ``name`` whose ``__init__`` sets ``VERSION``)."""
    dist = name.replace("-", "_")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{version}-{tag}.whl"
    if files is None:
        files = {f"{dist}/__init__.py": f"VERSION = {version!r}\n".encode()}
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Provides-Extra: {e}\n" for e in extras)
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    wheel = f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: {tag}\n"
    members = dict(files)
    members[f"{info}/METADATA"] = metadata.encode()
    members[f"{info}/WHEEL"] = wheel.encode()
    record = [_record_line(p, d) for p, d in members.items()] + [f"{info}/RECORD,,"]
    members[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in members.items():
            z.writestr(member, data)
    return path
