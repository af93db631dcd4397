"""Carry SGLang (and autotune's own dependencies) to a GPU box that has no network.

``build_bundle`` runs where a package index is reachable: from requirements and the box's
``pip freeze`` it chooses the wheels the box lacks (a greedy walk of their ``Requires-Dist``,
leaving to the box what it already satisfies), unpacks them into one folder less what trim
rules remove, and writes ``bundle.tar.xz.000``, ``.001``, ... and ``manifest.json``.
``install_bundle`` runs on the box with the standard library and ``packaging``: it checks the
parts, the Python and the CUDA major, unpacks safely and runs an import check. Both are also
``python3 -m autotune.bundle build|install`` and ``autotune bundle build|install``.
"""

from __future__ import annotations

from autotune._errors import BundleError
from autotune.bundle._build import (
    DEFAULT_IMPORT_CHECK,
    BuildOptions,
    BuildResult,
    build_bundle,
    default_wheel_cache,
    read_requirements,
)
from autotune.bundle._install import CUDA_ENV, InstallResult, install_bundle
from autotune.bundle._manifest import (
    FORMAT_VERSION,
    INSTALLED,
    MANIFEST,
    Manifest,
    read_manifest,
)
from autotune.bundle._pack import ARCHIVE
from autotune.bundle._pip import PipOptions
from autotune.bundle._rules import (
    DEFAULT_ADDITIONS,
    DEFAULT_EXCLUDES,
    DEFAULT_TRIM,
    Addition,
    Exclusion,
    TrimRule,
)
from autotune.bundle._target import DEFAULT_GLIBC, Target, manylinux_platforms

__all__ = [
    "ARCHIVE",
    "CUDA_ENV",
    "DEFAULT_ADDITIONS",
    "DEFAULT_EXCLUDES",
    "DEFAULT_GLIBC",
    "DEFAULT_IMPORT_CHECK",
    "DEFAULT_TRIM",
    "FORMAT_VERSION",
    "INSTALLED",
    "MANIFEST",
    "Addition",
    "BuildOptions",
    "BuildResult",
    "BundleError",
    "Exclusion",
    "InstallResult",
    "Manifest",
    "PipOptions",
    "Target",
    "TrimRule",
    "build_bundle",
    "default_wheel_cache",
    "install_bundle",
    "manylinux_platforms",
    "read_manifest",
    "read_requirements",
]
