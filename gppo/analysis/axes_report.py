"""Write the report parts of a sweep with axes (gppo/analysis/axes.py computes them).

Files, in the report folder:
- ``table1.<md|tex|html|csv>``: Table 1 at every axis point, one after the other (the CSV: one
  file, one column per axis after ``domain, cell``; a row the axis does not move carries the
  point's value and the note ``same runs at every point``);
- ``rank_stability.md`` / ``.csv``: each cell's rank per point and the separated order changes;
- ``table1_best.md`` / ``.csv`` (a spec with ``select:``): each cell at its best value of the
  selection axes (the value chosen per row, its mean held-out selection score, the benchmarks'
  numbers of those runs);
- ``response.png`` / ``.svg``: the response figure (gppo/analysis/response.py);
- ``scores.csv``: the tidy scores with their axis columns (``report --from-csv`` re-renders it).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gppo.analysis.axes import (
    BestPoint,
    PointTable,
    best_point,
    home_index,
    point_tables,
    rank_markdown,
    rank_summary,
)
from gppo.analysis.page import html_body, table_fragment
from gppo.analysis.render import EXTENSIONS, render, to_csv
from gppo.analysis.table import Table1

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


def _combined(tables: list[PointTable], fmt: str) -> str:
    if fmt == "csv":
        return csv_with_axes(tables)
    parts = []
    for pt in tables:
        text = render(pt.table, fmt)
        still = f"{', '.join(pt.still)}: {STILL_NOTE} of {', '.join(pt.point)}" if pt.still else ""
        if fmt == "md":
            parts.append(f"### {pt.label}\n\n{text}" + (f"\n{still}\n" if still else ""))
        elif fmt == "latex":
            parts.append(f"% {pt.label}\n{text}" + (f"% {still}\n" if still else ""))
        else:  # html: every table's body under its heading, the first table's style
            parts.append(
                f"<h3>{pt.label}</h3>{html_body(text)}" + (f"<p>{still}</p>" if still else "")
            )
    if fmt == "html":
        style, _ = table_fragment(tables[0].table)
        return f"<!doctype html><html><head><style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
    return "\n".join(parts)


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
    from gppo.analysis.render import to_markdown

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
    return [md_path, csv_path], "\n".join(md)


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
    home: dict[str, Any] | None = None,
    figures: bool = True,
    **table_kwargs: Any,
) -> AxesReport:
    """Every file of the module docstring; ``table_kwargs``: :func:`build_table1`'s."""
    out.mkdir(parents=True, exist_ok=True)
    tables = point_tables(tidy, **table_kwargs)
    files = []
    for fmt in fmts:
        path = out / f"table1.{EXTENSIONS[fmt]}"
        path.write_text(_combined(tables, fmt), encoding="utf-8")
        files.append(path)
    scores = out / "scores.csv"
    tidy.to_csv(scores, index=False, lineterminator="\n")
    files.append(scores)
    summary = rank_summary(tables)
    rank_md = rank_markdown(summary)
    (out / "rank_stability.md").write_text(rank_md, encoding="utf-8")
    summary.ranks.reset_index().to_csv(out / "rank_stability.csv", index=False)
    files += [out / "rank_stability.md", out / "rank_stability.csv"]
    sections = [
        ("axis-tables", "Table 1 at each axis point", _combined(tables, "html")),
        ("rank-stability", "Rank stability", _md_html(rank_md)),
    ]
    best = best_point(tidy, list(select or []), **table_kwargs)
    if best is not None:
        paths, best_md = _best_files(best, out, list(select or []))
        files += paths
        sections.append(("best-point", "Each cell at its own best point", _md_html(best_md)))
    if figures:
        from gppo.analysis.response import write_response

        files += write_response(tables, out, table_kwargs.get("reference", ""))
    return AxesReport(tables, home_index(tables, home), files, sections, best)


def _md_html(text: str) -> str:
    """Markdown (tables, lists, lines) as plain HTML for the page."""
    import html

    return f"<pre class='md'>{html.escape(text)}</pre>"
