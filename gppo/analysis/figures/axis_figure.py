"""The axis-response figure of a sweep with axes: how each cell's Avg. (avg@k, %) responds to
the first axis, with its t CI (Table 1's Avg. entry at each point), one line per cell, the
reference highlighted, and the base model at each point (its own base: grey, dotted; an axis
that moves the base model, such as ``local.warmstart_target``, moves this line too); with a
second axis, one panel per value of it (more axes: per combination). A cell the axis does not
move (a baseline under r_min) is the same runs at every point: a flat dashed line, marked
"(not moved)". Files: ``axis_response.png`` / ``.svg`` (``axis_response_<domain>`` per domain
when there are several).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gppo.analysis.data.tidy import BASE
from gppo.analysis.tables.axis_tables import PointTable, value_text
from gppo.analysis.tables.table1_model import AVG
from gppo.analysis.vocabulary import BASE_MODEL

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: the file stem of the figure
STEM = "axis_response"


def response_frame(tables: Sequence[PointTable]) -> list[dict[str, Any]]:
    """One record per (point, domain, cell), the base model's included (``cell``: ``base``):
    the axis values, Avg. and its CI (percent), ``still``: the same runs at every point."""
    out = []
    for pt in tables:
        for block in pt.table.blocks:
            for row in block.rows:
                entry = row.entries.get(AVG)
                if entry is None or entry.mean is None:
                    continue
                lo, hi = entry.interval or (float(entry.mean), float(entry.mean))
                out.append(
                    {
                        **pt.point,
                        "domain": block.domain,
                        "cell": row.cell,
                        "avg": float(entry.mean),
                        "lo": lo,
                        "hi": hi,
                        "still": row.cell in pt.still,
                    }
                )
    return out


def figure_response(tables: Sequence[PointTable], domain: str, reference: str) -> Figure:
    """The figure for one domain (matplotlib Figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = list(tables[0].point)
    x_axis, panel_axes = axes[0], axes[1:]
    recs = [r for r in response_frame(tables) if r["domain"] == domain]
    xs = list(dict.fromkeys(pt.point[x_axis] for pt in tables))
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)
    pos = {x: (float(x) if numeric else i) for i, x in enumerate(xs)}
    panels = list(dict.fromkeys(tuple(r[a] for a in panel_axes) for r in recs)) or [()]
    fig, grid = plt.subplots(
        1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False, sharey=True
    )
    for ax, panel in zip(grid[0], panels, strict=True):
        mine = [r for r in recs if tuple(r[a] for a in panel_axes) == panel]
        for cell in dict.fromkeys(r["cell"] for r in mine):
            pts = sorted((r for r in mine if r["cell"] == cell), key=lambda r: pos[r[x_axis]])
            x = [pos[r[x_axis]] for r in pts]
            y = [r["avg"] for r in pts]
            err = [[r["avg"] - r["lo"] for r in pts], [r["hi"] - r["avg"] for r in pts]]
            ref, base = cell == reference, cell == BASE
            still = pts[0]["still"]
            name = BASE_MODEL if base else cell
            ax.errorbar(
                x, y, yerr=err, capsize=3, marker="o", markersize=3,
                linewidth=2.8 if ref else 1.1, color="black" if ref else ("grey" if base else None),
                linestyle=":" if base else ("--" if still else "-"), zorder=3 if ref else 2,
                label=f"{name}{' (reference)' if ref else ''}{' (not moved)' if still else ''}",
            )  # fmt: skip
        ax.set_xlabel(x_axis)
        ax.set_xticks([pos[x] for x in xs], [value_text(x) for x in xs])
        title = ", ".join(f"{a} = {value_text(v)}" for a, v in zip(panel_axes, panel, strict=True))
        ax.set_title(title or domain, fontsize=10)
        ax.grid(alpha=0.3)
    grid[0][0].set_ylabel("Avg. avg@k (%), 95% t CI over seeds")
    handles, labels = grid[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(f"Response to {x_axis} ({domain})")
    fig.tight_layout()
    return fig


def write_axis_figure(tables: Sequence[PointTable], out_dir: Path, reference: str) -> list[Path]:
    """``axis_response.png``/``.svg`` (``axis_response_<domain>`` for several domains)."""
    from gppo.analysis.figures.paper_figures import save

    if not tables or not tables[0].point:
        return []
    domains = list(dict.fromkeys(b.domain for pt in tables for b in pt.table.blocks))
    paths: list[Path] = []
    for domain in domains:
        stem = STEM if len(domains) == 1 else f"{STEM}_{domain}"
        fig = figure_response(tables, domain, reference)
        paths += save(fig, out_dir / stem)
    return paths
