"""The trim rules' globs on the paths of the real wheels, the target's tags, the CLI build."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from packaging.tags import parse_tag

from autotune.bundle import DEFAULT_TRIM, MANIFEST, Target, TrimRule, manylinux_platforms
from autotune.cli import main

from ._wheels import make_wheel
from .conftest import FREEZE, PYTHON, Built

pytestmark = pytest.mark.timeout(120)


def _trimmed(path: str) -> str | None:
    rule = next((r for r in DEFAULT_TRIM if r.matches(path)), None)
    return None if rule is None else rule.pattern


@pytest.mark.parametrize(
    ("path", "pattern"),
    [
        ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel/flash_ops*.so"),
        ("sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so", "sgl_kernel/infllm_ops*.so"),
        ("sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/sm100/"),
        ("sgl_kernel/sm90/common_ops.abi3.so", None),
        ("flashinfer/data/cutlass/examples/a/b.cu", "flashinfer/data/cutlass/examples/"),
        ("flashinfer/data/cutlass/include/cute/tensor.hpp", None),
        ("flashinfer/data/cccl/libcudacxx/test/x.h", "flashinfer/data/cccl/**/test/"),
        ("flashinfer/data/cccl/libcudacxx/include/cuda/std/x.h", None),
        ("sglang/srt/layers/__pycache__/x.cpython-312.pyc", "**/__pycache__/"),
        ("__pycache__/x.pyc", "**/__pycache__/"),
        ("sglang/test/test_utils.py", "sglang/test/"),
        ("sglang/srt/test_utils.py", None),
        ("bin/sglang", "bin/"),
        ("sglang/bin/x.py", None),
    ],
)
def test_default_trim_rules(path: str, pattern: str | None) -> None:
    assert _trimmed(path) == pattern


def test_every_default_rule_says_why() -> None:
    assert all(rule.reason for rule in DEFAULT_TRIM)
    assert TrimRule("a/*.so", "").matches("a/x.so") and not TrimRule("a/*.so", "").matches(
        "a/b/x.so"
    )


def test_target_tags() -> None:
    platforms = manylinux_platforms((2, 39))
    assert platforms[0] == "manylinux_2_39_x86_64" and "manylinux2014_x86_64" in platforms
    target = Target("3.12", tuple(platforms))
    assert target.fits(parse_tag("cp310-abi3-manylinux2014_x86_64"))
    assert target.fits(parse_tag("py3-none-any"))
    assert not target.fits(parse_tag("cp311-cp311-manylinux_2_17_x86_64"))
    assert not target.fits(parse_tag("cp312-cp312-manylinux_2_40_x86_64"))
    assert not target.fits(parse_tag("cp312-cp312-macosx_11_0_arm64"))


def test_cli_build_from_the_cache(built: Built, tmp_path: Path) -> None:
    """`autotune bundle build` with every wheel already in the cache (no index asked)."""
    cache = Path(shutil.copytree(built.cache, tmp_path / "cache"))
    freeze = tmp_path / "freeze.txt"
    freeze.write_text(FREEZE)
    out = tmp_path / "out"
    args = ["bundle", "build", "app==1.0", "rootboxed>=1", "--freeze", str(freeze)]
    args += ["--out", str(out), "--python", PYTHON, "--wheel-cache", str(cache), "--no-index"]
    args += ["--xz-preset", "0", "--import-check", "app"]
    assert main(args) == 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert {p["source"] for p in manifest["packages"]} == {"cache"}
    assert manifest["import_check"] == ["app"]
    assert len(manifest["parts"]) == 1


def test_cli_refuses_a_misfit_wheel(tmp_path: Path) -> None:
    make_wheel(tmp_path / "cache", "alien", "1.0", tag="cp313-cp313-manylinux_2_17_x86_64")
    freeze = tmp_path / "freeze.txt"
    freeze.write_text(FREEZE)
    args = ["bundle", "build", "alien", "--freeze", str(freeze), "--out", str(tmp_path / "o")]
    assert main([*args, "--wheel-cache", str(tmp_path / "cache"), "--no-index"]) == 1
