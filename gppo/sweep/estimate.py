"""What ``plan`` says under its table about a spec's size and cost: its axes, its number of runs
and the cost forecast (:mod:`gppo.sweep.forecast`), against the spec's budget when it has one
(:mod:`gppo.sweep.budget`). Reads the store only (one that does not exist is not created).
"""

from __future__ import annotations

import json

from gppo.cell import SEED_MARK, Cell
from gppo.grid.load import Plan
from gppo.grid.sharing import runs_text, shared_text
from gppo.sweep.budget import budget_lines
from gppo.sweep.forecast import Forecast, forecast, forecast_lines


def plan_lines(plan: Plan, fc: Forecast | None = None) -> list[str]:
    """The lines ``plan`` prints under its table: the axes (what each moves), the run count, the
    forecast (``fc``, else made here) and the budget."""
    cells = plan.cells
    spec = plan.spec
    lines = []
    for path, values in spec.axes.items():
        shown = ", ".join(json.dumps(v) if not isinstance(v, str) else v for v in values)
        mark = " (select)" if path in spec.select else ""
        lines.append(f"axes: {path} = {shown}{mark}")
        still = sorted({_base_id(c) for c in cells if path not in c.axes})
        if still:
            lines.append(
                f"  {', '.join(still)}: not moved by {path} (one set of runs at every point)"
            )
    lines.append(f"{runs_text(cells)}: {_shape(plan)}")
    shared = shared_text(cells)  # cells that are the same function share their runs
    lines += [shared] if shared else []
    fc = fc if fc is not None else forecast(plan)
    return lines + forecast_lines(fc, spec.price) + budget_lines(spec.budget, fc, spec.price)


def _base_id(cell: Cell) -> str:
    """The cell's id without its seed (``kl-atomic_r_min0.8``)."""
    return cell.id.rpartition(SEED_MARK)[0] or cell.id


def _shape(plan: Plan) -> str:
    """``12 cells x 3 points x 3 seeds + 5 cells x 1 point x 3 seeds``: cells grouped by the
    number of axis points they run at."""
    seeds = len(plan.spec.seed_list)
    points: dict[tuple[str | None, ...], set[str]] = {}
    for c in plan.cells:  # a cell: its loss's coordinates (an alias is its grid cell), or method
        what = (c.divergence, c.estimator) if c.divergence else (c.method,)
        points.setdefault(what, set()).add(_base_id(c))
    groups: dict[int, int] = {}
    for ids in points.values():
        groups[len(ids)] = groups.get(len(ids), 0) + 1
    return " + ".join(
        f"{n} cell{'s' * (n != 1)} x {p} point{'s' * (p != 1)} x {seeds} seed{'s' * (seeds != 1)}"
        for p, n in sorted(groups.items(), reverse=True)
    )
