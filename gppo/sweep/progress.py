"""Rich rendering of a launch in progress and of ``status`` tables."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def launch_view(result: Any, max_rows: int = 20) -> Group:
    """Counts of pending/running/done/failed cells and one row per running cell."""
    from gppo.sweep.launch import DONE, PENDING, RUNNING, WAITING

    cells = result.cells.values()
    counts = {
        "pending": sum(1 for c in cells if c.state in (PENDING, WAITING)),
        "running": sum(1 for c in cells if c.state == RUNNING),
        "done": sum(1 for c in cells if c.state == DONE),
        "failed": sum(1 for c in cells if c.state == "failed"),
        "stopped": sum(1 for c in cells if c.state == "stopped"),
    }
    head = Text.assemble(
        (f"sweep {result.sweep_id}  ", "bold"),
        *[
            (f"{k} {v}  ", style)
            for (k, v), style in zip(
                counts.items(), ["dim", "cyan", "green", "red", "yellow"], strict=True
            )
        ],
    )
    table = Table(box=None, pad_edge=False)
    for col in ("cell", "attempt", "job", "step", "train score", "running for"):
        table.add_column(col)
    now = time.time()
    running = [c for c in cells if c.state == RUNNING and c.current is not None]
    for c in running[:max_rows]:
        table.add_row(
            c.cell.id,
            str(c.attempt),
            c.current.status,
            "-" if c.step is None else str(c.step),
            _fmt(c.score),
            f"{now - c.current.submitted_at:.0f}s",
        )
    if len(running) > max_rows:
        table.add_row(f"... {len(running) - max_rows} more", "", "", "", "", "")
    return Group(head, table)


def status_table(rows: list[Any]) -> Table:
    table = Table(title="cells")
    for col in ("cell", "state", "attempt", "step", "train score", "eval", "run id"):
        table.add_column(col)
    styles = {
        "done": "green",
        "running": "cyan",
        "failed": "red",
        "stopped": "yellow",
        "interrupted": "yellow",
    }
    for r in rows:
        table.add_row(
            r.cell,
            Text(r.state, style=styles.get(r.state, "")),
            "-" if r.attempt is None else str(r.attempt),
            "-" if r.step is None else str(r.step),
            _fmt(r.score),
            _fmt(r.eval_score),
            r.run_id or "-",
        )
    return table
