"""A fake package index of small real wheels, pip cut off from this machine's configuration,
and one bundle built from that index for the install tests."""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune.bundle import BuildOptions, BuildResult, PipOptions, build_bundle

from ._wheels import make_wheel

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
PART_SIZE = 1500
_PIP_ENV = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT")

FREEZE = """\
# the box's pip freeze
boxed==1.5
pinned==2.0
torchlike==2.11.0+cu130
rootboxed==1.2
-e git+https://example.invalid/x.git#egg=editable
fromfile @ file:///tmp/fromfile-1.0-py3-none-any.whl
"""


def isolate_pip(mp: pytest.MonkeyPatch) -> None:
    """pip reads no configuration file or PIP_* index variable of this machine."""
    mp.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in _PIP_ENV:
        mp.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _isolated_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_pip(monkeypatch)


def fake_index(folder: Path) -> Path:
    """The walk's scenario: see the test module for what each package exercises."""
    blob = random.Random(0).randbytes(8000)  # incompressible: the archive spans parts
    make_wheel(
        folder,
        "app",
        "1.0",
        requires=(
            "boxed>=1.0",
            "pinned==1.0",
            "torchlike==2.11.0",
            'linuxdep; sys_platform == "linux"',
            'windep; sys_platform == "win32"',
            'oldpy; python_version < "3.8"',
            "helper[extra1]>=1.0",
            "lib",
            "mid",
            "cuda-python>=13.0",
        ),
        files={
            "app/__init__.py": b"VERSION = '1.0'\n",
            "app/blob.bin": blob,
            "app/__pycache__/__init__.cpython-311.pyc": b"\0" * 100,
            "app-1.0.data/scripts/app-cli": b"#!/bin/sh\necho app\n",
        },
    )
    make_wheel(folder, "boxed", "2.0")
    make_wheel(folder, "pinned", "1.0")
    make_wheel(folder, "pinned", "2.5")
    for name in ("linuxdep", "windep", "oldpy", "extradep", "unused", "deep", "rootboxed"):
        make_wheel(folder, name, "1.0")
    make_wheel(
        folder,
        "helper",
        "1.0",
        requires=('extradep; extra == "extra1"', 'unused; extra == "other"', "deep>=1"),
        extras=("extra1", "other"),
        files={
            "helper/__init__.py": b"",
            "helper-1.0.data/purelib/helper_data.py": b"DATA = 1\n",
        },
    )
    make_wheel(folder, "lib", "1.0")
    make_wheel(folder, "lib", "2.0")
    make_wheel(folder, "mid", "1.0", requires=("lib<2",))
    return folder


@dataclass
class Built:
    index: Path
    cache: Path
    out: Path
    result: BuildResult


def build_options(
    tmp: Path, index: Path, requirements: tuple[str, ...], **kw: object
) -> BuildOptions:
    freeze = tmp / "box-freeze.txt"
    freeze.write_text(FREEZE)
    options: dict[str, object] = {
        "requirements": requirements,
        "freeze": freeze,
        "out": tmp / "bundle",
        "python": PYTHON,
        "part_size": PART_SIZE,
        "wheel_cache": tmp / "cache",
        "pip": PipOptions(no_index=True, find_links=(str(index),)),
        "xz_preset": "1",
        "import_check": ("app", "helper", "helper_data"),
    }
    options.update(kw)
    return BuildOptions(**options)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    tmp = tmp_path_factory.mktemp("built")
    index = fake_index(tmp / "index")
    options = build_options(tmp, index, ("app==1.0", "rootboxed>=1"), extra_trim=("app/*.bin.x",))
    with pytest.MonkeyPatch.context() as mp:
        isolate_pip(mp)
        result = build_bundle(options, log=lambda _: None)
    return Built(index, tmp / "cache", options.out, result)
