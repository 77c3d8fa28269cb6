"""``gppo-sweep schema`` and ``gppo-sweep init``: the grid spec's JSON Schema for an editor, and a
commented starter spec (:mod:`gppo.grid.json_schema`, :mod:`gppo.grid.starter`).

:mod:`gppo.cli.app` registers both; errors are one line and exit code 2 (:mod:`.errors`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer


def schema(
    path: Annotated[
        bool,
        typer.Option("--path", help="print the shipped schema file's path instead (for an editor)"),
    ] = False,
) -> None:
    """Print the grid spec's JSON Schema (every registered backend's section under its own key):
    point a YAML editor at it with a first line `# yaml-language-server: $schema=PATH`
    (docs/configuration.md). Structure only: names and axes are checked by `plan`."""
    from gppo.backends.base import BACKENDS
    from gppo.grid.json_schema import SHIPPED, grid_spec_schema, schema_text

    if path:
        typer.echo(str(SHIPPED))
        return
    usable = []
    for name in BACKENDS.names():
        try:
            BACKENDS.get(name)
        except ImportError:  # a backend whose module cannot be imported here: left out
            continue
        usable.append(name)
    sys.stdout.write(schema_text(grid_spec_schema(usable)))


def init(
    path: Annotated[
        Path, typer.Argument(help="the spec file to write (never overwritten)", show_default=True)
    ] = Path("grid.yaml"),
    backend: Annotated[
        str,
        typer.Option(
            "--backend", "-b", help="local (CPU testbed) | verl (GPU cluster) | trl (one node)"
        ),
    ] = "local",
) -> None:
    """Write a commented starter spec for a backend, every section explained in one line; then
    `gppo-sweep plan PATH`."""
    from gppo.grid.starter import write_starter

    written = write_starter(path, backend)
    typer.echo(f"wrote {written} (backend: {backend}); next: gppo-sweep plan {written}")
