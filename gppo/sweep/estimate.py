"""What ``plan`` says about a spec's size and cost: its axes, its number of runs, and a wall-time
estimate from earlier runs of the same backend in the spec's store (read only; a store that does
not exist is not created).

The estimate: the mean wall time of the latest finished cell runs of the backend (at most
:data:`SAMPLE` of them, any sweep) x the runs / ``ray.max_concurrent``. It assumes the new runs
cost what the earlier ones did (an axis over ``steps`` or the model size does not).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gppo import metrics as M
from gppo.cell import SEED_MARK, Cell
from gppo.grid.load import Plan
from gppo.store.uri import resolve_tracking_uri

#: earlier runs the estimate averages over (the latest finished ones)
SAMPLE = 200


@dataclass(frozen=True)
class Estimate:
    runs: int  # earlier runs averaged
    mean_s: float  # their mean wall time
    wall_s: float  # the plan's runs at the spec's concurrency


def plan_lines(plan: Plan) -> list[str]:
    """The lines ``plan`` prints under its table: the axes (what each moves), the run count and,
    where the store has earlier runs of the backend, the estimate."""
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
    lines.append(f"{len(cells)} runs = {_shape(plan)}")
    est = estimate(plan)
    if est is None:
        lines.append(f"wall time: no earlier {spec.backend} runs in the store to estimate from")
    else:
        lines.append(
            f"wall time ≈ {_hms(est.wall_s)} at max_concurrent={spec.ray.max_concurrent} "
            f"(mean {est.mean_s:.0f} s a run over {est.runs} earlier {spec.backend} runs)"
        )
    return lines


def _base_id(cell: Cell) -> str:
    return cell.id.rpartition(SEED_MARK)[0] or cell.id


def _shape(plan: Plan) -> str:
    """``12 cells x 3 points x 3 seeds + 5 cells x 1 point x 3 seeds``: cells grouped by the
    number of axis points they run at."""
    seeds = len(plan.spec.seed_list)
    points: dict[str, set[str]] = {}
    for c in plan.cells:
        base = c.id.rpartition(SEED_MARK)[0] or c.id
        points.setdefault(_cell_of(c), set()).add(base)
    groups: dict[int, int] = {}
    for ids in points.values():
        groups[len(ids)] = groups.get(len(ids), 0) + 1
    return " + ".join(
        f"{n} cell{'s' * (n != 1)} x {p} point{'s' * (p != 1)} x {seeds} seed{'s' * (seeds != 1)}"
        for p, n in sorted(groups.items(), reverse=True)
    )


def _cell_of(cell: Cell) -> str:
    return f"{cell.divergence}/{cell.estimator}" if cell.method == "gppo" else cell.method


def _hms(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def estimate(plan: Plan) -> Estimate | None:
    """The estimate, or None where the store does not exist or has no finished runs of the
    backend."""
    from gppo.sweep.session import store_exists

    uri = resolve_tracking_uri(plan.spec.tracking.uri)
    if not store_exists(uri):
        return None
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        exps = [e.experiment_id for e in client.search_experiments()]
        if not exps:
            return None
        runs = client.search_runs(
            exps,
            filter_string=(
                f"tags.`{M.TAG_ROLE}` = '{M.ROLE_CELL}' AND tags.`{M.TAG_BACKEND}` = "
                f"'{plan.spec.backend}' AND attributes.status = 'FINISHED'"
            ),
            max_results=SAMPLE,
            order_by=["attributes.start_time DESC"],
        )
    except Exception:  # an estimate never stops a plan
        return None
    walls = [
        (r.info.end_time - r.info.start_time) / 1000.0
        for r in runs
        if r.info.end_time and r.info.start_time
    ]
    if not walls:
        return None
    mean = sum(walls) / len(walls)
    return Estimate(len(walls), mean, mean * len(plan.cells) / plan.spec.ray.max_concurrent)
