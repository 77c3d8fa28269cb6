"""Cells that are the same run: which cells of a plan one training run serves (pure, no I/O).

Two cells share their runs when their runs would be the same computation: the same loss as a
function (:func:`gppo.objectives.identity.loss_key`: for every μ the same clip interval, the same
dual clip and aggregation) and every other bit of the cell equal: seed, backend, the backend's
settings, benchmarks, eval k, resources, selection. Only the cell's name (its id, method,
divergence, estimator, δ, loss parameters) and its axis point are left out, since they reach the
run only through the loss; so two axis points that give one function share runs too (an mc cell
at ``ratio_bounds`` [0.5, 10] and [0.5, 20]). In the quick start tv/mc and chi2/mc clip at the
same [0.8, 1.2]: 51 cells, 48 runs.

The API the launcher, ``plan``, the cost forecast and the reports share:

- :func:`run_key`: a cell's run key (equal keys: one run serves both cells);
- :func:`run_groups`: a plan's cells grouped by run key, in plan order; a group's first cell is
  its **lead**, the cell whose job runs (its run carries the lead's own id and tags); the others
  are **followers**: each gets a run of its own once the lead's run has finished, a copy of its
  results tagged ``gppo.same_runs`` (:data:`gppo.metrics.TAG_SAME_RUNS`) with the source run's
  id (docs/running.md "Identical cells run once");
- :func:`lead_of`: follower id -> its lead's id; :func:`run_count`: the runs a plan needs;
- :func:`whole_groups`: the cells some rounds want with every cell of their groups (a wanted
  cell's whole group is wanted: any member may be its runner, every member reads its results).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from functools import lru_cache

from gppo.cell import Cell
from gppo.objectives.identity import loss_key

#: what a cell's dict holds that reaches its run only through the loss (or names it)
_NAMING = ("id", "method", "divergence", "estimator", "delta", "loss_params", "axes")


@lru_cache(maxsize=4096)
def _loss_key(method: str, params_json: str) -> str:
    return loss_key(method, json.loads(params_json))


def run_key(cell: Cell) -> str:
    """A cell's run key (16 hex digits): cells with equal keys are served by one run (see the
    module docstring for what it covers)."""
    data = {k: v for k, v in cell.to_dict().items() if k not in _NAMING}
    params = json.dumps(cell.loss_params, sort_keys=True, separators=(",", ":"))
    data["loss"] = _loss_key(cell.method, params)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_groups(cells: Iterable[Cell]) -> list[tuple[Cell, ...]]:
    """``cells`` grouped by :func:`run_key`, groups in the order of their first cell, cells in
    plan order within a group (the first is the group's lead, the cell whose job runs)."""
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(run_key(cell), []).append(cell)
    return [tuple(g) for g in groups.values()]


def lead_of(cells: Iterable[Cell]) -> dict[str, str]:
    """Each follower's id -> its group's lead id (cells that run themselves are not keys)."""
    return {c.id: g[0].id for g in run_groups(cells) for c in g[1:]}


def whole_groups(wanted: Iterable[str], groups: Iterable[Sequence[Cell]]) -> set[str]:
    """The ids ``wanted`` and every other cell of a group (:func:`run_groups`) one of them is in:
    the adaptive rounds' wanted cells as the launcher's seed gate, ``status`` and the report
    read them."""
    out = set(wanted)
    for group in groups:
        if any(c.id in out for c in group):
            out |= {c.id for c in group}
    return out


def run_count(cells: Sequence[Cell]) -> int:
    """How many runs ``cells`` need: one per group of :func:`run_groups`."""
    return len({run_key(c) for c in cells})


def runs_text(cells: Sequence[Cell]) -> str:
    """``51 cells, 48 runs`` (what ``plan`` prints): the cells and the runs they need."""
    n, runs = len(cells), run_count(cells)
    return f"{n} cell{'s' * (n != 1)}, {runs} run{'s' * (runs != 1)}"


def shared_text(cells: Sequence[Cell], shown: int = 6) -> str | None:
    """``3 cells share an identical cell's runs: chi2-mc-s0 = tv-mc-s0, ...`` (None: none)."""
    pairs = [f"{f} = {lead}" for f, lead in lead_of(cells).items()]
    if not pairs:
        return None
    more = ", ..." if len(pairs) > shown else ""
    n = len(pairs)
    return (
        f"{n} cell{'s' * (n != 1)} share{'s' * (n == 1)} an identical cell's runs (the same "
        f"function, docs/running.md): {', '.join(pairs[:shown])}{more}"
    )
