"""The real-server tier: `autotune smoke` and a whole study against a real SGLang on a GPU box.

Skipped where there is no NVIDIA GPU or no importable SGLang; run on such a box with
tests/gpu/README.md's one command. Each test keeps its files under ``AUTOTUNE_GPU_KEEP`` when
set (the recordings of tests/data/real/ come from there).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import psutil
import pytest

from autotune.cli import main

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "real-h100-tiny.yaml"
MODEL = Path("/tmp/autotune-real/model")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="SGLang not importable"),
]


def _folder(tmp_path: Path, name: str) -> Path:
    keep = os.environ.get("AUTOTUNE_GPU_KEEP")
    folder = Path(keep) / name if keep else tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _servers() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "sglang.launch_server" in cmd or "sglang serve" in cmd:
            found.append(p)
    return found


def test_smoke_passes_on_the_real_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path, "smoke")
    code = main(["smoke", "--space", str(SPACE), "--dir", str(folder), "--json"])
    report = json.loads(capsys.readouterr().out)
    (folder / "smoke.json").write_text(json.dumps(report, indent=1))
    steps = {s["name"]: s for s in report["steps"]}
    assert code == 0, steps
    assert steps["benchmark"]["figures"]["output_tok_s"] > 0
    assert steps["benchmark"]["figures"]["accept_length"] >= 1.0
    assert "oom_kv_pool" in steps["low fraction"]["detail"]
    assert _servers() == []


def test_real_study_reaches_every_outcome(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not (MODEL / "model.safetensors").is_file():
        assert (
            main(
                [
                    "make-tiny-model",
                    str(MODEL),
                    "--layers",
                    "8",
                    "--hidden",
                    "2048",
                    "--heads",
                    "16",
                    "--intermediate",
                    "5632",
                ]
            )
            == 0
        )
    studies = _folder(tmp_path, "studies")
    trials = os.environ.get("AUTOTUNE_GPU_TRIALS", "7")
    # AUTOTUNE_GPU_CONFIRM=0: the search alone (a box whose time allows no confirmation rounds)
    confirm = os.environ.get("AUTOTUNE_GPU_CONFIRM", "1") != "0"
    code = main(
        [
            "study",
            "start",
            "--space",
            str(SPACE),
            "--n-trials",
            trials,
            "--studies-dir",
            str(studies),
            "--no-informed",
            "--no-progress",
            "--seed",
            "1",
            "--confirm" if confirm else "--no-confirm",
        ]
    )
    assert code == 0
    capsys.readouterr()
    assert (
        main(
            [
                "study",
                "report",
                "--study-name",
                "real-h100-tiny",
                "--studies-dir",
                str(studies),
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    (studies / "report.json").write_text(json.dumps(report, indent=1, default=str))
    rows = report["rows"]
    assert len(rows) >= int(trials)
    ok_spec = [
        r
        for r in rows
        if r["outcome"] == "ok" and r["config"].get("speculative_algorithm", "none") != "none"
    ]
    assert ok_spec and all(r["accept_length"] and r["accept_length"] >= 1.0 for r in ok_spec)
    assert any(r["outcome"] == "oom_kv_pool" for r in rows)
    # the lower fraction is refused from the memory lines of the starts before it
    assert any(r["outcome"] == "infeasible" and "oom_kv_pool" in (r["advice"] or "") for r in rows)
    assert (report["verdict"] is not None) == confirm
    assert _servers() == []
