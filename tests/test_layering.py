"""The house's imports point one way: down the stack in README's "Layout", never up, no cycles;
and backends stand side by side, never on each other.

Every ``import``/``from … import`` of ``gppo`` code in ``gppo/`` counts, at module level or inside
a function (a lazy import is still an arrow). Fails with the file:line of each offending import.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "gppo"

#: top to bottom; a part may import only parts below it (README.md, "Layout")
LAYERS: list[tuple[str, ...]] = [
    ("cli",),
    ("analysis",),
    ("sweep",),
    ("stats",),
    ("grid",),
    ("backends",),
    ("testbed",),
    ("store",),
    ("cell", "metrics", "score_format", "processes", "ports"),
    ("objectives",),
    ("registry",),
    ("errors",),
]
LEVEL = {part: i for i, parts in enumerate(LAYERS) for part in parts}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def part_of(module: str) -> str | None:
    """``gppo.sweep.tuning.runner`` -> ``sweep``; ``gppo`` itself -> None."""
    bits = module.split(".")
    return bits[1] if len(bits) > 1 else None


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(gppo module imported, line) for every import in ``path``, relative ones resolved."""
    return [(m, line) for m, line in modules_imported(path) if m == "gppo" or m.startswith("gppo.")]


def modules_imported(path: Path) -> list[tuple[str, int]]:
    """(module imported, line) for every import in ``path``, relative ones resolved."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target == "gppo":  # from gppo import metrics
                out += [(f"gppo.{a.name}", node.lineno) for a in node.names]
            else:
                out.append((target, node.lineno))
    return out


def all_imports() -> list[tuple[str, str, str]]:
    """(importer module, imported module, "file:line") over the package."""
    rows = []
    for path in sorted(ROOT.rglob("*.py")):
        for target, line in imports_of(path):
            rows.append((module_name(path), target, f"{path.relative_to(ROOT.parent)}:{line}"))
    return rows


def readme_layers() -> list[tuple[str, ...]]:
    """The stack drawn in README.md's "Layout" section, top first."""
    text = (ROOT.parent / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    names = [re.split(r"\s{2,}", line.strip())[0] for line in block.splitlines()]
    return [tuple(n.split(", ")) for n in names if n and n[0].isalpha()]


def test_readme_draws_the_same_stack():
    assert readme_layers() == LAYERS


def test_every_part_has_a_layer():
    parts = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()}
    parts -= {"__init__", "__pycache__", "py"}
    assert parts <= set(LEVEL), f"add to LAYERS (and README's Layout): {sorted(parts - set(LEVEL))}"


def mlflow_imports(root: Path = ROOT) -> list[str]:
    """``file:line`` of each import of ``mlflow`` in the package outside ``store/``."""
    wrong = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "store":
            continue
        for target, line in modules_imported(path):
            if target.split(".")[0] == "mlflow":
                wrong.append(f"{root.name}/{rel}:{line}: {target}")
    return wrong


def test_only_the_store_imports_mlflow():
    """README's Layout: the store owns every MLflow read and write; the layers above reach MLflow
    through it (gppo.store.tracking.store_client, log_points, ...), even lazily."""
    wrong = mlflow_imports()
    assert not wrong, "mlflow imported outside gppo/store:\n" + "\n".join(wrong)


def test_the_mlflow_check_sees_a_lazy_import(tmp_path, monkeypatch):
    """A function-level ``from mlflow…`` in a stand-in analysis module is reported; the same in
    a store module is not."""
    fake = tmp_path / "gppo"
    for part in ("analysis", "store"):
        (fake / part).mkdir(parents=True)
    lazy = "def f():\n    from mlflow.entities import Metric\n    return Metric\n"
    (fake / "analysis" / "x.py").write_text(lazy)
    (fake / "store" / "y.py").write_text("import mlflow\n")
    monkeypatch.setitem(globals(), "ROOT", fake)
    assert mlflow_imports(fake) == ["gppo/analysis/x.py:2: mlflow.entities"]


def test_imports_point_down_the_stack():
    wrong = []
    for src, dst, where in all_imports():
        a, b = part_of(src), part_of(dst)
        if a is None or b is None or a == b:
            continue
        if LEVEL[b] <= LEVEL[a]:
            wrong.append(f"{where}: {a} imports {b} ({dst})")
    assert not wrong, "imports that run up or across the stack:\n" + "\n".join(wrong)


BACKENDS = ROOT / "backends"


def backend_of(module: str) -> str | None:
    """``gppo.backends.trl.settings`` -> ``trl`` (a backend is a package under ``backends/``);
    a shared backend module (``gppo.backends.base``, ``cell_run``, ...) or anything else -> None."""
    bits = module.split(".")
    if len(bits) < 3 or bits[:2] != ["gppo", "backends"]:
        return None
    return bits[2] if (BACKENDS / bits[2]).is_dir() else None


def sibling_imports() -> list[str]:
    """One line per import of a backend by another backend, or by a shared backend module."""
    wrong = []
    for src, dst, where in all_imports():
        if part_of(src) != "backends":
            continue
        mine, theirs = backend_of(src), backend_of(dst)
        if theirs is not None and theirs != mine:
            who = f"backend {mine}" if mine else f"shared module {src}"
            wrong.append(f"{where}: {who} imports backend {theirs} ({dst})")
    return wrong


def test_backends_do_not_import_each_other():
    """A backend imports ``backends/base``, ``cell_run``, the other shared modules directly in
    ``backends/``, the layers below and the testbed library; never a sibling backend (a shared
    module imports none)."""
    wrong = sibling_imports()
    assert not wrong, "imports between backends:\n" + "\n".join(wrong)


def test_the_sibling_check_sees_a_sibling(monkeypatch):
    """An import of verl from trl (here, a stand-in file) is reported with its file and line."""
    fake = [("gppo.backends.trl.x", "gppo.backends.verl.reward", "gppo/backends/trl/x.py:3"),
            ("gppo.backends.trl.x", "gppo.backends.trl.settings", "gppo/backends/trl/x.py:4"),
            ("gppo.backends.rewards", "gppo.backends.local", "gppo/backends/rewards.py:9"),
            ("gppo.backends.trl.x", "gppo.backends.cell_run", "gppo/backends/trl/x.py:5")]  # fmt: skip
    monkeypatch.setitem(globals(), "all_imports", lambda: fake)
    assert sibling_imports() == [
        "gppo/backends/trl/x.py:3: backend trl imports backend verl (gppo.backends.verl.reward)",
        "gppo/backends/rewards.py:9: shared module gppo.backends.rewards imports backend local "
        "(gppo.backends.local)",
    ]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("grain", ["part", "module"])
def test_no_import_cycles(grain):
    modules = {module_name(p) for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst, _where in all_imports():
        if grain == "part":
            a, b = part_of(src), part_of(dst)
            if a and b and a != b:
                graph[a].add(b)
            continue
        while dst not in modules and "." in dst:  # from gppo.x import name -> gppo.x
            dst = dst.rpartition(".")[0]
        if dst != src and dst in modules and not src.startswith(dst + "."):  # not a parent
            graph[src].add(dst)
    cycles = _cycles(graph)
    assert not cycles, f"import cycles between {grain}s: " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


def test_the_checks_see_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
