"""Grid specs: schema, validation with one-line errors, deterministic expansion into cells.

``load_plan(path)`` is the one call most users need: it returns a :class:`Plan` (the validated
spec, its sweep id and its cells) or raises :class:`SpecError` whose ``str`` is the one-line
``FILE: field.path: message`` the CLI prints. :func:`spec_from_yaml` / :func:`spec_to_yaml`
convert between a spec's YAML shape (the backend's section named after it) and :class:`GridSpec`.
"""

from gppo.cell import Cell, Resources
from gppo.grid.expand import expand, sweep_id
from gppo.grid.load import (
    Plan,
    load_plan,
    load_spec,
    parse_spec,
    plan_rows,
    spec_from_yaml,
    spec_to_yaml,
)
from gppo.grid.schema import GridSpec
from gppo.grid.spec_errors import SpecError

__all__ = [
    "Cell",
    "GridSpec",
    "Plan",
    "Resources",
    "SpecError",
    "expand",
    "load_plan",
    "load_spec",
    "parse_spec",
    "plan_rows",
    "spec_from_yaml",
    "spec_to_yaml",
    "sweep_id",
]
