"""`autotune bundle install`: the refusals before unpacking, safe unpacking, the import check."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from autotune.bundle import CUDA_ENV, INSTALLED, MANIFEST, BundleError, install_bundle
from autotune.cli import main

from .conftest import Built

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bundle(built: Built, tmp_path: Path) -> Path:
    """A copy of the built bundle that a test may damage."""
    return Path(shutil.copytree(built.out, tmp_path / "bundle"))


def _edit_manifest(bundle: Path, **changes: object) -> None:
    path = bundle / MANIFEST
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if key == "python":
            data["target"]["python"] = value
        else:
            data[key] = value
    path.write_text(json.dumps(data))


def _refusal(bundle: Path, target: Path, cuda: str | None = "13.0") -> BundleError:
    with pytest.raises(BundleError) as caught:
        install_bundle(bundle, target, cuda=cuda, log=lambda _: None)
    return caught.value


def test_install_unpacks_and_imports(bundle: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    result = install_bundle(bundle, target, cuda="13.0", log=lambda _: None)
    assert result.extracted
    assert result.imported == ("app", "helper", "helper_data")
    assert (target / "app" / "blob.bin").stat().st_size == 8000
    assert (target / "helper_data.py").is_file()  # *.data/purelib lands at the root
    assert (
        json.loads((target / INSTALLED).read_text())["parts"]
        == json.loads((bundle / MANIFEST).read_text())["parts"]
    )
    assert str(target.resolve()) in result.export
    again = install_bundle(bundle, target, cuda="13.0", log=lambda _: None)
    assert not again.extracted  # the same bundle is in place: idempotent
    forced = install_bundle(bundle, target, cuda="13.0", force=True, log=lambda _: None)
    assert forced.extracted


def test_missing_part_is_named(bundle: Path, tmp_path: Path) -> None:
    (bundle / "bundle.tar.xz.001").unlink()
    error = _refusal(bundle, tmp_path / "site")
    assert error.kind == "missing-part"
    assert error.path is not None and error.path.name == "bundle.tar.xz.001"
    assert not (tmp_path / "site").exists()


def test_wrong_checksum_is_named(bundle: Path, tmp_path: Path) -> None:
    part = bundle / "bundle.tar.xz.002"
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF
    part.write_bytes(bytes(data))
    error = _refusal(bundle, tmp_path / "site")
    assert error.kind == "checksum"
    assert error.path == part
    assert error.expected != error.found


def test_wrong_size_is_named(bundle: Path, tmp_path: Path) -> None:
    part = bundle / "bundle.tar.xz.000"
    part.write_bytes(part.read_bytes() + b"x")
    error = _refusal(bundle, tmp_path / "site")
    assert (error.kind, error.path) == ("part-size", part)


def test_wrong_python_is_refused(bundle: Path, tmp_path: Path) -> None:
    _edit_manifest(bundle, python="3.99")
    error = _refusal(bundle, tmp_path / "site")
    assert (error.kind, error.expected) == ("python", "3.99")


def test_wrong_cuda_is_refused(bundle: Path, tmp_path: Path) -> None:
    error = _refusal(bundle, tmp_path / "site", cuda="12.8")
    assert (error.kind, error.expected, error.found) == ("cuda", "13", "12.8")


def test_cuda_from_the_environment_through_the_cli(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CUDA_ENV, "12.8")
    args = ["bundle", "install", str(bundle), "--target", str(tmp_path / "site")]
    assert main(args) == 1
    monkeypatch.setenv(CUDA_ENV, "none")  # torch absent: the check is skipped
    assert main([*args, "--skip-import-check"]) == 0


def test_unknown_format_and_missing_manifest(bundle: Path, tmp_path: Path) -> None:
    _edit_manifest(bundle, format_version=99)
    error = _refusal(bundle, tmp_path / "site")
    assert (error.kind, error.found) == ("manifest", "99")
    (bundle / MANIFEST).unlink()
    assert _refusal(bundle, tmp_path / "site").kind == "manifest"


def test_failed_import_names_the_module(bundle: Path, tmp_path: Path) -> None:
    _edit_manifest(bundle, import_check=["app", "no_such_module_here"])
    error = _refusal(bundle, tmp_path / "site")
    assert (error.kind, error.expected) == ("import-check", "no_such_module_here")
    assert error.found is not None and "ModuleNotFoundError" in error.found


def _bundle_of(folder: Path, members: dict[str, bytes], built: Built) -> Path:
    """A bundle folder whose one part is an archive of ``members`` (names as given)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    part = lzma.compress(raw.getvalue())
    folder.mkdir()
    (folder / "bundle.tar.xz.000").write_bytes(part)
    manifest = json.loads((built.out / MANIFEST).read_text())
    digest = hashlib.sha256(part).hexdigest()
    manifest["parts"] = [{"name": "bundle.tar.xz.000", "size": len(part), "sha256": digest}]
    (folder / MANIFEST).write_text(json.dumps(manifest))
    return folder


@pytest.mark.parametrize("name", ["../evil.py", "/tmp/autotune-evil.py", "ok/../../evil.py"])
def test_path_traversal_member_is_refused(built: Built, tmp_path: Path, name: str) -> None:
    bundle = _bundle_of(tmp_path / "bad", {"fine.py": b"", name: b"x = 1\n"}, built)
    error = _refusal(bundle, tmp_path / "site" / "inner")
    assert (error.kind, error.found) == ("unsafe-member", name)
    assert not (tmp_path / "site" / "evil.py").exists()
    assert not (tmp_path / "evil.py").exists()
    assert not Path("/tmp/autotune-evil.py").exists()


def test_module_entry_needs_only_the_standard_library(bundle: Path, tmp_path: Path) -> None:
    """`python3 -m autotune.bundle install` with autotune's dependencies unimportable."""
    blocked = ["typer", "click", "rich", "optuna", "pydantic", "yaml", "httpx", "numpy"]
    code = (
        f"import runpy, sys\nfor m in {blocked!r}:\n    sys.modules[m] = None\n"
        "runpy.run_module('autotune.bundle', run_name='__main__')\n"
    )
    env = {**os.environ, CUDA_ENV: "13.0", "PYTHONPATH": str(REPO)}
    args = ["install", str(bundle), "--target", str(tmp_path / "site")]
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "export PYTHONPATH=" in done.stdout
