#!/usr/bin/env python
"""Count `Any` in the public function signatures of gppo/ (issue 60).

A signature counts once per parameter, and once for its return annotation, whose annotation
mentions `Any` (`Any`, `typing.Any`, `dict[str, Any]`, a string annotation naming it...).
Public: a module-level function, or a method of a module-level class, whose name (and its
class's) does not start with `_` (so dunder methods such as `__init__` do not count).

    python scripts/count_any.py            # the total
    python scripts/count_any.py --list     # every counted place, then the total
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "gppo"


def _mentions_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Any":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "Any":
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            try:
                if _mentions_any(ast.parse(sub.value, mode="eval").body):
                    return True
            except SyntaxError:
                pass
    return False


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith(
            "_"
        ):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not (
                    item.name.startswith("_")
                ):
                    yield f"{node.name}.{item.name}", item


def count(root: Path = ROOT) -> list[str]:
    """Every counted place, as 'path:line qualname param'."""
    places: list[str] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        rel = path.relative_to(root.parent)
        for qualname, fn in _functions(tree):
            a = fn.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            params += [p for p in (a.vararg, a.kwarg) if p is not None]
            for p in params:
                if _mentions_any(p.annotation):
                    places.append(f"{rel}:{fn.lineno} {qualname} {p.arg}")
            if _mentions_any(fn.returns):
                places.append(f"{rel}:{fn.lineno} {qualname} ->")
    return places


def main() -> None:
    places = count()
    if "--list" in sys.argv[1:]:
        print("\n".join(places))
    print(len(places))


if __name__ == "__main__":
    main()
