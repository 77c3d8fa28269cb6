"""Table 1 in the terminal: rich tables whose cells never wrap, and their notes."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gppo.analysis.render import frames, notes
from gppo.analysis.table import Table1


def to_rich(table: Table1) -> list:
    """rich Tables (one per domain) with bold / underline / italic highlights, and the notes."""
    styles = {1: "bold", 2: "underline", 3: "italic"}
    out: list = []
    for block in table.blocks:
        text, rank = frames(table, block, "rich")
        if table.multi_seed:  # terminal: Avg., Δ, P(>) with intervals; benchmarks in the report
            text, rank = text.drop(columns=block.benchmarks), rank.drop(columns=block.benchmarks)
        rt = Table(title=block.domain, show_lines=False)
        for col in text.columns:
            rt.add_column(col, justify="left" if col in ("Divergence", "Estimator") else "right")
        last = None
        for i in range(len(text)):
            values = list(text.iloc[i])
            if values[0] == last:
                values[0] = ""
            else:
                last = values[0]
            rt.add_row(
                *[Text(v, style=styles.get(int(rank.iloc[i, j]), "")) for j, v in enumerate(values)]
            )
        out.append(rt)
    brief = "This view leaves out the per-benchmark columns: see the report (table1.md)."
    out.extend(Text(n) for n in [*notes(table, "rich"), *([brief] if table.multi_seed else [])])
    return out


def print_table1(console: Any, table1: Any) -> None:
    """Table 1 as rich tables whose cells never wrap ("Binary (DPPO)" on one line): boxed when
    that fits the console, else compact (no vertical rules, single spaces between columns;
    quickstart's table: 88 columns boxed, 79 compact)."""
    wide = Console(width=1000)
    for item in to_rich(table1):
        if isinstance(item, Table):
            for col in item.columns:
                col.no_wrap = True
            if wide.measure(item).maximum > console.width:
                item.box, item.pad_edge, item.collapse_padding = box.SIMPLE_HEAD, False, True
        console.print(item)
