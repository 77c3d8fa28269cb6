"""What ``plan`` says under its table about a spec's size and cost: its axes, its number of runs
and the cost forecast (:mod:`gppo.sweep.planning.forecast`), against the spec's budget when it has one
(:mod:`gppo.sweep.planning.budget`). Reads the store only (one that does not exist is not created).
"""

from __future__ import annotations

import json

from gppo.cell import SEED_MARK, Cell
from gppo.grid.load import Plan
from gppo.grid.sharing import runs_text, shared_text
from gppo.sweep.planning.budget import budget_lines, hours_text_short
from gppo.sweep.planning.forecast import Forecast, forecast, forecast_lines, wall_line


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
    lines += forecast_lines(fc, spec.price)
    if spec.adaptive is not None:
        lines += adaptive_lines(plan, fc)
    return lines + budget_lines(spec.budget, fc, spec.price)


def adaptive_lines(plan: Plan, fc: Forecast) -> list[str]:
    """``seeds: {min, max}``: the range of runs, from every row decided at the first look
    (``min`` seeds a cell) to every row run to ``max``, and the forecast at both ends (the
    forecast above is the one at ``max``). The first round and the range are the rounds' own
    (:meth:`gppo.stats.rounds.Rounds.first_round`, :meth:`~gppo.stats.rounds.Rounds.runs_range`),
    the ones the report shows."""
    from gppo.stats.rounds import Rounds  # scipy: only for adaptive seeds

    a = plan.spec.adaptive
    assert a is not None
    rounds = Rounds.of_plan(plan)
    first = rounds.first_round()
    lo_runs, hi_runs = rounds.runs_range()
    lo, _, _ = fc.total(first)
    hi, _, _ = fc.total()
    batch = f"{a.batch} more a round" if a.batch != 1 else "one more a round"
    margin = f"; equivalence within ±{a.equivalence:g} points" if a.equivalence else ""
    wall = wall_line(fc, first).removeprefix("wall time ")
    return [
        f"adaptive seeds: {a.min} to {a.max} a cell, {batch} to the rows still undecided "
        f"against the reference{margin}: {lo_runs} to {hi_runs} runs",
        f"  forecast range: {hours_text_short(lo)} ({lo_runs} runs: every row decided at "
        f"{a.min} seeds; wall time {wall}) to {hours_text_short(hi)} ({hi_runs} runs: every "
        f"row run to {a.max}, the forecast above)",
    ]


def _base_id(cell: Cell) -> str:
    """The cell's id without its seed (``kl-atomic_r_min0.8``)."""
    return cell.id.rpartition(SEED_MARK)[0] or cell.id


def _shape(plan: Plan) -> str:
    """``12 cells x 3 points x 3 seeds + 5 cells x 1 point x 3 seeds``: cells grouped by the
    number of axis points they run at."""
    a = plan.spec.adaptive
    seeds = len(plan.spec.seed_list)
    n_seeds = f"{a.min}-{a.max} seeds" if a is not None else f"{seeds} seed{'s' * (seeds != 1)}"
    points: dict[tuple[str | None, ...], set[str]] = {}
    for c in plan.cells:  # a cell: its loss's coordinates (an alias is its grid cell), or method
        what = (c.divergence, c.estimator) if c.divergence else (c.method,)
        points.setdefault(what, set()).add(_base_id(c))
    groups: dict[int, int] = {}
    for ids in points.values():
        groups[len(ids)] = groups.get(len(ids), 0) + 1
    return " + ".join(
        f"{n} cell{'s' * (n != 1)} x {p} point{'s' * (p != 1)} x {n_seeds}"
        for p, n in sorted(groups.items(), reverse=True)
    )
