"""Asking a package index for wheels: ``pip download`` for the target, one call per round.

pip chooses the newest wheel that satisfies a requirement and fits the target's Python and
platform tags (``--python-version``, ``--platform``, ``--only-binary=:all:``), without its
dependencies (``--no-deps``: the build walks those itself), into the wheel cache, where a file
already there is reused. What pip saved is read back from its output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, NormalizedName, canonicalize_name
from packaging.utils import parse_wheel_filename as _parse

from autotune._errors import BundleError
from autotune.bundle._target import Target

_SAVED = re.compile(r"(?:^Saved |File was already downloaded )(\S+\.whl)\s*$")
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")


@dataclass(frozen=True)
class PipOptions:
    """Where pip looks: an index URL, extra ones, ``--find-links`` folders, or no index."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False

    def arguments(self) -> list[str]:
        args: list[str] = []
        if self.no_index:
            args.append("--no-index")
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for link in self.find_links:
            args += ["--find-links", link]
        return args


class NoMatchingWheel(Exception):
    """pip found no wheel for ``name`` (internal: the walk names who asked)."""

    def __init__(self, name: NormalizedName, versions: str) -> None:
        super().__init__(name)
        self.name = name
        self.versions = versions


def download_command(
    specs: Mapping[NormalizedName, str], target: Target, cache: Path, options: PipOptions
) -> list[str]:
    """The ``pip download`` command line that fetches one wheel for each of ``specs``."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        target.python,
        "--implementation",
        "cp",
        "--progress-bar",
        "off",
        "--disable-pip-version-check",
        "-d",
        str(cache),
    ]
    for platform in target.platforms:
        command += ["--platform", platform]
    command += options.arguments()
    command += [f"{name}{spec}" for name, spec in sorted(specs.items())]
    return command


def download(
    specs: Mapping[NormalizedName, str], target: Target, cache: Path, options: PipOptions
) -> dict[NormalizedName, Path]:
    """Fetch the newest fitting wheel for each ``{name: specifier}`` into ``cache``.

    Returns the wheel files pip reported, by name (a name pip did not report is missing: the
    caller looks in the cache). Raises :class:`NoMatchingWheel` when no wheel fits a
    requirement, :class:`BundleError` when pip fails otherwise.
    """
    cache.mkdir(parents=True, exist_ok=True)
    command = download_command(specs, target, cache, options)
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as e:
        raise BundleError(
            f"cannot run pip: {e}", kind="pip", hint="install pip for this Python"
        ) from e
    output = done.stdout + "\n" + done.stderr
    if done.returncode != 0:
        match = _NO_MATCH.search(output)
        if match:
            versions = _VERSIONS.search(output)
            raise NoMatchingWheel(_name_of(match.group(1)), versions.group(1) if versions else "")
        tail = [line for line in done.stderr.splitlines() if line.strip()][-5:]
        raise BundleError(
            f"pip download failed (exit status {done.returncode}): " + " | ".join(tail),
            kind="pip",
            hint="check the index options (--index-url, --find-links, --no-index) and the "
            "network; the command was: " + " ".join(command[:4]) + " ...",
        )
    saved: dict[NormalizedName, Path] = {}
    for line in output.splitlines():
        match = _SAVED.search(line.strip())
        if not match:
            continue
        path = cache / Path(match.group(1)).name
        try:
            name = _parse(path.name)[0]
        except (InvalidWheelFilename, ValueError):
            continue
        if path.is_file():
            saved[name] = path
    return saved


def _name_of(text: str) -> NormalizedName:
    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        return canonicalize_name(re.split(r"[<>=!~;\[ ]", text, maxsplit=1)[0])
