"""Write a report: Table 1 in every format, Figures 1-2, attached to the sweep's parent run.

``write_report`` is what ``gppo-sweep launch`` calls when a sweep completes;
``write_report_from_csv`` re-renders published numbers; ``resolve_spec`` is the one adapter from
a grid spec file to (sweep id, tracking URI, expected cells).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gppo.analysis.collect import Collected, collect
from gppo.analysis.render import EXTENSIONS, FORMATS, render
from gppo.analysis.table import Table1, build_table1
from gppo.analysis.tidy import read_scores_csv
from gppo.cell import Cell

TABLE_STEM = "table1"
#: where ``launch`` writes a finished sweep's report, relative to the working directory
#: the one default folder of reports: ``reports/<sweep id>/`` (``reports/from-csv/`` for CSVs),
#: the same whether the launcher writes it after a sweep or ``gppo-sweep report`` does
REPORTS_DIR = Path("reports")


def default_out_dir(sweep_id: str | None) -> Path:
    """``reports/<sweep id>/``, or ``reports/from-csv/`` when there is no sweep."""
    return REPORTS_DIR / (sweep_id or "from-csv")


@dataclass
class SweepTarget:
    """What a report needs from a spec: where the runs are and which cells were expected."""

    sweep_id: str
    tracking_uri: str | None
    cells: list[Cell]
    reference: str = "tv/mc"
    k: int | None = None
    benchmarks: list[str] = field(default_factory=list)
    spec: dict[str, Any] | None = None  # the spec as run (defaults filled in), for the page


@dataclass
class Report:
    """What a report wrote: Table 1, the tidy scores it came from, the files (tables, figures,
    ``report.html``) in ``out_dir``, and whether they were attached to the sweep's parent run."""

    table: Table1
    tidy: pd.DataFrame
    files: list[Path]
    parent_run_id: str | None = None
    attached: bool = False
    warnings: list[str] = field(default_factory=list)
    page: Path | None = None  # report.html (format html): the self-contained report page
    out_dir: Path | None = None  # where the files are


def resolve_spec(path: str | Path) -> SweepTarget:
    """Adapter to gppo.grid: spec file -> sweep id, tracking URI, expanded cells, reference, k.

    Raises gppo.grid.SpecError (one line) on a bad spec.
    """
    from gppo.grid import load_plan

    return target_of(load_plan(path))


def target_of(plan: Any, tracking_uri: str | None = None) -> SweepTarget:
    """What a report needs from a loaded :class:`gppo.grid.Plan`."""
    from gppo.analysis.page import spec_as_run
    from gppo.store.uri import resolve_tracking_uri

    spec = plan.spec
    return SweepTarget(
        sweep_id=plan.sweep_id,
        tracking_uri=tracking_uri or resolve_tracking_uri(spec.tracking.uri),
        cells=list(plan.cells),
        reference=spec.reference,
        k=spec.eval.k,
        benchmarks=list(spec.benchmarks) or (list(plan.cells[0].benchmarks) if plan.cells else []),
        spec=spec_as_run(spec),
    )


def parse_formats(fmt: str | Sequence[str]) -> list[str]:
    """``"all"``, one format, a comma list or a sequence -> known formats (ValueError otherwise)."""
    items = [fmt] if isinstance(fmt, str) else list(fmt)
    out: list[str] = []
    for item in (p.strip() for i in items for p in i.split(",")):
        names = FORMATS if item == "all" else (item,)
        for name in names:
            if name not in FORMATS:
                raise ValueError(f"unknown format {item!r}; allowed: {', '.join(FORMATS)}, all")
            if name not in out:
                out.append(name)
    return out


def write_tables(table: Table1, out_dir: Path, formats: Sequence[str]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out_dir / f"{TABLE_STEM}.{EXTENSIONS[fmt]}"
        path.write_text(render(table, fmt), encoding="utf-8")
        paths.append(path)
    return paths


def _grid_cells(tidy: pd.DataFrame) -> list[tuple[str, str]]:
    labels = [c for c in dict.fromkeys(tidy["cell"]) if "/" in c]
    return [tuple(c.split("/", 1)) for c in labels]  # type: ignore[misc]


def write_figures(
    tidy: pd.DataFrame,
    out_dir: Path,
    *,
    curves: pd.DataFrame | None = None,
    deltas: dict[str, float] | None = None,
    r_min: float = 0.8,
    reference: str = "tv/mc",
) -> tuple[list[Path], list[str]]:
    """Figure 1 for the grid cells present; Figure 2 (dynamics, clip per μ) when curves exist;
    the aggregate view (gppo/analysis/aggregate.py: Mean/IQM intervals, P(cell > reference)).

    A figure that cannot be drawn is reported in the returned warnings, never fatal.
    """
    from gppo.analysis import figures as F

    paths: list[Path] = []
    warnings: list[str] = []
    cells = _grid_cells(tidy)
    if cells:
        try:
            fig = F.figure1_regions(cells, r_min=r_min, deltas=deltas)
            paths += F.save(fig, out_dir / "figure1_regions")
        except Exception as exc:  # e.g. an unknown divergence in published numbers
            warnings.append(f"figure 1 skipped: {type(exc).__name__}: {exc}")
    if curves is not None and len(curves):
        fig2 = F.figure2_dynamics(curves, reference=reference)
        paths += F.save(fig2, out_dir / "figure2_dynamics")
        paths += F.save(F.figure2_clip_by_mu(curves), out_dir / "figure2_clip_by_mu")
    from gppo.analysis.aggregate import write_aggregate

    paths += write_aggregate(tidy, out_dir, reference)
    return paths, warnings


def _deltas(cells: Sequence[Cell] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for cell in cells or ():
        if cell.divergence and cell.delta is not None:
            out.setdefault(cell.divergence, float(cell.delta))
    return out


def write_report(
    sweep_id: str,
    tracking_uri: str | None = None,
    out_dir: str | Path | None = None,
    *,
    expected: Sequence[Cell] | None = None,
    reference: str = "tv/mc",
    k: int | None = None,
    benchmarks: Sequence[str] | None = None,
    formats: str | Sequence[str] = "all",
    figures: bool = True,
    attach: bool = True,
    spec: dict[str, Any] | None = None,
) -> Report:
    """Collect a sweep from MLflow, write Table 1 (+ figures) into ``out_dir`` and attach them.

    With format ``html`` also the self-contained page ``report.html`` (gppo/analysis/page.py;
    ``spec``: the spec as run, shown on it). Artifacts go to the sweep's parent run under
    ``report/`` when ``attach`` and a parent exists.
    """
    out = Path(out_dir) if out_dir is not None else default_out_dir(sweep_id)
    fmts = parse_formats(formats)
    got: Collected = collect(sweep_id, tracking_uri, expected=expected, k=k, reference=reference)
    order = {d: list(benchmarks) for d in got.tidy["domain"].unique()} if benchmarks else None
    table = build_table1(got.tidy, reference=reference, benchmarks=order, k=got.k)
    files = write_tables(table, out, fmts)
    warnings: list[str] = []
    if figures:
        from gppo.analysis.figures import collect_curves

        live = got.runs[got.runs["status"].isin(["finished", "running"])] if len(got.runs) else None
        curves = collect_curves(got.client, live) if live is not None and len(live) else None
        paths, warnings = write_figures(
            got.tidy, out, curves=curves, deltas=_deltas(expected), reference=reference
        )
        files += paths
    report = Report(table, got.tidy, files, got.parent_run_id, warnings=warnings, out_dir=out)
    if "html" in fmts:
        from gppo.analysis.page import PageInput, write_page

        exp_id = None
        if got.parent_run_id and got.client is not None:
            exp_id = got.client.get_run(got.parent_run_id).info.experiment_id
        page = PageInput(
            sweep_id, table, figures=files, runs=got.runs, tidy=got.tidy, cells=expected or (),
            spec=spec, tracking_uri=tracking_uri, experiment_id=exp_id,
            parent_run_id=got.parent_run_id, k=got.k, warnings=warnings,
        )  # fmt: skip
        report.page = write_page(page, out)
        files.append(report.page)
    if attach and got.parent_run_id and got.client is not None:
        for path in files:
            got.client.log_artifact(got.parent_run_id, str(path), artifact_path="report")
        report.attached = True
    return report


def write_report_for_spec(
    spec: str | Path | SweepTarget,
    out_dir: str | Path | None = None,
    *,
    formats: str | Sequence[str] = "all",
    figures: bool = True,
    attach: bool = True,
) -> Report:
    """:func:`write_report` for a spec file or a resolved :class:`SweepTarget`."""
    target = spec if isinstance(spec, SweepTarget) else resolve_spec(spec)
    return write_report(
        target.sweep_id,
        target.tracking_uri,
        out_dir,
        expected=target.cells,
        reference=target.reference,
        k=target.k,
        benchmarks=target.benchmarks or None,
        formats=formats,
        figures=figures,
        attach=attach,
        spec=target.spec,
    )


def write_report_from_csv(
    paths: Sequence[str | Path],
    out_dir: str | Path | None = None,
    *,
    reference: str = "tv/mc",
    formats: str | Sequence[str] = "all",
    figures: bool = True,
) -> Report:
    """Re-render tidy CSV file(s) (see gppo/analysis/tidy.py); raises ReportInputError on bad input."""
    out = Path(out_dir) if out_dir is not None else default_out_dir(None)
    fmts = parse_formats(formats)
    tidy = pd.concat([read_scores_csv(p) for p in paths], ignore_index=True)
    table = build_table1(tidy, reference=reference)
    files = write_tables(table, out, fmts)
    warnings: list[str] = []
    if figures:
        paths_, warnings = write_figures(tidy, out, reference=reference)
        files += paths_
    report = Report(table, tidy, files, warnings=warnings, out_dir=out)
    if "html" in fmts:
        from gppo.analysis.page import PageInput, write_page

        report.page = write_page(
            PageInput("from CSV", table, figures=files, tidy=tidy, warnings=warnings), out
        )
        files.append(report.page)
    return report


def after_sweep(plan: Any, *, tracking_uri: str, experiment_id: str) -> Report:
    """What ``launch`` does once every cell has finished: Table 1 and the figures in
    ``reports/<sweep id>/``, attached to the sweep's parent MLflow run (the launcher calls it
    inside ``try/except``, so a report that cannot be built never fails a finished sweep)."""
    return write_report_for_spec(target_of(plan, tracking_uri), default_out_dir(plan.sweep_id))
