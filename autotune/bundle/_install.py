"""``autotune bundle install``: check a bundle against the box, unpack it, import-check it.

Runs on the box with the standard library alone (nothing of autotune's dependencies is there
yet: the bundle brings them). The checks come before a byte is unpacked: the manifest's format,
every part's presence, size and SHA-256, the running Python against the bundle's target, and
the CUDA major of the box's torch against the bundle's. The parts are then read as one stream
(never joined on disk) and unpacked with every member checked (no absolute path, no ``..``,
no link out of the folder, no device file); the import check runs each module in a fresh
interpreter with the folder first on ``PYTHONPATH``.
"""

from __future__ import annotations

import io
import json
import lzma
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from autotune._errors import BundleError
from autotune.bundle._manifest import (
    INSTALLED,
    Manifest,
    read_manifest,
    sha256_of,
    write_manifest,
)

#: Set to the box's CUDA version (``13.0``) to skip asking torch, or ``none`` as if torch were
#: absent (tests; boxes where importing torch is slow).
CUDA_ENV = "AUTOTUNE_BUNDLE_CUDA"
IMPORT_TIMEOUT_S = 600.0
_IMPORT = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"


@dataclass
class InstallResult:
    target: Path
    manifest: Manifest
    extracted: bool
    members: int = 0
    notes: list[str] = field(default_factory=list)
    imported: tuple[str, ...] = ()

    @property
    def export(self) -> str:
        """The shell line that puts the folder first on ``PYTHONPATH``."""
        return f'export PYTHONPATH="{self.target}${{PYTHONPATH:+:$PYTHONPATH}}"'

    def report(self) -> list[str]:
        done = f"unpacked {self.members} members" if self.extracted else "already in place"
        return [f"{done} in {self.target}", "to use it:", f"  {self.export}"]


def verify_parts(folder: Path, manifest: Manifest) -> list[Path]:
    """The part files, in order, each present with the manifest's size and SHA-256."""
    paths: list[Path] = []
    for part in manifest.parts:
        path = folder / part.name
        if not path.is_file():
            raise BundleError(
                f"the part {part.name} is missing from {folder}",
                kind="missing-part",
                path=path,
                expected=part.name,
                hint=f"copy all {len(manifest.parts)} parts named in {manifest.path.name} "
                "into the bundle folder",
            )
        found = path.stat().st_size
        if found != part.size:
            raise BundleError(
                f"the part {part.name} has {found} bytes; the manifest says {part.size}",
                kind="part-size",
                path=path,
                expected=str(part.size),
                found=str(found),
                hint="the copy is incomplete or from another build: copy the part again",
            )
        digest = sha256_of(path)
        if digest != part.sha256:
            raise BundleError(
                f"the part {part.name} has SHA-256 {digest}; the manifest says {part.sha256}",
                kind="checksum",
                path=path,
                expected=part.sha256,
                found=digest,
                hint="the part is damaged or from another build: copy it again",
            )
        paths.append(path)
    return paths


def check_python(manifest: Manifest) -> None:
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running != manifest.target_python:
        raise BundleError(
            f"the bundle is for Python {manifest.target_python}; this is Python {running} "
            f"({sys.executable})",
            kind="python",
            path=manifest.path,
            expected=manifest.target_python,
            found=running,
            hint=f"run the install with the box's Python {manifest.target_python}, or build the "
            f"bundle again with --python {running}",
        )


def box_cuda(explicit: str | None = None) -> tuple[str | None, str]:
    """The box's CUDA version as its torch reports it, and how it was found (None: unknown)."""
    value = explicit if explicit is not None else os.environ.get(CUDA_ENV)
    if value is not None:
        if value.strip().lower() in ("", "none"):
            return None, f"{CUDA_ENV}={value!r}: torch taken as absent"
        return value.strip(), f"{CUDA_ENV}={value}"
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.version.cuda)"],
            capture_output=True,
            text=True,
            timeout=IMPORT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"could not ask torch ({e})"
    if done.returncode != 0:
        return None, f"torch cannot be imported ({_last_line(done.stderr)})"
    reported = _last_line(done.stdout)
    if reported in ("", "None"):
        return None, "torch is a CPU build"
    return reported, f"torch.version.cuda = {reported}"


def check_cuda(manifest: Manifest, explicit: str | None) -> str:
    """Refuse a bundle for another CUDA major; return a note on what was compared."""
    wanted = manifest.cuda_major
    if wanted is None:
        return "CUDA: the bundle names no CUDA major; not checked"
    version, how = box_cuda(explicit)
    if version is None:
        return f"CUDA: {how}; check skipped"
    try:
        major = int(version.split(".")[0])
    except ValueError:
        return f"CUDA: unreadable version {version!r} ({how}); check skipped"
    if major != wanted:
        raise BundleError(
            f"the bundle is built for CUDA {wanted}; the box's torch has CUDA {version} ({how})",
            kind="cuda",
            path=manifest.path,
            expected=str(wanted),
            found=version,
            hint=f"build the bundle with wheels for CUDA {major} (e.g. other pins), or use a box "
            f"with CUDA {wanted}",
        )
    return f"CUDA: {version} ({how}) matches the bundle's {wanted}"


class _Chain(io.RawIOBase):
    """The parts read one after the other as one file."""

    def __init__(self, paths: Iterable[Path]) -> None:
        self._paths = list(paths)
        self._file: io.BufferedReader | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while True:
            if self._file is None:
                if not self._paths:
                    return 0
                self._file = self._paths.pop(0).open("rb")
            count = self._file.readinto(buffer)
            if count:
                return count
            self._file.close()
            self._file = None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()


def _unsafe(member: tarfile.TarInfo, root: Path) -> str | None:
    """Why ``member`` must not be unpacked into ``root``, or None."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or member.name.startswith(("/", "\\")):
        return "an absolute path"
    if ".." in name.parts:
        return "a path with '..'"
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return "a device, FIFO or other special file"
    if member.issym() or member.islnk():
        link = PurePosixPath(member.linkname)
        if link.is_absolute() or ".." in link.parts:
            return f"a link to {member.linkname!r} outside the folder"
    resolved = (root / member.name).resolve()
    if resolved != root and root not in resolved.parents:
        return "a path outside the folder"
    return None


def extract(paths: list[Path], target: Path) -> int:
    """Unpack the parts' archive into ``target``, checking every member; return the count."""
    root = target.resolve()
    count = 0
    try:
        with _Chain(paths) as chain, tarfile.open(fileobj=chain, mode="r|xz") as tar:
            for member in tar:
                why = _unsafe(member, root)
                if why is not None:
                    raise BundleError(
                        f"the archive holds {member.name!r}, {why}; nothing of it was written",
                        kind="unsafe-member",
                        path=paths[0],
                        found=member.name,
                        hint="the bundle is damaged or not autotune's: build it again",
                    )
                if hasattr(tarfile, "data_filter"):
                    tar.extract(member, root, filter="data")
                else:  # Python without extraction filters (before 3.10.12 / 3.11.4)
                    tar.extract(member, root)
                count += 1
    except (tarfile.TarError, lzma.LZMAError, EOFError) as e:
        raise BundleError(
            f"cannot unpack the bundle: {e}",
            kind="archive",
            path=paths[0],
            hint="the parts do not form one archive: copy them again",
        ) from e
    return count


def check_imports(target: Path, modules: Iterable[str], timeout: float = IMPORT_TIMEOUT_S) -> None:
    """Import each module in a fresh interpreter with ``target`` first on ``PYTHONPATH``."""
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(target) + (os.pathsep + old if old else "")
    for module in modules:
        try:
            done = subprocess.run(
                [sys.executable, "-c", _IMPORT, module],
                cwd=target,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BundleError(
                f"import {module} took more than {timeout:.0f} s",
                kind="import-check",
                expected=module,
                found="timeout",
            ) from None
        if done.returncode != 0:
            last = _last_line(done.stderr) or f"exit status {done.returncode}"
            raise BundleError(
                f"import {module} failed with the bundle on PYTHONPATH: {last}",
                kind="import-check",
                path=target,
                expected=module,
                found=last,
                hint="a package the bundle needs is missing or broken: build again without "
                "--exclude / --trim for it (see the manifest's excluded and trim lists)",
            )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _same_install(target: Path, manifest: Manifest) -> bool:
    try:
        installed = json.loads((target / INSTALLED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(installed, dict) and installed.get("parts") == manifest.data["parts"]


def install_bundle(
    bundle: Path,
    target: Path,
    *,
    import_check: bool = True,
    force: bool = False,
    cuda: str | None = None,
    log: Callable[[str], None] = print,
) -> InstallResult:
    """Check the bundle in ``bundle`` and unpack it into ``target``; see the module docs.

    ``cuda`` stands for the box's CUDA version (else ``$AUTOTUNE_BUNDLE_CUDA``, else torch is
    asked). Installing the same bundle again finds it in place and only re-runs the import
    check, unless ``force``.
    """
    manifest = read_manifest(bundle)
    paths = verify_parts(bundle, manifest)
    log(f"{len(paths)} parts present with the manifest's sizes and SHA-256")
    check_python(manifest)
    result = InstallResult(target=target.resolve(), manifest=manifest, extracted=False)
    result.notes.append(check_cuda(manifest, cuda))
    log(result.notes[-1])
    try:
        _unpack(bundle, target, manifest, paths, result, force, log)
    except OSError as e:
        raise BundleError(
            f"cannot unpack into {target}: {e}",
            kind="output",
            path=target,
            hint="choose a --target folder you can write, on a disk with room for "
            f"{manifest.unpacked_bytes / 1e6:.0f} MB",
        ) from e
    if import_check:
        check_imports(target, manifest.import_check)
        result.imported = manifest.import_check
        log("import check passed: " + ", ".join(manifest.import_check))
    return result


def _unpack(
    bundle: Path,
    target: Path,
    manifest: Manifest,
    paths: list[Path],
    result: InstallResult,
    force: bool,
    log: Callable[[str], None],
) -> None:
    target.mkdir(parents=True, exist_ok=True)
    if not force and _same_install(target, manifest):
        log(f"{target} already holds this bundle; not unpacked again (--force does)")
    else:
        if any(p.name != INSTALLED for p in target.iterdir()) and not (target / INSTALLED).exists():
            log(f"note: {target} is not empty; files of the bundle replace what is there")
        size = manifest.unpacked_bytes / 1e6
        log(f"unpacking into {target} ({size:.0f} MB)")
        result.members = extract(paths, target)
        result.extracted = True
        installed = dict(manifest.data)
        installed["installed"] = {
            "at": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
            "from": str(bundle.resolve()),
            "python": sys.executable,
        }
        write_manifest(target, installed, INSTALLED)
