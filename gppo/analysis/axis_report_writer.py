"""Write the report parts of a sweep with axes (gppo/analysis/tables/axis_tables.py computes them).

Files, in the report folder:
- ``table1.<md|tex|html|csv>``: Table 1 at every axis point, one after the other (the CSV: one
  file, one column per axis after ``domain, cell``; a row the axis does not move carries the
  point's value and the note ``same runs at every point``);
- ``rank_stability.md`` / ``.csv``: each cell's rank per point and the separated order changes;
- ``table1_best.md`` / ``.csv`` (a spec with ``select:``): each cell at its best value of the
  selection axes (the value chosen per row, its mean held-out selection score, the benchmarks'
  numbers of those runs);
- ``axis_response.png`` / ``.svg``: the axis-response figure (gppo/analysis/figures/axis_figure.py);
- ``scores.csv``: the tidy scores with their axis columns (``report --from-csv`` re-renders it).
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gppo.analysis.page.report_page import html_body, table_fragment
from gppo.analysis.tables.axis_tables import (
    BestPoint,
    PointTable,
    RankSummary,
    best_point,
    home_index,
    point_tables,
    rank_lines,
    rank_markdown,
    rank_rows,
    rank_summary,
)
from gppo.analysis.tables.render import EXTENSIONS, notes, render, to_csv, to_html
from gppo.analysis.tables.table1_model import Table1

STILL_NOTE = "same runs at every point"


@dataclass
class AxesReport:
    tables: list[PointTable]
    home: int  # the index of the table the terminal shows
    files: list[Path]
    sections: list[tuple[str, str, str]] = field(default_factory=list)  # (id, title, html)
    best: BestPoint | None = None

    @property
    def table(self) -> Table1:
        return self.tables[self.home].table


def _still(pt: PointTable) -> str:
    return f"{', '.join(pt.still)}: {STILL_NOTE} of {', '.join(pt.point)}" if pt.still else ""


def _combined(tables: list[PointTable], fmt: str) -> str:
    if fmt == "csv":
        return csv_with_axes(tables)
    if fmt == "html":  # the general notes once, after every point's table
        style, _ = table_fragment(tables[0].table)
        body = html_tables(tables) + _html_list(notes(tables[0].table, "html", own=False))
        return (
            f"<!doctype html><html><head><style>{style}</style></head><body>{body}</body></html>\n"
        )
    parts = []
    for pt in tables:
        text, still = render(pt.table, fmt), _still(pt)
        if fmt == "md":
            parts.append(f"### {pt.label}\n\n{text}" + (f"\n{still}\n" if still else ""))
        else:  # latex
            parts.append(f"% {pt.label}\n{text}" + (f"% {still}\n" if still else ""))
    return "\n".join(parts)


def html_tables(tables: list[PointTable]) -> str:
    """Every point's Table 1 under its heading, each with its own notes only (footnotes, the
    cost): the general notes are said once by the page or file around them."""
    return "".join(
        f"<h3>{html.escape(pt.label or 'all runs')}</h3>{html_body(to_html(pt.table, general=False))}"
        + (f"<p>{html.escape(still)}</p>" if (still := _still(pt)) else "")
        for pt in tables
    )


def _html_list(lines: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in lines) + "</ul>"


def _frame_html(header: list[str], rows: list[list[str]]) -> str:
    """A table of text as the page's other tables (class ``cells``)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table class='cells'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def rank_html(summary: RankSummary) -> str:
    """The rank-stability summary as HTML: the rank table, then the order changes."""
    head, flips, tail = rank_lines(summary)
    return (
        _frame_html(*rank_rows(summary))
        + f"<p>{html.escape(head)}</p>"
        + (_html_list(flips) if flips else "")
        + f"<p>{html.escape(tail)}</p>"
    )


def csv_with_axes(tables: list[PointTable], extra: dict[str, list[Any]] | None = None) -> str:
    """Every point's Table 1 CSV in one, with the axis columns after ``domain, cell``."""
    frames = []
    for pt in tables:
        frame = pd.read_csv(io.StringIO(to_csv(pt.table)), dtype=str, keep_default_na=False)
        for i, (path, value) in enumerate(pt.point.items()):
            frame.insert(2 + i, path, _num(value))
        if pt.still and "note" in frame:
            still = frame["cell"].isin(pt.still)
            frame.loc[still, "note"] = frame.loc[still, "note"].map(
                lambda n: f"{n};{STILL_NOTE}" if n else STILL_NOTE
            )
        frames.append(frame)
    buf = io.StringIO()
    pd.concat(frames, ignore_index=True).to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


def _best_files(best: BestPoint, out: Path, select: list[str]) -> tuple[list[Path], str]:
    """``table1_best.md`` and ``.csv``; returns their paths and the page's HTML of them."""
    from gppo.analysis.tables.render import to_markdown

    chosen = best.chosen.copy()
    csv_parts = []
    for pt in best.tables:
        frame = pd.read_csv(io.StringIO(to_csv(pt.table)), dtype=str, keep_default_na=False)
        for path, value in pt.point.items():
            frame.insert(2, path, _num(value))
        mine = chosen
        for path, value in pt.point.items():  # a cell the axis does not move: at every point
            mine = mine[mine[path].isna() | (mine[path] == value)]
        picks = mine.set_index(["domain", "cell"])
        for i, path in enumerate([*select, "selection"]):
            frame.insert(
                2 + len(pt.point) + i,
                path,
                [
                    _num(picks[path].get((d, c))) if (d, c) in picks.index else ""
                    for d, c in zip(frame["domain"], frame["cell"], strict=True)
                ],
            )
        csv_parts.append(frame)
    csv_path = out / "table1_best.csv"
    pd.concat(csv_parts, ignore_index=True).to_csv(csv_path, index=False, lineterminator="\n")
    md = [
        f"Each cell at its best {', '.join(select)}: the value with the best mean held-out "
        "selection score (validation prompts disjoint from the benchmarks); the numbers are the "
        "benchmarks' of those runs.\n",
        chosen.to_markdown(index=False) if hasattr(chosen, "to_markdown") else chosen.to_string(),
        "",
    ]
    for pt in best.tables:
        md.append(f"### {pt.label or 'all runs'}\n\n{to_markdown(pt.table)}")
    md_path = out / "table1_best.md"
    md_path.write_text("\n".join(md), encoding="utf-8")
    page = (
        f"<p>{html.escape(md[0].strip())}</p>"
        + _frame_html(
            list(map(str, chosen.columns)),
            [
                [f"{v:.4g}" if isinstance(v, float) and v == v else _num(v) for v in rec]
                for rec in chosen.itertuples(index=False)
            ],
        )
        + html_tables(best.tables)
    )
    return [md_path, csv_path], page


def _num(value: Any) -> str:
    """A value as a CSV cell: text as it is, a number as Python writes it, None/NaN empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower()
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return repr(float(value)) if isinstance(value, (float, np.floating)) else str(value)


def write_axes_report(
    tidy: pd.DataFrame,
    out: Path,
    fmts: list[str],
    *,
    select: list[str] | None = None,
    home: Mapping[str, object] | None = None,
    figures: bool = True,
    mark: Callable[[list[PointTable]], None] | None = None,
    **table_kwargs: Any,
) -> AxesReport:
    """Every file of the module docstring; ``table_kwargs``: :func:`build_table1`'s; ``mark``:
    what changes every point's Table 1 before it is written (adaptive seeds: the rows' stops,
    :mod:`gppo.analysis.tables.adaptive_stops`)."""
    out.mkdir(parents=True, exist_ok=True)
    tables = point_tables(tidy, **table_kwargs)
    if mark is not None:
        mark(tables)
    files = []
    for fmt in fmts:
        path = out / f"table1.{EXTENSIONS[fmt]}"
        path.write_text(_combined(tables, fmt), encoding="utf-8")
        files.append(path)
    scores = out / "scores.csv"
    tidy.to_csv(scores, index=False, lineterminator="\n")
    files.append(scores)
    summary = rank_summary(tables)
    (out / "rank_stability.md").write_text(rank_markdown(summary), encoding="utf-8")
    summary.ranks.reset_index().to_csv(out / "rank_stability.csv", index=False)
    files += [out / "rank_stability.md", out / "rank_stability.csv"]
    sections = [  # the page says the general notes once, under its first Table 1
        ("axis-tables", "Table 1 at each axis point", html_tables(tables)),
        ("rank-stability", "Rank stability", rank_html(summary)),
    ]
    best = best_point(tidy, list(select or []), **table_kwargs)
    if best is not None:
        paths, best_html = _best_files(best, out, list(select or []))
        files += paths
        sections.append(("best-point", "Each cell at its own best point", best_html))
    if figures:
        from gppo.analysis.figures.axis_figure import write_axis_figure

        files += write_axis_figure(tables, out, table_kwargs.get("reference", ""))
    return AxesReport(tables, home_index(tables, home), files, sections, best)
