"""`autotune bundle build`: the walk over a fake index, the trim, the parts, the manifest."""

from __future__ import annotations

import io
import lzma
import tarfile
from pathlib import Path

import pytest

from autotune.bundle import ARCHIVE, FORMAT_VERSION, BundleError, build_bundle, read_manifest

from ._wheels import make_wheel
from .conftest import PART_SIZE, PYTHON, Built, build_options

pytestmark = pytest.mark.timeout(120)


def _packages(built: Built) -> dict[str, str]:
    assert built.result.manifest is not None
    return {p["name"]: p["version"] for p in built.result.manifest["packages"]}


def test_walk_chooses_what_the_box_lacks(built: Built) -> None:
    assert _packages(built) == {
        "app": "1.0",
        "pinned": "1.0",  # the box's 2.0 replaced: app pins 1.0
        "linuxdep": "1.0",  # marker true on Linux
        "helper": "1.0",
        "extradep": "1.0",  # helper[extra1] asks for it
        "deep": "1.0",  # a dependency of a dependency
        "lib": "1.0",  # first 2.0, re-chosen when mid asked for lib<2
        "mid": "1.0",
    }


def test_what_the_box_satisfies_is_not_downloaded(built: Built) -> None:
    manifest = built.result.manifest
    assert manifest is not None
    from_box = {p["name"]: p["box_version"] for p in manifest["from_box"]}
    assert from_box == {"boxed": "1.5", "rootboxed": "1.2", "torchlike": "2.11.0+cu130"}
    cached = {p.name.split("-")[0] for p in built.cache.glob("*.whl")}
    assert {"boxed", "rootboxed", "torchlike", "windep", "oldpy", "unused"}.isdisjoint(cached)


def test_replaced_box_package_is_recorded(built: Built) -> None:
    manifest = built.result.manifest
    assert manifest is not None
    assert manifest["replaced"] == [
        {"name": "pinned", "box_version": "2.0", "version": "1.0", "requested_by": ["app 1.0"]}
    ]
    assert any(line.strip().startswith("pinned 2.0 -> 1.0") for line in built.result.lines)


def test_exclusions_and_cuda_major_are_recorded(built: Built) -> None:
    manifest = built.result.manifest
    assert manifest is not None
    assert [e["name"] for e in manifest["excluded"]] == ["cuda-python"]
    assert manifest["cuda_major"] == 13
    assert "app 1.0" in manifest["cuda_evidence"]


def test_manifest_keys_and_trim(built: Built) -> None:
    manifest = read_manifest(built.out).data
    for key in (
        "format_version", "created", "target", "cuda_major", "packages", "replaced", "excluded",
        "trim", "parts", "unpacked_bytes", "import_check", "archive", "freeze",
    ):  # fmt: skip
        assert key in manifest
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["target"]["python"] == PYTHON
    assert manifest["target"]["platforms"][0] == "manylinux_2_39_x86_64"
    assert manifest["import_check"] == ["app", "helper", "helper_data"]
    for package in manifest["packages"]:
        assert set(package) >= {"name", "version", "wheel", "sha256"}
    trimmed = {t["pattern"]: t for t in manifest["trim"]}
    assert trimmed["**/__pycache__/"]["bytes"] == 100
    assert trimmed["bin/"]["files"] == 1
    assert "app/*.bin.x" in trimmed  # --trim rules are listed (here: nothing matched)


def test_parts_split_at_the_size_and_reassemble(built: Built) -> None:
    manifest = read_manifest(built.out)
    parts = [built.out / p.name for p in manifest.parts]
    assert len(parts) >= 5
    sizes = [p.stat().st_size for p in parts]
    assert all(size == PART_SIZE for size in sizes[:-1])
    assert 0 < sizes[-1] <= PART_SIZE
    assert sorted(built.out.glob(f"{ARCHIVE}.*")) == parts
    joined = b"".join(p.read_bytes() for p in parts)
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(joined))) as tar:
        names = set(tar.getnames())
    assert {"app/__init__.py", "app/blob.bin", "helper_data.py"} <= names
    assert not any("__pycache__" in n or n.startswith("bin/") for n in names)
    assert manifest.unpacked_bytes >= 8000


def test_conflict_names_both_requirers(tmp_path: Path) -> None:
    index = tmp_path / "index"
    make_wheel(index, "left", "1.0", requires=("shared<2",))
    make_wheel(index, "right", "1.0", requires=("shared>=2",))
    make_wheel(index, "shared", "1.0")
    make_wheel(index, "shared", "2.0")
    options = build_options(tmp_path, index, ("left==1.0", "right==1.0"))
    with pytest.raises(BundleError) as caught:
        build_bundle(options, log=lambda _: None)
    assert caught.value.kind == "no-wheel"
    assert set(caught.value.requirers) == {"left 1.0", "right 1.0"}
    assert not (tmp_path / "bundle" / "manifest.json").exists()


def test_wheel_for_another_python_in_the_cache_is_refused(tmp_path: Path) -> None:
    alien = make_wheel(tmp_path / "cache", "alien", "1.0", tag="cp313-cp313-manylinux_2_17_x86_64")
    options = build_options(tmp_path, tmp_path / "index", ("alien",), python="3.12")
    with pytest.raises(BundleError) as caught:
        build_bundle(options, log=lambda _: None)
    assert caught.value.kind == "tags"
    assert caught.value.path == alien
    assert caught.value.expected == "cp312"
