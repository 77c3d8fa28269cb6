"""Table 1's cost column: what each row's runs cost, per seed and in all, and the table's total.

Read from the tidy frame's ``cpu_hours`` / ``gpu_hours`` (:mod:`gppo.analysis.data.tidy`: a cell's
runs over all its attempts, :mod:`gppo.store.cost`), so a sweep read from MLflow and its tidy CSV
(``report --from-csv``) give the same column. A *run* here is one (domain, cell, seed, axis
point) with a cost; the table's total counts every run once: rows that show the same runs (the
same ``run_id``, e.g. a cell that shares an identical cell's runs) add them once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from gppo.analysis.data.tidy import BASE, CPU_HOURS, GPU_HOURS, axis_columns
from gppo.store.cost import Hours, Price, fmt_hours, hours_text, money_text


@dataclass(frozen=True)
class RowCost:
    """One row's runs: their mean per seed (run) and their total."""

    per_seed: Hours
    total: Hours


@dataclass
class TableCost:
    """The cost column of a Table 1: per (domain, cell) row, and the total of its distinct runs.
    ``gpu``: whether any run held a GPU (the column then shows GPU-hours, else CPU-hours)."""

    rows: dict[tuple[str, str], RowCost] = field(default_factory=dict)
    total: Hours = field(default_factory=Hours)
    price: Price | None = None

    @property
    def gpu(self) -> bool:
        return self.total.gpu > 0

    def header(self) -> str:
        """``Cost (CPU-h, seed / row)``, ``Cost (GPU-h, …)`` or ``Cost (USD, …)``."""
        unit = self.price.currency if self.price else "GPU-h" if self.gpu else "CPU-h"
        return f"Cost ({unit}, seed / row)"

    def amount(self, hours: Hours) -> str:
        """The number the column shows for ``hours``: money with a price, else GPU-h or CPU-h."""
        money = hours.money(self.price)
        if money is not None:
            return fmt_hours(money)
        return fmt_hours(hours.gpu if self.gpu else hours.cpu)

    def text(self, domain: str, cell: str) -> str:
        """``0.00412 / 0.0124`` (per seed / the row's total); ``—`` for a row without a cost."""
        row = self.rows.get((domain, cell))
        if row is None:
            return "—"
        return f"{self.amount(row.per_seed)} / {self.amount(row.total)}"

    def note(self) -> str:
        """The total under the table."""
        money = self.total.money(self.price)
        paid = f" = {money_text(money, self.price)}" if money is not None and self.price else ""
        return (
            f"Cost: resources held x wall time per run, every attempt counted; per seed (the mean"
            f" run) / the row's runs. Total: {hours_text(self.total)}{paid} over"
            f" {self.total.runs} runs (runs shown in two rows counted once)."
        )


def _unit(row: dict, axes: list[str]) -> tuple:
    """A run's identity: its run id, else (domain, cell, seed, axis point)."""
    if row["run_id"]:
        return ("run", row["run_id"])
    return (row["domain"], row["cell"], int(row["seed"]), *(str(row[a]) for a in axes))


def table_cost(tidy: pd.DataFrame, price: Price | None = None) -> TableCost | None:
    """The cost column of the table built from ``tidy`` (None: no row has a cost)."""
    if CPU_HOURS not in tidy or GPU_HOURS not in tidy:
        return None
    costed = tidy[tidy[CPU_HOURS].notna() & (tidy["cell"] != BASE)]  # the base model: no run
    if costed.empty:
        return None
    axes = axis_columns(tidy)
    costed = costed.drop_duplicates(["domain", "cell", "seed", "run_id", *axes])
    runs: dict[tuple[str, str], dict[tuple, Hours]] = {}
    for row in costed.to_dict("records"):  # one per run (the tidy frame: one per benchmark)
        gpu = 0.0 if math.isnan(row[GPU_HOURS]) else float(row[GPU_HOURS])
        hours = Hours(float(row[CPU_HOURS]), gpu, 0.0, 1)
        runs.setdefault((row["domain"], row["cell"]), {})[_unit(row, axes)] = hours
    out = TableCost(price=price)
    distinct: dict[tuple, Hours] = {}
    for key, units in runs.items():
        total = sum(units.values(), Hours())
        out.rows[key] = RowCost(total.scaled(1 / len(units)), total)
        distinct.update(units)
    out.total = sum(distinct.values(), Hours())
    return out
