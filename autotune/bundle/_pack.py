"""From chosen wheels to ``bundle.tar.xz.000``, ``.001``, ...: install, trim, pack, split.

The wheels are installed into one folder the way pip does it for ``--target`` (a wheel's
``*.data/purelib`` and ``*.data/platlib`` land at the root, ``*.data/scripts`` in ``bin/``),
but as a plan rather than on disk: every file of the folder is a member of one wheel, and the
trim rules remove files from the plan (with the bytes each rule removed) before anything is
written. The plan is then streamed into one tar archive compressed with xz and cut into parts
of at most ``part_size`` bytes, each with its SHA-256.
"""

from __future__ import annotations

import contextlib
import hashlib
import lzma
import re
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import BinaryIO

from autotune._errors import BundleError
from autotune.bundle._rules import TrimRule, trimmed_by
from autotune.bundle._wheels import Wheel

ARCHIVE = "bundle.tar.xz"
_DATA = re.compile(r"^[^/]+\.data/(purelib|platlib|scripts|headers|data)/(.+)$")
_PRESET = re.compile(r"^([0-9])(e?)$")


@dataclass(frozen=True)
class StagedFile:
    """One file of the unpacked folder: ``path`` in it, and where it comes from."""

    path: str
    wheel: Path
    member: str
    size: int
    mode: int


@dataclass
class Tally:
    """What one trim rule removed."""

    rule: TrimRule
    files: int = 0
    bytes: int = 0


@dataclass
class Stage:
    files: dict[str, StagedFile] = field(default_factory=dict)
    tallies: list[Tally] = field(default_factory=list)

    @property
    def unpacked_bytes(self) -> int:
        return sum(f.size for f in self.files.values())

    def sizes_by_top(self) -> dict[str, int]:
        """Unpacked bytes by top-level folder (a package) or file."""
        sizes: dict[str, int] = {}
        for f in self.files.values():
            top = f.path.split("/", 1)[0]
            sizes[top] = sizes.get(top, 0) + f.size
        return sizes


def stage_path(member: str, dist: str) -> str | None:
    """Where a wheel member lands in a ``--target`` folder (None: a folder entry)."""
    if member.endswith("/"):
        return None
    match = _DATA.match(member)
    if match:
        scheme, rest = match.groups()
        return {"scripts": f"bin/{rest}", "headers": f"include/{dist}/{rest}"}.get(scheme, rest)
    return member


def plan_stage(wheels: list[Wheel], rules: tuple[TrimRule, ...], keep: tuple[str, ...]) -> Stage:
    """The unpacked folder of ``wheels`` (later wheels win a clash) less what ``rules`` trim."""
    stage = Stage(tallies=[Tally(rule) for rule in rules])
    by_rule = {id(t.rule): t for t in stage.tallies}
    for wheel in wheels:
        try:
            with zipfile.ZipFile(wheel.path) as z:
                infos = z.infolist()
        except (OSError, zipfile.BadZipFile) as e:
            raise BundleError(
                f"cannot read the wheel {wheel.path}: {e}", kind="tags", path=wheel.path
            ) from e
        for info in infos:
            path = stage_path(info.filename, wheel.name)
            if path is None:
                continue
            pure = PurePosixPath(path)
            if pure.is_absolute() or ".." in pure.parts:
                raise BundleError(
                    f"{wheel.path.name} holds an unsafe path {info.filename!r}",
                    kind="unsafe-member",
                    path=wheel.path,
                    found=info.filename,
                    hint="remove the wheel from the cache; it cannot be installed safely",
                )
            rule = trimmed_by(path, rules, keep)
            if rule is not None:
                tally = by_rule[id(rule)]
                tally.files += 1
                tally.bytes += info.file_size
                continue
            executable = (info.external_attr >> 16) & 0o111
            stage.files[path] = StagedFile(
                path, wheel.path, info.filename, info.file_size, 0o755 if executable else 0o644
            )
    return stage


def parse_preset(text: str) -> int:
    """An xz preset as ``xz`` spells it (``6``, ``9e``) to :mod:`lzma`'s number."""
    match = _PRESET.match(text.strip().lower())
    if not match:
        raise BundleError(
            f"--xz-preset {text!r} is not an xz preset",
            kind="option",
            found=text,
            hint="give 0 to 9, optionally with e (extreme), e.g. 9e",
        )
    return int(match.group(1)) | (lzma.PRESET_EXTREME if match.group(2) else 0)


@dataclass(frozen=True)
class Part:
    name: str
    size: int
    sha256: str


class PartWriter:
    """A write-only file that cuts what it is given into ``base.000``, ``base.001``, ..."""

    def __init__(self, folder: Path, base: str, part_size: int) -> None:
        if part_size < 1:
            raise BundleError("the part size must be positive", kind="option")
        self.folder = folder
        self.base = base
        self.part_size = part_size
        self.parts: list[Part] = []
        self._handle: BinaryIO | None = None
        self._digest = hashlib.sha256()
        self._written = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        while len(view):
            if self._handle is None:
                self._open()
            room = self.part_size - self._written
            chunk = view[:room]
            assert self._handle is not None
            self._handle.write(chunk)
            self._digest.update(chunk)
            self._written += len(chunk)
            view = view[len(chunk) :]
            if self._written >= self.part_size:
                self._finish()
        return total

    def flush(self) -> None:
        return None

    def close(self) -> None:
        if self._handle is not None:
            self._finish()

    def _open(self) -> None:
        name = f"{self.base}.{len(self.parts):03d}"
        self._handle = (self.folder / name).open("wb")
        self._digest = hashlib.sha256()
        self._written = 0

    def _finish(self) -> None:
        assert self._handle is not None
        self._handle.close()
        self.parts.append(
            Part(f"{self.base}.{len(self.parts):03d}", self._written, self._digest.hexdigest())
        )
        self._handle = None

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _order(f: StagedFile) -> tuple[str, str]:
    """Files of a kind together (all .py, all .so, all headers) compress better with xz."""
    return PurePosixPath(f.path).suffix, f.path


def pack(
    stage: Stage,
    folder: Path,
    *,
    part_size: int,
    preset: int,
    mtime: int,
    progress: Callable[[int], None] = lambda _: None,
) -> list[Part]:
    """Write the staged files as ``folder/bundle.tar.xz.NNN`` parts; return the parts."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"{ARCHIVE}.*"):
        old.unlink()
    archives: dict[Path, zipfile.ZipFile] = {}
    done = 0
    with contextlib.ExitStack() as stack:
        writer = stack.enter_context(PartWriter(folder, ARCHIVE, part_size))
        xz = stack.enter_context(lzma.LZMAFile(writer, "wb", preset=preset))  # type: ignore[arg-type]
        tar = stack.enter_context(tarfile.open(fileobj=xz, mode="w|", format=tarfile.PAX_FORMAT))
        for staged in sorted(stage.files.values(), key=_order):
            archive = archives.get(staged.wheel)
            if archive is None:
                archive = stack.enter_context(zipfile.ZipFile(staged.wheel))
                archives[staged.wheel] = archive
            info = tarfile.TarInfo(staged.path)
            info.size = staged.size
            info.mode = staged.mode
            info.mtime = mtime
            with archive.open(staged.member) as source:
                tar.addfile(info, source)
            done += staged.size
            progress(done)
    return writer.parts
