"""MLflow -> the tidy score table (gppo/analysis/data/tidy.py), with status, steps and wall time.

Reads only the names of gppo/metrics.py. Cost: one query for the sweep's cell runs with their
latest metric values (:mod:`gppo.store.records`: SQL fast path or paged ``search_runs``); the base
row comes from those values too (``eval_base/...``, which every backend logs at step 0 through
:class:`gppo.backends.cell_run.CellRun`), so no metric history is read.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from gppo import metrics as M
from gppo.analysis.data.bases import BaseSource, base_rows
from gppo.analysis.data.tidy import (
    CPU_HOURS,
    GPU_HOURS,
    SELECTION,
    axes_key,
    axis_cell,
    cell_label,
    empty_tidy,
    expected_keys,
    normalise,
)
from gppo.cell import Cell
from gppo.objectives.defaults import REFERENCE
from gppo.store.cost import Hours, spent
from gppo.store.follower import costs_nothing
from gppo.store.health import refusal_naming_client
from gppo.store.records import (
    RunRecord,
    StoreClient,
    fetch_records,
    latest_attempts,
    no_gc,
    run_status,
)
from gppo.store.run_score import run_score
from gppo.store.state import State, SweepRef
from gppo.store.tracking import int_tag


@dataclass
class Collected:
    """What :func:`collect` found: the tidy scores, one row per chosen attempt, and the parent run."""

    tidy: pd.DataFrame
    runs: pd.DataFrame
    k: int | None
    parent_run_id: str | None = None
    client: StoreClient | None = field(default=None, repr=False)


def _eval_scores(metrics: dict[str, float], k: int | None, base: bool = False) -> dict[str, float]:
    parse = M.parse_eval_base_metric if base else M.parse_eval_metric
    out: dict[str, float] = {}
    for name, value in metrics.items():
        parsed = parse(name)
        if parsed and (k is None or parsed[1] == k):
            out[parsed[0]] = float(value)
    return out


def _steps(run: RunRecord) -> float:
    steps = [run.steps[M.TRAIN_SCORE]] if M.TRAIN_SCORE in run.steps else list(run.steps.values())
    return float(max(steps)) if steps else math.nan


def _wall_time(run: RunRecord, now_ms: int) -> float:
    if M.WALL_TIME in run.metrics:
        return float(run.metrics[M.WALL_TIME])
    if run.start_time is None:
        return math.nan
    return max(0.0, ((run.end_time or now_ms) - run.start_time) / 1000.0)


#: the cost of a run that trained nothing (a copy of an identical cell's results)
NOTHING_PAID = {M.COST_CPU_HOURS: 0.0, M.COST_GPU_HOURS: 0.0}


def paid_by_cell(records: Iterable[RunRecord]) -> dict[str, Hours | None]:
    """Per cell id, the hours of every attempt's run (a failed attempt was paid for too)."""
    runs: dict[str, list[dict[str, float]]] = {}
    for run in records:  # a copy of an identical cell's results (gppo.same_runs) cost nothing
        paid = NOTHING_PAID if costs_nothing(run.tags) else run.metrics
        runs.setdefault(run.tags.get(M.TAG_CELL_ID) or run.run_id, []).append(paid)
    return {cid: spent(metrics) for cid, metrics in runs.items()}


def cost_columns(hours: Hours | None) -> dict[str, float]:
    """The tidy cost columns of one cell's runs (NaN: none logged, e.g. still running; 0 for a
    cell whose results are an identical cell's runs)."""
    if hours is None:
        return {CPU_HOURS: math.nan, GPU_HOURS: math.nan}
    return {CPU_HOURS: hours.cpu, GPU_HOURS: hours.gpu}


def _pick_k(runs: Iterable[RunRecord], k: int | None) -> int | None:
    if k is not None:
        return k
    ks = {p[1] for r in runs for name in r.metrics if (p := M.parse_eval_metric(name))}
    return max(ks) if ks else None


def collect(
    ref: SweepRef,
    *,
    expected: Sequence[Cell] | None = None,
    k: int | None = None,
    reference: str = REFERENCE,
    client: StoreClient | None = None,
    fast: bool = True,
) -> Collected:
    """Collect a sweep's cell runs into the tidy table (see gppo/analysis/data/tidy.py).

    Args:
        ref: the sweep (:class:`gppo.store.state.SweepRef`: ``LaunchResult.ref``, or
            :func:`gppo.store.records.find_sweep`); only its experiment's runs are read.
        expected: the spec's expanded cells; those without a run are reported as ``missing``.
        k: avg@k to read (default: the largest k logged).
        reference: cell whose runs give the base row (``eval_base/...``), at each axis point
            from the runs standing there (gppo/analysis/data/bases.py: falls back to any cell of the
            same domain, seed and point that has it; none has it: the base row is ``pending``,
            shown as a missing cell is).
        fast: read SQL stores through the fast path of :mod:`gppo.store.records`.
    """
    if client is None:  # a server's 401/403: one line naming it
        client = refusal_naming_client(ref.tracking_uri)
    with no_gc():
        records = fetch_records(client, ref.sweep_id, experiment_id=ref.experiment_id, fast=fast)
        chosen = latest_attempts(records)
        tidy, run_rows, k = _tidy(chosen, k, reference, expected, paid=paid_by_cell(records))
    return Collected(
        tidy=tidy, runs=pd.DataFrame(run_rows), k=k, parent_run_id=ref.parent_run_id, client=client
    )


def _tidy(
    chosen: dict[str, RunRecord],
    k: int | None,
    reference: str,
    expected: Sequence[Cell] | None,
    *,
    paid: dict[str, Hours | None] | None = None,
) -> tuple[pd.DataFrame, list[dict[str, object]], int | None]:
    """The tidy scores of the ``chosen`` run of each cell (plus a pending row per ``expected``
    cell without one, and each axis point's base rows), the runs' own rows, and the k read."""
    k = _pick_k(chosen.values(), k)
    paid = paid or {}
    now_ms = int(time.time() * 1000)
    rows: list[dict[str, object]] = []
    run_rows: list[dict[str, object]] = []
    base_sources: list[BaseSource] = []
    all_axes: dict[str, dict[object, None]] = {}  # path -> its values (ordered, as tidy cells)
    for cell_id, run in sorted(chosen.items()):
        one = _one_run(cell_id, run, k, paid.get(cell_id), now_ms)
        rows.extend(one.rows)
        run_rows.append(one.run_row)
        base_sources.append(one.base)
        _add_values(all_axes, one.point)
    if expected is not None:
        rows.extend(_pending_rows(expected, run_rows, all_axes))
    axes = {path: list(values) for path, values in all_axes.items()}
    rows.extend(base_rows(base_sources, axes, reference))  # each point's own base
    for row in rows:  # every axis a column, None where the axis does not move the run
        for path in all_axes:
            row.setdefault(path, None)
    tidy = normalise(pd.DataFrame(rows)) if rows else empty_tidy()
    return tidy, run_rows, k


@dataclass
class _RunRows:
    """What one cell's run gives the tidy frame: its score rows (one a benchmark; one row
    without a score when it has none), its run row, its base's scores and its axis point."""

    rows: list[dict[str, object]]
    run_row: dict[str, object]
    base: BaseSource
    point: dict[str, object]


def _one_run(
    cell_id: str, run: RunRecord, k: int | None, paid: Hours | None, now_ms: int
) -> _RunRows:
    tags = run.tags
    method = tags.get(M.TAG_METHOD, "")
    try:
        label = cell_label(method, tags.get(M.TAG_DIVERGENCE), tags.get(M.TAG_ESTIMATOR))
    except ValueError:
        label = cell_id
    domain = tags.get(M.TAG_DOMAIN, "") or "default"
    seed = int_tag(tags, M.TAG_SEED)
    status = run_status(run)
    point = json.loads(tags[M.TAG_AXES]) if tags.get(M.TAG_AXES) else {}
    run_k = int(point["eval.k"]) if "eval.k" in point else k  # an eval.k axis: the run's k
    scores = _eval_scores(run.metrics, run_k)
    if status is State.DONE and not scores:
        status = State.FAILED  # finished without a final eval: nothing to report
    cells = {path: axis_cell(value) for path, value in point.items()}
    common = {
        "domain": domain,
        "cell": label,
        "seed": seed,
        "status": status.value,
        "steps": _steps(run),
        "wall_time_s": _wall_time(run, now_ms),
        # the run that trained it: a cell served by an identical cell's run names that run
        "run_id": run.tags.get(M.TAG_SAME_RUNS) or run.run_id,
        **cost_columns(paid),
        **cells,
    }
    if run_k is not None and M.select_metric(run_k) in run.metrics:
        common[SELECTION] = float(run.metrics[M.select_metric(run_k)])
    run_row = {
        **common,
        "cell_id": cell_id,
        "attempt": int_tag(tags, M.TAG_ATTEMPT),
        "axes": axes_key(point),
        # the seed's score as the launcher's rounds read it (a DONE run's, else None)
        "seed_score": run_score(run.metrics, run_k) if status is State.DONE else None,
    }
    if status is State.DONE:
        rows = [{**common, "benchmark": b, "score": s} for b, s in scores.items()]
    else:
        rows = [{**common, "benchmark": "", "score": math.nan}]
    base = _eval_scores(run.metrics, run_k, base=True)  # the base at the run's own k
    source = BaseSource(domain, seed, label, dict(cells), status.value, run.run_id, base)
    return _RunRows(rows, run_row, source, point)


def _pending_rows(
    expected: Sequence[Cell],
    run_rows: list[dict[str, object]],
    all_axes: dict[str, dict[object, None]],
) -> list[dict[str, object]]:
    """A pending row for each expected (domain, cell, seed, point) without a run; its axis
    values join ``all_axes``."""
    seen = {(r["domain"], r["cell"], r["seed"], r["axes"]) for r in run_rows}
    domains = {str(r["domain"]) for r in run_rows} or {"default"}
    rows: list[dict[str, object]] = []
    for domain, label, seed, point in sorted(expected_keys(expected, domains, axes=True) - seen):
        values = json.loads(point) if point else {}
        _add_values(all_axes, values)
        rows.append(
            {
                "domain": domain,
                "cell": label,
                "seed": seed,
                "status": State.PENDING.value,
                "benchmark": "",
                **{path: axis_cell(value) for path, value in values.items()},
            }
        )
    return rows


def _add_values(found: dict[str, dict[object, None]], point: dict[str, object]) -> None:
    """Add ``point``'s values (as tidy cells) to each axis's values in ``found``."""
    for path, value in point.items():
        found.setdefault(path, {})[axis_cell(value)] = None
