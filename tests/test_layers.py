"""The package layers hold, and no two modules import each other (even lazily or for typing).

The layer contract lives in ``pyproject.toml`` (``[tool.importlinter]``) and is checked by
import-linter itself; the file-level check below reads every import statement of the package,
including those inside functions and ``if TYPE_CHECKING:`` blocks, which a lazy import would hide
from import-linter's view of a cycle.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autotune"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, from every import statement of the file.

    ``from P import m`` where ``P.m`` is a module counts as importing ``P.m`` (not ``P``'s
    ``__init__``); ``from P import name`` as importing ``P``.
    """
    files = {_module_name(p, package.parent): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in files.items():
        home = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = home.split(".")[: len(home.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.append(sub if sub in files else source)
            graph[name].update(t for t in targets if t in files and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_two_modules_import_each_other() -> None:
    found = cycles(import_graph(PACKAGE))
    assert found == [], "import cycles between modules: " + "; ".join(
        " <-> ".join(c) for c in found
    )


def test_the_cycle_check_sees_lazy_and_typing_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "autotune"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "_a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from autotune.sub._b import B\n"
    )
    (pkg / "sub" / "_b.py").write_text("def f():\n    from . import _a\n")
    (pkg / "sub" / "_c.py").write_text("from autotune.sub import _a\n")
    graph = import_graph(pkg)
    assert cycles(graph) == [["autotune.sub._a", "autotune.sub._b"]]
    assert graph["autotune.sub._c"] == {"autotune.sub._a"}


def test_package_layers_hold() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("import-linter is not installed: pip install -e '.[dev]'")
    done = subprocess.run(
        [lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
