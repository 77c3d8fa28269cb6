"""Starter specs (``gppo-sweep init``): a commented grid spec per built-in backend, every section
explained in one line, its first line pointing a YAML editor at the shipped schema.

The templates are ``gppo/grid/starters/<backend>.yaml``; ``NAME`` in them becomes the sweep's name
(the new file's stem, made a valid name). ``tests/grid/test_starter.py`` plans each.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gppo.grid.json_schema import MODELINE, SHIPPED
from gppo.grid.spec_errors import SpecError

TEMPLATES = Path(__file__).with_name("starters")


def backends() -> list[str]:
    """The backends a starter spec exists for."""
    return sorted(p.stem for p in TEMPLATES.glob("*.yaml"))


def sweep_name(path: Path) -> str:
    """A valid sweep name from a spec file's stem (``my sweep.yaml`` -> ``my-sweep``)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-")[:64]
    return name or "my-sweep"


def schema_ref(path: Path) -> str:
    """The shipped schema as the spec at ``path`` names it: relative to its folder."""
    folder = path.resolve().parent
    try:
        return Path(os.path.relpath(SHIPPED, folder)).as_posix()
    except ValueError:  # another drive (Windows): absolute
        return SHIPPED.as_posix()


def starter_text(backend: str, path: Path) -> str:
    """The starter spec of ``backend`` for the file at ``path``."""
    template = TEMPLATES / f"{backend}.yaml"
    if not template.is_file():
        raise SpecError(
            str(path), "backend", f"no starter spec for {backend!r}; known: {', '.join(backends())}"
        )
    body = template.read_text().replace("name: NAME ", f"name: {sweep_name(path)} ", 1)
    return f"{MODELINE}{schema_ref(path)}\n{body}"


def write_starter(path: Path, backend: str) -> Path:
    """Write the starter spec of ``backend`` at ``path``; an existing file is never overwritten
    (one :class:`SpecError` line)."""
    text = starter_text(backend, path)
    if path.exists():
        raise SpecError(str(path), "", "the file exists; give another PATH (nothing written)")
    if not path.parent.is_dir():
        raise SpecError(str(path), "", f"no folder {path.parent}; create it first")
    with path.open("x") as out:  # "x": refused if it appeared meanwhile
        out.write(text)
    return path
