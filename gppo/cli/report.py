"""``gppo-sweep report`` and ``gppo-sweep regions``: typer-annotated plain functions.

:mod:`gppo.cli.app` registers them; both can also be called directly (every parameter has a plain
Python default). Input errors print one line on stderr and exit with code 2 (:mod:`.exit_codes`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from gppo.cli.args import OVERRIDES_HELP
from gppo.cli.exit_codes import EXIT_USAGE, fail
from gppo.objectives.defaults import R_MIN, REFERENCE

if TYPE_CHECKING:
    from gppo.analysis.report_writer import Report
    from gppo.grid import Plan
    from gppo.store.state import SweepRef


def report(
    spec: Annotated[
        Path | None, typer.Argument(help="Grid spec YAML of the sweep (omit with --from-csv).")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(metavar="[KEY=VALUE]...", help=OVERRIDES_HELP, show_default=False),
    ] = None,
    from_csv: Annotated[
        list[Path] | None,
        typer.Option("--from-csv", help="Tidy CSV(s) domain,cell,benchmark,seed,score instead."),
    ] = None,
    format: Annotated[
        str, typer.Option("--format", "-f", help="md | latex | html | csv | all (comma list ok).")
    ] = "all",
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Output directory [default: reports/<sweep id>/]."),
    ] = None,
    reference: Annotated[
        str | None, typer.Option(help="Reference cell of the relative change (default: spec's).")
    ] = None,
    sweep_id: Annotated[
        str | None, typer.Option("--sweep-id", help="Override the spec's sweep id.")
    ] = None,
    tracking_uri: Annotated[
        str | None, typer.Option("--tracking-uri", help="Override the spec's MLflow URI.")
    ] = None,
    figures: Annotated[
        bool | None,
        typer.Option(
            "--figures/--no-figures",
            help="Draw Figures 1-2 and the aggregate view (default: the spec's analysis.figures, "
            "else yes).",
        ),
    ] = None,
    attach: Annotated[
        bool, typer.Option("--attach/--no-attach", help="Log files to the sweep's parent run.")
    ] = True,
    select: Annotated[
        list[str] | None,
        typer.Option(
            "--select",
            help="With --from-csv: an axis column on which each cell takes its best value by "
            "the CSV's held-out 'selection' column (a spec says it with select:). Repeatable.",
        ),
    ] = None,
    analysis: Annotated[
        str | None,
        typer.Option(
            "--analysis",
            help="Table 1's test and/or correction, comma list: welch | pooled, bh | holm "
            "(e.g. 'pooled,holm'; default: the spec's analysis:, else welch, bh).",
        ),
    ] = None,
) -> None:
    """Write Table 1 (md/LaTeX/HTML/CSV) and Figures 1-2 into OUT and print the table."""
    from gppo.analysis import report_writer as R
    from gppo.grid import load_plan
    from gppo.stats import inference as S

    spec, overrides, csvs = _sources(spec, overrides, from_csv)
    try:
        R.parse_formats(format)
        test, correction = R.parse_analysis(analysis)
        if csvs:
            result = R.write_report_from_csv(
                csvs, out, reference=reference or REFERENCE, formats=format,
                figures=figures is not False,
                select=select or (), test=test or S.DEFAULT_TEST, correction=correction or "bh",
            )  # fmt: skip
        else:
            if spec is None and sweep_id is None:
                raise fail("give a SPEC, --sweep-id ID or --from-csv FILE")
            plan = load_plan(spec, overrides) if spec is not None else None
            result = R.write_report(
                _sweep_ref(plan, sweep_id, tracking_uri),
                out,
                plan=plan,
                reference=reference,
                formats=format,
                figures=figures,
                attach=attach,
                test=test,
                correction=correction,
            )
    except ValueError as exc:  # bad input: a spec, a CSV, a format (SpecError, ReportError, ...)
        raise fail(exc, EXIT_USAGE) from None
    _print_report(result)


def _sources(
    spec: Path | None, overrides: list[str] | None, from_csv: list[Path] | None
) -> tuple[Path | None, list[str], list[Path]]:
    """The spec, its overrides and the CSVs from the command line: a token with ``=`` is an
    override, never the spec; ``--from-csv a.csv b.csv`` (typer hands b.csv over as SPEC) reads
    both CSVs. Raises one line for a mix it cannot read."""
    csvs = list(from_csv or [])
    tokens = [str(spec), *(overrides or ())] if spec is not None else list(overrides or ())
    found, edits = [t for t in tokens if "=" not in t], [t for t in tokens if "=" in t]
    spec = Path(found[0]) if found else None
    if len(found) > 1 and not csvs:
        raise fail(f"unexpected argument {found[1]!r}: an override is KEY=VALUE")
    if csvs and edits:
        raise fail(f"override {edits[0]!r}: --from-csv reads no spec to edit")
    if csvs and spec is not None:
        for path in map(Path, found):
            if path.suffix.lower() != ".csv":
                raise fail(f"{path}: give either a SPEC or --from-csv FILE…, not both")
            csvs.append(path)
        spec = None
    return spec, edits, csvs


def _print_report(result: Report) -> None:
    """Table 1 on the terminal, then what was written and where."""
    from gppo.analysis.tables.render import to_rich

    console = Console()
    if result.axes is not None:  # a sweep with axes: which table this is
        console.print(f"Table 1 at {result.axes.tables[result.axes.home].label}", markup=False)
    for item in to_rich(result.table):
        console.print(item)
    for warning in result.warnings:
        console.print(f"warning: {warning}", style="yellow", markup=False)
    console.print(f"wrote {len(result.files)} file(s) to {result.out_dir}", markup=False)
    if result.page is not None:
        console.print(f"report page (self-contained HTML): {result.page}", markup=False)
    if result.attached:
        console.print(f"attached to MLflow run {result.parent_run_id} (report/)", markup=False)


def _sweep_ref(plan: Plan | None, sweep_id: str | None, tracking_uri: str | None) -> SweepRef:
    """The sweep to report: the plan's (its store, experiment and sweep id), with the overrides
    (raises :class:`gppo.errors.SweepNotFound`, a ValueError, when the store has none)."""
    from gppo.store.records import find_sweep

    if plan is None:
        return find_sweep(sweep_id or "", tracking_uri)
    return find_sweep(
        sweep_id or plan.sweep_id,
        tracking_uri or plan.spec.tracking.uri,
        experiment=plan.spec.experiment,
    )


def regions(
    divergence: Annotated[
        list[str] | None, typer.Option("--divergence", "-d", help="Repeatable; default: all four.")
    ] = None,
    estimator: Annotated[
        list[str] | None, typer.Option("--estimator", "-e", help="Repeatable; default: all three.")
    ] = None,
    r_min: Annotated[
        float, typer.Option("--r-min", help="Calibration: δ = |f(r_min)|.", min=1e-9, max=0.999999)
    ] = R_MIN,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Figure file (.png/.svg/.pdf; no suffix: both).")
    ] = Path("figure1_regions.png"),
) -> None:
    """Draw Figure 1 (proximal regions vs μ) and print the bounds at a few μ values."""
    from rich.table import Table

    from gppo.analysis.figures import paper_figures as F
    from gppo.analysis.vocabulary import DIV_ORDER, EST_ORDER  # the paper's grid, Table 1's order

    divs = list(divergence or DIV_ORDER)
    ests = list(estimator or EST_ORDER)
    cells = [(d, e) for d in divs for e in ests]
    try:
        bounds = F.region_table(cells, r_min=r_min)
        fig = F.figure1_regions(cells, r_min=r_min)
    except (KeyError, ValueError) as exc:
        raise fail(str(exc.args[0]) if exc.args else str(exc)) from None
    if out.suffix:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, bbox_inches="tight", dpi=150)
        import matplotlib.pyplot as plt

        plt.close(fig)
        written = [out]
    else:
        written = F.save(fig, out)
    table = Table(title=f"proximal regions at r_min = {r_min}")
    for col in ("divergence", "estimator", "δ", "μ", "r_lo", "r_hi"):
        table.add_column(col, justify="left" if col in ("divergence", "estimator") else "right")
    for row in bounds.itertuples(index=False):
        table.add_row(
            str(row.divergence),
            str(row.estimator),
            f"{row.delta:.5g}",
            f"{row.mu:g}",
            f"{row.r_lo:.4g}",
            f"{row.r_hi:.4g}",
        )
    console = Console()
    console.print(table)
    console.print("wrote " + ", ".join(map(str, written)), markup=False)
