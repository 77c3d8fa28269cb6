"""The tidy score table every report is built from, its cell labels, and the CSV reader.

One row per (domain, cell, seed, benchmark) with the avg@k ``score`` as a fraction in [0, 1]:

=============  =========================================================================
column         meaning
=============  =========================================================================
domain         ``math``, ``code``, … (the backend's domain)
cell           ``DIVERGENCE/ESTIMATOR`` for grid cells (``kl/atomic``), the method name for
               baselines (``gspo``), ``base`` for the base model (the step-0 eval)
benchmark      benchmark name as logged (``AIME24``, ``add3``); empty for a cell with no result
seed           replicate seed (int)
score          avg@k in [0, 1]; NaN where there is no result
status         a :class:`gppo.store.state.State` value: ``done`` (has a result), ``failed``,
               ``stopped``, ``running`` or ``pending`` (an expected cell with no run); a CSV
               may also say ``finished`` (= done) or ``missing`` (= pending)
steps          optimisation steps reached (NaN if unknown)
wall_time_s    seconds the attempt ran (NaN if unknown)
cpu_hours      CPU-hours of the cell's runs, every attempt (:mod:`gppo.store.cost`; NaN if
               none logged)
gpu_hours      GPU-hours of the same
run_id         MLflow run id of the run that trained it: a cell served by an identical cell's
               run (:mod:`gppo.grid.sharing`) has that run's, so two rows with one
               ``run_id`` show the same runs ("" for CSV input or missing cells)
=============  =========================================================================

A sweep with axes adds one column per axis, named by its dotted path (``calibration.r_min``):
the run's value there, empty (None) for a run the axis does not move (a baseline under an
r_min axis: the same runs stand at every point). A sweep with ``select:`` adds ``selection``:
the run's held-out selection score (a split disjoint from the benchmarks, never reported).
A CSV may carry the same columns (:func:`is_axis_column`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import cast

import pandas as pd

from gppo.cell import Cell
from gppo.errors import ReportError
from gppo.objectives.defaults import grid_label
from gppo.registry import LazyMapping, LazyTuple
from gppo.store.state import State

TIDY_COLUMNS = (
    "domain",
    "cell",
    "benchmark",
    "seed",
    "score",
    "status",
    "steps",
    "wall_time_s",
    "cpu_hours",
    "gpu_hours",
    "run_id",
)
CSV_REQUIRED = ("domain", "cell", "benchmark", "seed", "score")
#: the held-out selection score column (a sweep with ``select:``)
SELECTION = "selection"
#: the cost columns (the same value on every benchmark row of a run)
CPU_HOURS, GPU_HOURS = "cpu_hours", "gpu_hours"
#: the columns of numbers (float, NaN where unknown)
NUMERIC = ("score", "steps", "wall_time_s", CPU_HOURS, GPU_HOURS)
CSV_OPTIONAL = ("status", "steps", "wall_time_s", CPU_HOURS, GPU_HOURS, "run_id", SELECTION)


def is_axis_column(name: str) -> bool:
    """An axis column is named by the axis's dotted path (``calibration.r_min``, ``local.lr``)."""
    parts = name.split(".")
    return len(parts) > 1 and all(p.replace("_", "").replace("-", "").isalnum() for p in parts)


def axis_columns(tidy: pd.DataFrame) -> list[str]:
    """The axis columns of a tidy frame, in its order."""
    return [c for c in tidy.columns if is_axis_column(c)]


def axis_cell(value: object) -> object:
    """An axis value as a tidy cell: a scalar as it is, a list as its JSON text (hashable)."""
    import json

    return json.dumps(value) if isinstance(value, (list, dict)) else value


def axis_value(text: str) -> object:
    """An axis value read from text (a CSV cell, a tag): a number, true/false, JSON, else the
    text; ``""`` -> None (the axis does not move that run)."""
    import json

    text = text.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return json.dumps(value) if isinstance(value, (list, dict)) else value


#: the statuses a row can have, a result first, then the reasons for none in footnote order
STATUSES = tuple(
    s.value for s in (State.DONE, State.FAILED, State.STOPPED, State.RUNNING, State.PENDING)
)
#: older words a tidy CSV may use
STATUS_ALIASES = {"finished": State.DONE.value, "missing": State.PENDING.value}
BASE = "base"


def _methods() -> ModuleType:
    """The method registry's module, imported on first use (reading a CSV needs no torch)."""
    from gppo.objectives import methods

    return methods


#: Method aliases of the grid and the cell they occupy (``grpo`` -> ``tv/mc``), and the baselines
#: in registration order (the paper's Table 1 order): both read from the method registry.
ALIAS_CELLS: Mapping[str, str] = LazyMapping(lambda: _methods().alias_cells())
BASELINES: Sequence[str] = LazyTuple(lambda: _methods().baseline_names())


class ReportInputError(ReportError):
    """Bad report input; the message is one line naming the file, row/column and what is allowed."""


def cell_label(method: str, divergence: str | None = None, estimator: str | None = None) -> str:
    """Table id of a cell: ``DIVERGENCE/ESTIMATOR`` for ``gppo`` (and its aliases), else the method."""
    if method == "gppo":
        if not divergence or not estimator:
            raise ValueError("a gppo cell needs a divergence and an estimator")
        return grid_label(divergence, estimator)
    return ALIAS_CELLS.get(method, method)


def label_of_cell(cell: Cell) -> str:
    """:func:`cell_label` of a resolved :class:`~gppo.cell.Cell`."""
    return cell_label(cell.method, cell.divergence, cell.estimator)


def domain_of_cell(cell: Cell) -> str | None:
    """The cell's domain when its backend settings name one (``settings["domain"]``)."""
    value = cell.settings.get("domain") if isinstance(cell.settings, dict) else None
    return str(value) if value else None


def expected_keys(
    cells: Iterable[Cell], default_domains: Iterable[str] = (), *, axes: bool = False
) -> set[tuple]:
    """(domain, label, seed) of every expected cell; cells without a domain get each default one;
    with ``axes`` also the cell's axis point (:func:`axes_key`)."""
    defaults = sorted(set(default_domains))
    keys: set[tuple] = set()
    for cell in cells:
        domain = domain_of_cell(cell)
        for d in [domain] if domain else defaults:
            key = (d, label_of_cell(cell), int(cell.seed))
            keys.add((*key, axes_key(cell.axes)) if axes else key)
    return keys


def axes_key(point: Mapping[str, object]) -> str:
    """An axis point as one sortable text (JSON, sorted keys; ``""`` for none)."""
    import json

    return json.dumps(dict(point), sort_keys=True) if point else ""


def empty_tidy() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in TIDY_COLUMNS})


def _dtype(column: str) -> str:
    if column in NUMERIC:
        return "float64"
    return "int64" if column == "seed" else "object"


def normalise(frame: pd.DataFrame) -> pd.DataFrame:
    """Add missing optional columns with defaults and fix dtypes/order."""
    out = frame.copy()
    for column in TIDY_COLUMNS:
        if column not in out:
            out[column] = {"status": State.DONE.value, "run_id": "", "benchmark": ""}.get(
                column, math.nan
            )
    extra = [c for c in out.columns if c == SELECTION or is_axis_column(c)]
    out = out[[*TIDY_COLUMNS, *extra]]
    if SELECTION in out:
        out[SELECTION] = out[SELECTION].astype("float64")
    for column in extra:
        if column != SELECTION:
            out[column] = out[column].astype(object).where(out[column].notna(), None)
    out["seed"] = out["seed"].astype("int64")
    for column in NUMERIC:
        out[column] = out[column].astype("float64")
    for column in ("domain", "cell", "benchmark", "status", "run_id"):
        out[column] = out[column].fillna("").astype(str)
    blank = out["status"] == ""
    out.loc[blank, "status"] = (
        out.loc[blank, "score"].notna().map({True: State.DONE.value, False: State.PENDING.value})
    )
    return out.reset_index(drop=True)


def read_scores_csv(path: str | Path) -> pd.DataFrame:
    """Read and validate a tidy CSV (``domain,cell,benchmark,seed,score`` + optional columns).

    A blank score means "no result" (status ``pending`` unless a ``status`` column says why).
    Raises :class:`ReportInputError` with a one-line message on the first problem found.
    """
    path = Path(path)
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise ReportInputError(f"{path}: no such file") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReportInputError(f"{path}: not a readable CSV ({first})") from None
    columns = [c.strip() for c in frame.columns]
    frame.columns = columns
    missing = [c for c in CSV_REQUIRED if c not in columns]
    if missing:
        raise ReportInputError(
            f"{path}: missing column(s) {', '.join(missing)}; required: {','.join(CSV_REQUIRED)}"
            f" (optional: {','.join(CSV_OPTIONAL)})"
        )
    known = CSV_REQUIRED + CSV_OPTIONAL
    unknown = [c for c in columns if c not in known and not is_axis_column(c)]
    if unknown:
        raise ReportInputError(
            f"{path}: unknown column {unknown[0]!r}; allowed: {','.join(known)} and axis "
            "columns named by their dotted path (e.g. calibration.r_min)"
        )
    records = cast("list[dict[str, str]]", frame.to_dict("records"))  # read as str, columns named
    rows = [_validate_row(path, i + 2, rec) for i, rec in enumerate(records)]
    if not rows:
        raise ReportInputError(f"{path}: no data rows")
    out = normalise(pd.DataFrame(rows))
    key = ["domain", "cell", "benchmark", "seed", *axis_columns(out)]
    done = out[out["status"] == State.DONE]
    dup = done.astype({c: str for c in key[4:]}).duplicated(key)
    if dup.any():
        line = int(done.index[dup.to_numpy().nonzero()[0][0]]) + 2
        raise ReportInputError(
            f"{path}: row {line}: duplicate ({', '.join(key)}); each may appear once"
        )
    return out


def _validate_row(path: Path, line: int, rec: dict[str, str]) -> dict[str, object]:
    def bad(column: str, why: str) -> ReportInputError:
        return ReportInputError(f"{path}: row {line}, column {column}: {why}")

    row: dict[str, object] = {}
    for column in ("domain", "cell"):
        value = rec[column].strip()
        if not value:
            raise bad(
                column, "empty; a domain name / cell id (e.g. kl/atomic, gspo, base) is required"
            )
        row[column] = value
    seed = rec["seed"].strip()
    try:
        row["seed"] = int(seed)
    except ValueError:
        raise bad("seed", f"{seed!r} is not an integer") from None
    status = rec.get("status", "").strip()
    status = STATUS_ALIASES.get(status, status)
    if status and status not in STATUSES:
        allowed = ", ".join([*STATUSES, *STATUS_ALIASES])
        raise bad("status", f"{status!r}; allowed: {allowed}")
    done = State.DONE.value
    raw = rec["score"].strip()
    if raw:
        try:
            score = float(raw)
        except ValueError:
            raise bad("score", f"{raw!r} is not a number; allowed: a fraction in [0, 1]") from None
        if not 0.0 <= score <= 1.0:
            raise bad("score", f"{raw} is outside [0, 1] (scores are fractions, not percent)")
        if status and status != done:
            raise bad("status", f"{status!r} row has a score; only done rows may")
        row["score"], row["status"] = score, done
    else:
        row["score"], row["status"] = math.nan, status or State.PENDING.value
        if row["status"] == done:
            raise bad("score", "empty for a done row; allowed: a fraction in [0, 1]")
    benchmark = rec["benchmark"].strip()
    if not benchmark and row["status"] == done:
        raise bad("benchmark", "empty; a benchmark name is required for a score")
    row["benchmark"] = benchmark
    for column in NUMERIC[1:]:
        value = rec.get(column, "").strip()
        try:
            row[column] = float(value) if value else math.nan
        except ValueError:
            raise bad(column, f"{value!r} is not a number") from None
    row["run_id"] = rec.get("run_id", "").strip()
    for column, value in rec.items():
        if is_axis_column(column):
            row[column] = axis_value(value)
    if SELECTION in rec:
        value = rec[SELECTION].strip()
        try:
            row[SELECTION] = float(value) if value else math.nan
        except ValueError:
            raise bad(SELECTION, f"{value!r} is not a number") from None
    return row
