"""notebooks/study_review.ipynb, executed with nbclient against a study that
``autotune study start`` ran.

The kernel is this interpreter: its spec is written into the test's own folder (ipykernel's
``write_kernel_spec``), so nothing has to be installed into a Jupyter data folder, and the
kernel's connection files and IPython profile go there too, so no home folder is needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from ipykernel.kernelspec import write_kernel_spec
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from study._helpers import REPO, StudyRun, best_measured, small_space, start_study

from .conftest import SEED_TRIALS

NOTEBOOK = REPO / "notebooks" / "study_review.ipynb"
PLOTLY = "application/vnd.plotly.v1+json"


@pytest.fixture(autouse=True)
def _jupyter_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Connection files and IPython's profile in the test's folder: no home folder needed."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter-runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))


def _execute(tmp_path: Path, cwd: Path = NOTEBOOK.parent) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    write_kernel_spec(kernels / "autotune-test")
    manager = KernelManager(
        kernel_name="autotune-test",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]),
    )
    client = NotebookClient(
        nb,
        km=manager,
        timeout=180,
        resources={"metadata": {"path": str(cwd)}},
    )
    try:
        client.execute()
    finally:  # nbclient leaves a kernel manager it was given running: stop the kernel here
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)
    return nb


def _outputs(nb: nbformat.NotebookNode) -> list[dict[str, Any]]:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]


def _texts(nb: nbformat.NotebookNode) -> str:
    parts = []
    for o in _outputs(nb):
        if o["output_type"] == "stream":
            parts.append(o["text"])
        for mime in ("text/plain", "text/markdown"):
            if mime in o.get("data", {}):
                parts.append(o["data"][mime])
    return "\n".join(parts)


def _figures(nb: nbformat.NotebookNode) -> dict[str, dict[str, Any]]:
    out = {}
    for o in _outputs(nb):
        data = o.get("data", {})
        if PLOTLY in data:
            fig = data[PLOTLY] if isinstance(data[PLOTLY], dict) else json.loads(data[PLOTLY])
            out[fig["layout"]["title"]["text"]] = fig
    return out


def test_committed_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    assert sum(c.cell_type == "markdown" for c in nb.cells) >= len(code)


@pytest.mark.parametrize("how", ["studies_dir", "storage"])
def test_review_notebook_on_a_study(
    seed_study: StudyRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setenv("AUTOTUNE_STUDY_NAME", "seed")
    if how == "storage":
        monkeypatch.setenv("AUTOTUNE_STORAGE", seed_study.storage_url)
        monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(tmp_path / "unused"))
    else:
        monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
        monkeypatch.setenv("AUTOTUNE_STUDIES_DIR", str(seed_study.studies_dir))
    best = best_measured(seed_study.load())
    assert best is not None

    nb = _execute(tmp_path)

    errors = [o for o in _outputs(nb) if o["output_type"] == "error"]
    assert not errors, errors
    text = _texts(nb)
    assert f"study seed: {SEED_TRIALS} finished trials in {seed_study.storage_url}" in text
    assert f"best: trial {best.number} ({best.user_attrs['role']})" in text
    assert best.user_attrs["sglang_command"] in text
    markdown = [
        o["data"]["text/markdown"] for o in _outputs(nb) if "text/markdown" in o.get("data", {})
    ]
    best_rows = [line for m in markdown if "best measured trials" in m for line in m.splitlines()]
    assert f"| {best.number} | {best.user_attrs['role']} |" in best_rows[4]
    assert any("| oom_kv_pool | 1 | 2 |" in m for m in markdown), markdown
    assert "proposals refused before launch (no server started):" in text

    figures = _figures(nb)
    assert set(figures) == {
        "seed: optimisation history",
        "seed: outcomes by mem_fraction_static and cuda_graph_max_bs",
    }
    history = {t["name"]: t for t in figures["seed: optimisation history"]["data"]}
    assert best.number in history["measured"]["x"]
    assert {"oom_kv_pool", "infeasible", "oom_cuda_graph"} <= set(history)
    crash_traces = {
        t["name"]
        for t in figures["seed: outcomes by mem_fraction_static and cuda_graph_max_bs"]["data"]
    }
    assert {"ok", "oom_kv_pool", "oom_cuda_graph"} <= crash_traces


def test_defaults_find_the_demo_study_from_the_notebooks_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without variables: study ``demo`` in ``studies/``, also from ``notebooks/`` (Jupyter's
    working folder for this notebook) when the studies are at the repository root."""
    root = tmp_path / "checkout"
    demo = start_study(small_space(tmp_path), "demo", 2, root / "studies")
    (root / "notebooks").mkdir()
    for name in ("AUTOTUNE_STUDY_NAME", "AUTOTUNE_STUDIES_DIR", "AUTOTUNE_STORAGE"):
        monkeypatch.delenv(name, raising=False)

    nb = _execute(tmp_path, cwd=root / "notebooks")

    assert not [o for o in _outputs(nb) if o["output_type"] == "error"]
    assert f"study demo: 2 finished trials in {demo.storage_url}" in _texts(nb)
    assert "demo: optimisation history" in _figures(nb)
