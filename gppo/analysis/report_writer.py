"""Write a report: Table 1 in every format, Figures 1-2, attached to the sweep's parent run.

``write_report(ref, plan=plan)`` reads the sweep through its :class:`~gppo.store.state.SweepRef`
(``LaunchResult.ref`` after a launch, :func:`~gppo.store.records.find_sweep` later); ``after_sweep``
is what ``gppo-sweep launch`` calls when a sweep completes; ``write_report_from_csv`` re-renders
published numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from gppo.analysis.axis_report_writer import AxesReport, write_axes_report
from gppo.analysis.data.collect import Collected, collect
from gppo.analysis.data.tidy import axis_columns, read_scores_csv
from gppo.analysis.tables.axis_tables import PointTable, at_point
from gppo.analysis.tables.render import EXTENSIONS, FORMATS, render
from gppo.analysis.tables.table1 import build_table1
from gppo.analysis.tables.table1_model import Table1
from gppo.cell import Cell
from gppo.objectives.defaults import R_MIN, REFERENCE
from gppo.stats import inference as S
from gppo.store.state import State, SweepRef

if TYPE_CHECKING:
    from gppo.grid import Plan

TABLE_STEM = "table1"
#: where ``launch`` writes a finished sweep's report, relative to the working directory
#: the one default folder of reports: ``reports/<sweep id>/`` (``reports/from-csv/`` for CSVs),
#: the same whether the launcher writes it after a sweep or ``gppo-sweep report`` does
REPORTS_DIR = Path("reports")


def default_out_dir(sweep_id: str | None) -> Path:
    """``reports/<sweep id>/``, or ``reports/from-csv/`` when there is no sweep."""
    return REPORTS_DIR / (sweep_id or "from-csv")


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
    #: a sweep with axes: every point's Table 1 and the rest (``table`` is the home point's:
    #: the spec's own values, else the first point)
    axes: AxesReport | None = None


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
    return [tuple(c.split("/", 1)) for c in labels]


def write_figures(
    tidy: pd.DataFrame,
    out_dir: Path,
    *,
    curves: pd.DataFrame | None = None,
    deltas: dict[str, float] | None = None,
    r_min: float = R_MIN,
    reference: str = REFERENCE,
) -> tuple[list[Path], list[str]]:
    """Figure 1 for the grid cells present; Figure 2 (dynamics, clip per μ) when curves exist;
    the aggregate view (gppo/analysis/tables/aggregate.py: Mean/IQM intervals, P(cell > reference)).

    A Figure 1 that cannot be drawn (e.g. an unknown divergence in published numbers) is skipped
    and reported in the returned warnings; Figure 2 and the aggregate view are drawn from the
    report's own tidy data, and an error there is raised.
    """
    from gppo.analysis.figures import paper_figures as F

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
    from gppo.analysis.tables.aggregate import write_aggregate

    paths += write_aggregate(tidy, out_dir, reference)
    return paths, warnings


def _deltas(cells: Sequence[Cell] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for cell in cells or ():
        if cell.divergence and cell.delta is not None:
            out.setdefault(cell.divergence, float(cell.delta))
    return out


def parse_analysis(text: str | None) -> tuple[str | None, str | None]:
    """``report --analysis``: a comma list of a test (:data:`gppo.stats.inference.TESTS`) and/or
    a correction (:data:`gppo.stats.inference.CORRECTIONS`), e.g. ``pooled,holm`` -> ``("pooled",
    "holm")``; what it leaves out is None (the spec's ``analysis:``, else the defaults). Raises
    ``ValueError`` in one line naming what is allowed."""
    test = correction = None
    for word in (w.strip().lower() for w in (text or "").split(",") if w.strip()):
        if word in S.TESTS and test is None:
            test = word
        elif word in S.CORRECTIONS and correction is None:
            correction = word
        else:
            raise ValueError(
                f"--analysis {text}: {word!r} is not a test ({', '.join(S.TESTS)}) or a "
                f"correction ({', '.join(S.CORRECTIONS)}), or is given twice"
            )
    return test, correction


def write_report(
    ref: SweepRef,
    out_dir: str | Path | None = None,
    *,
    plan: Plan | None = None,
    reference: str | None = None,
    formats: str | Sequence[str] = "all",
    figures: bool | None = None,
    attach: bool = True,
    ended: bool | None = None,
    test: str | None = None,
    correction: str | None = None,
) -> Report:
    """Collect a sweep from MLflow, write Table 1 (+ figures) into ``out_dir`` and attach them.

    Args:
        ref: the sweep (``LaunchResult.ref``, or :func:`gppo.store.records.find_sweep`).
        out_dir: where the files go (default ``reports/<sweep id>/``).
        plan: the sweep's :class:`gppo.grid.Plan`: its cells (those without a run are reported
            ``missing``), reference, avg@k, benchmark order and the spec shown on the page.
            Without it every run found is reported, k is the largest logged.
        reference: the reference cell of the relative change (default: the plan's, else tv/mc).
        ended: the launch has ended with every cell done, left by the budget or not needed
            (:func:`after_sweep`): with adaptive seeds and a budget, a row whose next seeds
            have no run was left by the budget (else it is open: its round under way).
            Default: what the store says (``ref.ended``, from the sweep's parent run), so
            ``gppo-sweep report`` after the launch writes the launch's own Stopped column.
        test, correction: Table 1's test (``welch`` | ``pooled``) and correction (``bh`` |
            ``holm``); default: the plan's ``analysis:`` (else welch, bh).
        figures: draw the figures; default: the plan's ``analysis.figures`` (else True).

    Adaptive seeds (``seeds: {min, max}``): each row of Table 1 says why it stopped, Δ shows
    the design's interval (:mod:`gppo.analysis.tables.adaptive_stops`), the page the runs used.

    With format ``html`` also the self-contained page ``report.html`` (gppo/analysis/page/report_page.py).
    Artifacts go to the sweep's parent run under ``report/`` when ``attach`` and it exists.
    """
    out = Path(out_dir) if out_dir is not None else default_out_dir(ref.sweep_id)
    fmts = parse_formats(formats)
    expected = list(plan.cells) if plan is not None else None
    reference = reference or (plan.spec.reference if plan is not None else REFERENCE)
    k = plan.spec.eval.k if plan is not None else None
    got: Collected = collect(ref, expected=expected, k=k, reference=reference)
    chosen = plan.spec.analysis if plan is not None else None
    test = test or (chosen.test if chosen else S.DEFAULT_TEST)
    correction = correction or (chosen.correction if chosen else "bh")
    figures = (chosen.figures if chosen else True) if figures is None else figures
    adaptive = _adaptive(plan, got, reference, ref.ended if ended is None else ended)
    mark = adaptive.mark if adaptive else None
    if adaptive:  # the cells the rounds did not need are not missing
        got.tidy = adaptive.tidy
    benchmarks = _benchmark_order(plan)
    order = {d: benchmarks for d in got.tidy["domain"].unique()} if benchmarks else None
    axes, tidy, at_home = None, got.tidy, expected
    if axis_columns(
        got.tidy
    ):  # a sweep with axes: Table 1 per point (gppo/analysis/tables/axis_tables.py)
        axes = _axes_report(
            got.tidy, out, fmts, plan, figures, reference, order, got.k, mark=mark,
            test=test, correction=correction,
        )  # fmt: skip
        table, files = axes.table, list(axes.files)
        home = axes.tables[axes.home].point
        tidy = at_point(got.tidy, home)  # the figures' runs and cells: the home point's
        at_home = [c for c in expected or () if all(c.axes.get(a, v) == v for a, v in home.items())]
    else:
        price = plan.spec.price if plan is not None else None  # the cost column in money
        table = build_table1(
            got.tidy, reference=reference, benchmarks=order, k=got.k, price=price, test=test,
            correction=correction,
        )  # fmt: skip
        if mark is not None:
            mark([PointTable({}, table)])
        files = write_tables(table, out, fmts)
    warnings: list[str] = []
    if figures:
        paths, warnings = _figure_files(got, tidy, out, _deltas(at_home), reference)
        files += paths
    report = Report(table, got.tidy, files, got.parent_run_id, warnings=warnings, out_dir=out)
    report.axes = axes
    if "html" in fmts:
        report.page = _write_page(ref, plan, got, report, expected, adaptive, out)
        files.append(report.page)
    if attach and got.parent_run_id and got.client is not None:
        for path in files:
            got.client.log_artifact(got.parent_run_id, str(path), artifact_path="report")
        report.attached = True
    return report


def _figure_files(
    got: Collected, tidy: pd.DataFrame, out: Path, deltas: dict[str, float], reference: str
) -> tuple[list[Path], list[str]]:
    """Figure 2 (and its curves, from the live runs of ``tidy``'s cells): the files written and
    the warnings of what could not be drawn."""
    from gppo.analysis.figures.paper_figures import collect_curves

    live = (
        got.runs[
            got.runs["status"].isin([State.DONE, State.RUNNING])
            & got.runs["run_id"].isin(tidy["run_id"])
        ]
        if len(got.runs)
        else None
    )
    curves = collect_curves(got.client, live) if live is not None and len(live) else None
    return write_figures(tidy, out, curves=curves, deltas=deltas, reference=reference)


def _write_page(
    ref: SweepRef,
    plan: Plan | None,
    got: Collected,
    report: Report,
    expected: list[Cell] | None,
    adaptive: _Adaptive | None,
    out: Path,
) -> Path:
    """The self-contained page ``report.html`` of the report's table, figures and runs."""
    from gppo.analysis.page.report_page import PageInput, spec_as_run, write_page

    axes = report.axes
    page = PageInput(
        ref.sweep_id, report.table, figures=list(report.files), runs=got.runs, tidy=got.tidy,
        cells=expected or (), spec=spec_as_run(plan.spec) if plan is not None else None,
        tracking_uri=ref.tracking_uri, experiment_id=ref.experiment_id,
        parent_run_id=got.parent_run_id, k=got.k, warnings=report.warnings,
        sections=axes.sections if axes else (), adaptive=adaptive.line if adaptive else None,
        extra=_overrides_line(plan),
    )  # fmt: skip
    return write_page(page, out)


@dataclass
class _Adaptive:
    """A report's adaptive seeds: what gives every Table 1 its rows' stops, the page's runs
    line, and the tidy frame without the pending rows of the cells the rounds did not need."""

    mark: Callable[[list[PointTable]], None]
    line: str
    tidy: pd.DataFrame


def _adaptive(plan: Plan | None, got: Collected, reference: str, ended: bool) -> _Adaptive | None:
    """Adaptive seeds (the rounds replayed on the runs' scores,
    :mod:`gppo.analysis.tables.adaptive_stops`); None for a fixed seeds count or list, or a reference other than the
    spec's (the rounds compared the rows with the spec's)."""
    if plan is None or plan.spec.adaptive is None or reference != plan.spec.reference:
        return None
    from gppo.analysis.tables.adaptive_stops import (
        cell_scores,
        failed_cells,
        label_stops,
        mark_table,
        runs_line,
        stops_at,
        without_unneeded,
    )
    from gppo.stats.rounds import Rounds

    rounds = Rounds.of_plan(plan)
    scores = cell_scores(got.runs)
    # after the launch: a cell the rounds wanted without a score was left by the budget
    left = (
        {c.id for c in plan.cells if c.id not in scores}
        if ended and plan.spec.budget is not None
        else set()
    )
    failed = failed_cells(got.runs, scores, plan.spec.retries.max)
    found = label_stops(rounds, scores, left, failed)

    def mark(tables: list[PointTable]) -> None:
        for pt in tables:
            mark_table(pt.table, stops_at(found, pt.point), rounds.design)

    tidy = without_unneeded(got.tidy, plan.cells, rounds.wanted(scores, failed) | set(scores))
    return _Adaptive(mark, runs_line(rounds, got.runs), tidy)


def _benchmark_order(plan: Plan | None) -> list[str]:
    """The spec's benchmark order (its ``benchmarks``, else the first cell's), or none."""
    if plan is None:
        return []
    return list(plan.spec.benchmarks) or (list(plan.cells[0].benchmarks) if plan.cells else [])


def write_report_from_csv(
    paths: Sequence[str | Path],
    out_dir: str | Path | None = None,
    *,
    reference: str = REFERENCE,
    formats: str | Sequence[str] = "all",
    figures: bool = True,
    select: Sequence[str] = (),
    test: str = S.DEFAULT_TEST,
    correction: str = "bh",
) -> Report:
    """Re-render tidy CSV file(s) (see gppo/analysis/data/tidy.py); raises ReportInputError on bad input.
    CSVs with axis columns give the report of a sweep with axes; ``select``: its selection axes;
    ``test``, ``correction``: Table 1's (:func:`gppo.analysis.tables.table1.build_table1`)."""
    out = Path(out_dir) if out_dir is not None else default_out_dir(None)
    fmts = parse_formats(formats)
    tidy = pd.concat([read_scores_csv(p) for p in paths], ignore_index=True)
    axes, shown = None, tidy
    if axis_columns(tidy):
        axes = _axes_report(
            tidy, out, fmts, None, figures, reference, None, None, select,
            test=test, correction=correction,
        )  # fmt: skip
        table, files = axes.table, list(axes.files)
        shown = at_point(tidy, axes.tables[axes.home].point)
    else:
        table = build_table1(tidy, reference=reference, test=test, correction=correction)
        files = write_tables(table, out, fmts)
    warnings: list[str] = []
    if figures:
        paths_, warnings = write_figures(shown, out, reference=reference)
        files += paths_
    report = Report(table, tidy, files, warnings=warnings, out_dir=out, axes=axes)
    if "html" in fmts:
        from gppo.analysis.page.report_page import PageInput, write_page

        report.page = write_page(
            PageInput(
                "from CSV", table, figures=files, tidy=tidy, warnings=warnings,
                sections=axes.sections if axes else (),
            ),
            out,
        )  # fmt: skip
        files.append(report.page)
    return report


def _axes_report(
    tidy: pd.DataFrame,
    out: Path,
    fmts: list[str],
    plan: Plan | None,
    figures: bool,
    reference: str,
    order: dict[str, list[str]] | None,
    k: int | None,
    select: Sequence[str] = (),
    *,
    mark: Callable[[list[PointTable]], None] | None = None,
    test: str = S.DEFAULT_TEST,
    correction: str = "bh",
) -> AxesReport:
    """The report parts of a sweep with axes; the home point: the spec's own values."""
    home, select = None, list(select)
    missing = [a for a in select if a not in axis_columns(tidy)]
    if missing:
        raise ValueError(
            f"--select {missing[0]}: not an axis column; allowed: {', '.join(axis_columns(tidy))}"
        )
    if plan is not None and plan.spec.axes:
        from gppo.grid.axes import plain_values

        home, select = plain_values(plan.spec), list(plan.spec.select)
    return write_axes_report(
        tidy, out, fmts, select=select, home=home, figures=figures,
        reference=reference, benchmarks=order, k=k,
        price=plan.spec.price if plan is not None else None, mark=mark,
        test=test, correction=correction,
    )  # fmt: skip


def after_sweep(plan: Plan, ref: SweepRef) -> Report:
    """What ``launch`` does once every cell has finished: Table 1 and the figures in
    ``reports/<sweep id>/``, attached to the sweep's parent MLflow run (the launcher calls it
    inside ``try/except``, so a report that cannot be built never fails a finished sweep)."""
    return write_report(ref, plan=plan, ended=True)


def _overrides_line(plan: Plan | None) -> dict[str, str]:
    """The page's "overrides" line: the command line's ``KEY=VALUE`` edits of the spec file
    (the spec shown is the edited one), none without them."""
    import shlex

    overrides = plan.overrides if plan is not None else ()
    return {"spec overrides": shlex.join(overrides)} if overrides else {}
