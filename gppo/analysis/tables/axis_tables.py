"""Table 1 for a sweep with axes: one table per axis point, the rank-stability summary, and
"each cell at its own best point" on a selection axis (pure: tidy frame in, tables out).

The tidy frame's axis columns (gppo/analysis/data/tidy.py) say where each run stands; a run whose
axis value is None is not moved by that axis (a baseline under an r_min axis) and stands, the
same runs, at every point of it (the tables say so in their notes).

- :func:`point_tables`: Table 1 at each point (the same statistics as without axes: t CIs, Δ vs
  the reference at the same point, P(>)), the significance correction per point and domain
  (each comparison once; the adaptive rule's family too).
- :func:`rank_summary`: each cell's rank by Avg. at each point, and the pairs of cells whose
  order flips between two points where the data separate them at both (Δ's t CI on the variance
  of Table 1's test, Welch's or the pooled one, excludes 0 at each), not where it does not.
- :func:`best_point`: per cell, the value of each ``select`` axis with the best mean
  held-out selection score (``selection``, a split disjoint from the benchmarks), then Table 1
  of those runs: the reported numbers are the benchmarks' only, never the selection's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pandas as pd

from gppo.analysis.data.tidy import BASE, SELECTION, axis_cell, axis_columns
from gppo.analysis.tables.table1 import build_table1
from gppo.analysis.tables.table1_model import AVG, Table1
from gppo.stats import inference as S


@dataclass
class PointTable:
    """Table 1 at one axis point."""

    point: dict[str, Any]
    table: Table1
    still: list[str] = field(default_factory=list)  # cells not moved (the same runs everywhere)

    @property
    def label(self) -> str:
        return ", ".join(f"{p} = {value_text(v)}" for p, v in self.point.items())


def value_text(value: object) -> str:
    """An axis value as labels and titles write it: text as it is, else its JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def _sort_key(value: Any) -> tuple:
    return (0, float(value), "") if isinstance(value, (int, float)) else (1, 0.0, str(value))


def axis_values(tidy: pd.DataFrame) -> dict[str, list[Any]]:
    """Each axis column's values (sorted: numbers ascending, then text)."""
    out = {}
    for col in axis_columns(tidy):
        vals = [v for v in tidy[col].dropna().unique().tolist() if v is not None]
        out[col] = sorted(vals, key=_sort_key)
    return out


def points(tidy: pd.DataFrame) -> list[dict[str, Any]]:
    """The axis points the runs stand at (the product of the values seen, first axis slowest)."""
    import itertools

    values = axis_values(tidy)
    return [dict(zip(values, combo, strict=True)) for combo in itertools.product(*values.values())]


def at_point(tidy: pd.DataFrame, point: Mapping[str, object]) -> pd.DataFrame:
    """The rows that stand at ``point``: the axis's value there, or None (not moved)."""
    keep = pd.Series(True, index=tidy.index)
    for col, value in point.items():
        column = tidy[col]
        keep &= column.isna() | (column == value)
    return tidy[keep]


def _still(tidy: pd.DataFrame, axes: list[str]) -> list[str]:
    trained = tidy[tidy["cell"] != BASE]
    out = []
    for cell, rows in trained.groupby("cell", sort=False):
        if any(rows[a].isna().all() for a in axes):
            out.append(str(cell))
    return out


def point_tables(tidy: pd.DataFrame, **table_kwargs: Any) -> list[PointTable]:
    """Table 1 at every axis point (``table_kwargs``: :func:`build_table1`'s). Each point's
    table is corrected on its own, per domain (:func:`gppo.analysis.tables.table1.comparison_family`:
    the family of the adaptive rule too, issue 58): a row that no axis moves is one comparison
    in each point's family, never counted once per point in one family."""
    axes = axis_columns(tidy)
    still = _still(tidy, axes)
    out = [
        PointTable(p, build_table1(at_point(tidy, p), **table_kwargs), still) for p in points(tidy)
    ]
    if len(out) > 1:  # the † note names the family
        for pt in out:
            pt.table.family = "at this axis point"
    return out


def home_index(tables: list[PointTable], home: Mapping[str, object] | None) -> int:
    """The point whose table the terminal shows: the spec's own values (``home``:
    :func:`gppo.grid.axes.plain_values`), else the first."""
    for i, pt in enumerate(tables):
        if home and all(axis_cell(home.get(k)) == v for k, v in pt.point.items()):
            return i
    return 0


# -- rank stability ---------------------------------------------------------------------------
@dataclass
class RankSummary:
    ranks: pd.DataFrame  # (domain, cell) x point label -> rank by Avg. (1 best)
    flips: list[str]  # separated order changes, one line each
    unseparated: int  # order changes the data do not separate


def rank_summary(tables: list[PointTable]) -> RankSummary:
    """Ranks per point and the order changes the data separate (see the module docstring)."""
    records: dict[tuple[str, str], dict[str, Any]] = {}
    seeds: dict[tuple[str, str, int], list[float]] = {}
    pools: dict[tuple[str, int], list[list[float]]] = {}
    labels = [pt.label for pt in tables]
    for i, pt in enumerate(tables):
        for block in pt.table.blocks:
            rows = [r for r in block.rows if r.kind != "base" and r.entries[AVG].mean is not None]
            ordered = sorted(rows, key=lambda r: -float(r.entries[AVG].mean or 0))
            for rank, row in enumerate(ordered, 1):
                records.setdefault((block.domain, row.cell), {})[pt.label] = rank
                seeds[block.domain, row.cell, i] = row.seed_avgs
            pools[block.domain, i] = [r.seed_avgs for r in rows]
    ranks = pd.DataFrame.from_dict(records, orient="index", columns=labels)
    ranks.index = pd.MultiIndex.from_tuples(ranks.index, names=["domain", "cell"])
    flips, unseparated = [], 0
    conf = tables[0].table.confidence if tables else S.CONFIDENCE
    for domain in dict.fromkeys(d for d, _ in records):
        cells = [c for d, c in records if d == domain]
        for a_i, a in enumerate(cells):
            for b in cells[a_i + 1 :]:
                signs = {}
                for i in range(len(tables)):
                    x, y = seeds.get((domain, a, i)), seeds.get((domain, b, i))
                    if not x or not y:
                        continue
                    mean = sum(x) / len(x) - sum(y) / len(y)
                    pool = pools[domain, i] if tables[i].table.test == "pooled" else None
                    ci = S.delta_ci(x, y, conf, pool)  # the table's test's variance
                    sep = ci is not None and (ci[0] > 0 or ci[1] < 0)
                    signs[i] = (math.copysign(1, mean) if mean else 0, sep)
                up = [i for i, (s, sep) in signs.items() if s > 0 and sep]
                down = [i for i, (s, sep) in signs.items() if s < 0 and sep]
                if up and down:
                    flips.append(
                        f"{domain}: {a} > {b} at {labels[up[0]]}, {b} > {a} at {labels[down[0]]}"
                    )
                elif {s for s, _ in signs.values()} >= {1, -1}:
                    unseparated += 1
    return RankSummary(ranks, flips, unseparated)


def rank_lines(summary: RankSummary) -> tuple[str, list[str], str]:
    """What the rank table is followed by: a heading line, the separated order changes (one
    each) and the count of the others."""
    head = (
        "Order changes the data separate (Δ's 95% t CI excludes 0 at both points):"
        if summary.flips
        else "No pair of cells changes order where the data separate them."
    )
    tail = (
        f"{summary.unseparated} pair(s) change order only where their Δ's CI includes 0 "
        "(not a ranking change the data support)."
    )
    return head, list(summary.flips), tail


def rank_rows(summary: RankSummary) -> tuple[list[str], list[list[str]]]:
    """The rank table as text: (header, rows); no rank at a point: empty."""
    frame = summary.ranks.reset_index()
    rows = [
        ["" if pd.isna(v) else str(int(v)) if isinstance(v, float) else str(v) for v in rec]
        for rec in frame.itertuples(index=False)
    ]
    return [str(c) for c in frame.columns], rows


def rank_markdown(summary: RankSummary) -> str:
    """The rank table and the separated order changes, as Markdown."""
    header, rows = rank_rows(summary)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    head, flips, tail = rank_lines(summary)
    lines += ["", head, *(f"- {f}" for f in flips), tail]
    return "\n".join(lines) + "\n"


# -- each cell at its best point -----------------------------------------------------------------
@dataclass
class BestPoint:
    tidy: pd.DataFrame  # the chosen runs (selected axes dropped)
    chosen: pd.DataFrame  # domain, cell, the other axes, each selected axis's value, selection
    tables: list[PointTable]  # Table 1 of the chosen runs at each point of the other axes


def best_point(tidy: pd.DataFrame, select: list[str], **table_kwargs: Any) -> BestPoint | None:
    """Each cell at the value of the ``select`` axes with its best mean held-out selection score
    (per domain and point of the other axes); None without selection scores. The base model's
    row stays where no ``select`` axis moves it (gppo/analysis/data/bases.py); where one does, the
    cells stand on different bases and the table has none."""
    if not select or SELECTION not in tidy or tidy[SELECTION].notna().sum() == 0:
        return None
    others = [c for c in axis_columns(tidy) if c not in select]
    runs = tidy.drop_duplicates(["domain", "cell", "seed", "run_id", *axis_columns(tidy)])
    scored = runs[runs[SELECTION].notna()]
    keys = ["domain", "cell", *others]
    by = scored.groupby([*keys, *select], dropna=False, sort=False)[SELECTION].mean()
    chosen_rows = []
    base = tidy[tidy["cell"] == BASE]  # a base a selection axis moves is no one row's: left out
    kept = [base[base[list(select)].isna().all(axis=1)]]
    for _, group in by.groupby(level=list(range(len(keys))), dropna=False, sort=False):
        best = cast("tuple[Any, ...]", group.idxmax())  # a MultiIndex label
        values = dict(zip([*keys, *select], best, strict=True))
        chosen_rows.append({**values, SELECTION: float(group.max())})
        mask = (tidy["domain"] == values["domain"]) & (tidy["cell"] == values["cell"])
        for col in [*others, *select]:
            v = values[col]
            mask &= (
                tidy[col].isna()
                if v is None or (isinstance(v, float) and math.isnan(v))
                else (tidy[col] == v)
            )
        kept.append(tidy[mask])
    chosen = pd.DataFrame(chosen_rows)
    picked = pd.concat(kept, ignore_index=True).drop(columns=list(select))
    tables = (
        point_tables(picked, **table_kwargs)
        if others
        else [PointTable({}, build_table1(picked, **table_kwargs))]
    )
    return BestPoint(picked, chosen, tables)
