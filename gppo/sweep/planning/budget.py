"""A sweep's budget (``budget: {gpu_hours, cpu_hours, runs}``, any of them) and how the launcher
keeps it.

The launcher starts a run only when what the sweep has spent (every attempt of every launch,
:func:`gppo.store.comparable.sweep_spent`), plus the forecast of the runs it has going (those a
relaunch re-attached to included: :meth:`Keeper.running`), plus this
run's forecast (:mod:`gppo.sweep.planning.forecast`) stays within every limit; ``runs`` counts the cells
that got a run of their own (a retry is the same run). The runs it leaves stay pending, each with
the reason; the launch ends with exit 0 and the tables of what ran, and a relaunch with a larger
budget goes on from there. A run without a forecast is started while the spend is below the
limits. ``plan`` prints the forecast against the budget, and refuses a budget below the cheapest
run's forecast in one line (:func:`check_budget`, a :class:`~gppo.errors.SpecError`, exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gppo.errors import SpecError
from gppo.grid.load import Plan
from gppo.grid.schema import Budget
from gppo.store.cost import Hours, Price, Spent, fmt_hours
from gppo.sweep.planning.forecast import Forecast

#: the hour limits of a budget: (field, Hours attribute, unit)
LIMITS = (("gpu_hours", "gpu", "GPU-h"), ("cpu_hours", "cpu", "CPU-h"))


def _over(budget: Budget, hours: Hours, runs: int) -> str | None:
    """The first limit ``hours`` and ``runs`` exceed, as text; None when within all."""
    for name, attr, unit in LIMITS:
        limit = getattr(budget, name)
        if limit is not None and getattr(hours, attr) > limit + 1e-12:
            return f"{fmt_hours(getattr(hours, attr))} {unit} > budget {fmt_hours(limit)} {unit}"
    if budget.runs is not None and runs > budget.runs:
        return f"{runs} runs > budget {budget.runs} runs"
    return None


def check_budget(plan: Plan, fc: Forecast) -> None:
    """Refuse (:class:`SpecError`, one line) a budget below the cheapest run's forecast."""
    budget = plan.spec.budget
    if budget is None:
        return
    runs = [c for c in fc.cells.values() if c.known and c.runs]
    if not runs:
        return
    cheapest = min(runs, key=lambda c: (c.hours.gpu, c.hours.cpu))
    for name, attr, unit in LIMITS:
        limit = getattr(budget, name)
        need = getattr(cheapest.hours, attr)
        if limit is not None and need > limit:
            raise SpecError(
                plan.source,
                f"budget.{name}",
                f"{fmt_hours(limit)} is below one run's forecast ({cheapest.cell}: "
                f"{fmt_hours(need)} {unit}, {cheapest.source.text()}); allowed: at least that",
            )


def budget_lines(budget: Budget | None, fc: Forecast, price: Price | None = None) -> list[str]:
    """``budget: 0.1 CPU-h: the forecast 0.23 CPU-h is over it: about 21 of 48 runs fit``."""
    if budget is None:
        return []
    est, _, _ = fc.total()
    runs = sum(c.runs for c in fc.cells.values())
    parts = [f"{fmt_hours(getattr(budget, n))} {u}" for n, a, u in LIMITS if getattr(budget, n)]
    parts += [f"{budget.runs} runs"] if budget.runs is not None else []
    over = _over(budget, est, runs)
    if over is None:
        return [f"budget: {', '.join(parts)}: the forecast fits ({hours_text_short(est)})"]
    keeper = Keeper(budget, fc, Spent(Hours(), frozenset()))
    fit = sum(keeper.admit(cid) is None for cid, c in fc.cells.items() if c.runs)
    return [
        f"budget: {', '.join(parts)}: the forecast is over it ({over}); about {fit} of "
        f"{runs} runs fit, the launcher leaves the others pending"
    ]


def hours_text_short(hours: Hours) -> str:
    return f"{fmt_hours(hours.cpu)} CPU-h, {fmt_hours(hours.gpu)} GPU-h"


@dataclass
class Keeper:
    """The launcher's side of a budget: :meth:`admit` before a run starts, :meth:`ended` when an
    attempt ends. ``left``: the cells it would not start, with the reason."""

    budget: Budget
    fc: Forecast
    spent: Spent
    committed: dict[str, Hours] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    left: dict[str, str] = field(default_factory=dict)
    paid: Hours = field(default_factory=Hours)

    def __post_init__(self) -> None:
        self.paid = self.spent.hours
        self.started = set(self.spent.cells)

    def admit(self, cell_id: str) -> str | None:
        """None: start it (its forecast is now committed); else why not (kept in ``left``)."""
        cf = self.fc.cells.get(cell_id)
        need = cf.hours if cf is not None else Hours()
        committed = sum(self.committed.values(), Hours())
        runs = len(self.started | {cell_id}) if cf is None or cf.runs else len(self.started)
        over = _over(self.budget, self.paid + committed + need, runs)
        if over is not None:
            self.left[cell_id] = f"its forecast would take the sweep past the budget ({over})"
            return self.left[cell_id]
        self.left.pop(cell_id, None)
        self.committed[cell_id] = need
        self.started.add(cell_id)
        return None

    def running(self, cell_id: str) -> None:
        """``cell_id``'s run is already going (re-attached by a relaunch): its forecast is
        committed, as at :meth:`admit`, whatever the limits (it runs either way), until it ends."""
        cf = self.fc.cells.get(cell_id)
        self.committed[cell_id] = cf.hours if cf is not None else Hours()
        self.started.add(cell_id)

    def ended(self, cell_id: str, attempt: Hours | None) -> None:
        """An attempt of ``cell_id`` ended having cost ``attempt``
        (:func:`gppo.store.cost.attempt_hours`; None: unknown): it replaces its forecast."""
        self.committed.pop(cell_id, None)
        if attempt is not None:
            self.paid += attempt
