"""What a sweep will cost, before it runs: per cell and in all, CPU-hours, GPU-hours and wall time
at the spec's concurrency, each with its source and an interval (``plan``, ``status``, the budget).

A run's seconds come from the best source there is for its cost key
(:func:`gppo.store.cost.cost_key`: the backend, the settings that drive cost, the benchmarks,
avg@k and the job's resources; an axis over ``steps`` or the model changes it):

1. ``store``: the finished runs with the same key in the spec's store, any sweep
   (:func:`gppo.store.comparable.comparable_walls`): their mean wall time (submission to end);
2. ``pre-flight``: the backend's timing of one training step on this machine x steps, plus the
   run's start-up (:meth:`gppo.backends.base.Backend.step_timing`; the testbed's takes a few
   seconds, once per machine);
3. ``none``: no forecast.

Hours are the job's resources x those seconds (:func:`gppo.store.cost.hours_of`). Cells that are
the same run (:func:`gppo.grid.sharing.run_groups`) are one run: the forecast counts it once.
The interval of a total of N runs from n comparable runs of mean m and spread s is the t
prediction interval of a sum, ``N m ± t(n-1) s sqrt(N + N²/n)`` (95 %); with fewer than two runs,
or from the pre-flight, ``± PREFLIGHT_SPREAD`` of the forecast (the accuracy the benchmark
``benchmarks/bench_forecast.py`` holds it to). Wall time at concurrency c: the runs' seconds / c,
at least the longest run; its interval's ends likewise at least that run's own, so the forecast
lies inside its interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scipy import stats

from gppo.backends.base import Backend, get_backend
from gppo.cell import Cell, Resources
from gppo.grid.load import Plan
from gppo.grid.sharing import run_groups
from gppo.store.cost import Hours, Price, cost_key, fmt_hours, hours_of, hours_text, money_text
from gppo.store.deadline import read_within
from gppo.store.uri import resolve_tracking_uri, store_exists
from gppo.sweep.monitor.launch_log import fmt_duration

STORE, PREFLIGHT, NONE = "store", "pre-flight", "none"
#: the relative half-width of a forecast from the pre-flight, or from a single earlier run
PREFLIGHT_SPREAD = 0.35
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Source:
    """Where one cost key's seconds come from: ``kind`` (store | pre-flight | none), the mean
    seconds of a run, their spread and the number of runs they come from (0: the pre-flight)."""

    kind: str
    mean_s: float = math.nan
    sd_s: float = math.nan
    n: int = 0

    def interval(self, runs: int) -> tuple[float, float]:
        """The seconds of ``runs`` such runs together: (low, high)."""
        total = runs * self.mean_s
        if self.n >= 2 and self.sd_s == self.sd_s:
            t = float(stats.t.ppf(0.5 + CONFIDENCE / 2, self.n - 1))
            half = t * self.sd_s * math.sqrt(runs + runs * runs / self.n)
        else:
            half = PREFLIGHT_SPREAD * total
        return max(0.0, total - half), total + half

    def text(self) -> str:
        if self.kind == STORE:
            return f"store: mean of {self.n} comparable finished run{'s' * (self.n != 1)}"
        if self.kind == PREFLIGHT:
            return "pre-flight: one training step here x steps + start-up"
        return "none"


@dataclass(frozen=True)
class CellForecast:
    """One cell's run: its cost key, resources, source; ``runs`` 0 for a cell whose run another
    cell's serves (the same function: counted with that cell)."""

    cell: str
    key: str
    resources: Resources
    source: Source
    runs: int = 1

    @property
    def seconds(self) -> float:
        return self.source.mean_s * self.runs if self.source.kind != NONE else math.nan

    @property
    def hours(self) -> Hours:
        """The cell's forecast hours (none for a cell without a forecast or a run of its own)."""
        return hours_of(self.resources, self.seconds) if self.known and self.runs else Hours()

    @property
    def known(self) -> bool:
        return self.source.kind != NONE


@dataclass
class Forecast:
    """The forecast of a plan's cells (:func:`forecast`)."""

    cells: dict[str, CellForecast] = field(default_factory=dict)
    concurrency: int = 1
    #: why the store's runs were not read (it did not answer in time, or erred): the forecast
    #: is the pre-flight's
    note: str | None = None

    def of(self, ids: Sequence[str] | None = None) -> list[CellForecast]:
        """The forecasts of the cells ``ids`` (None: all), in the plan's order."""
        if ids is None:
            return list(self.cells.values())
        wanted = set(ids)  # a sweep of 10,000 seeds a cell asks for many
        return [c for cid, c in self.cells.items() if cid in wanted]

    def total(self, ids: Sequence[str] | None = None) -> tuple[Hours, Hours, Hours]:
        """(forecast, low, high) hours of the cells ``ids`` (None: all) that have one."""
        est, lo, hi = Hours(), Hours(), Hours()
        groups: dict[str, list[CellForecast]] = {}
        for c in self.of(ids):
            if c.known and c.runs:
                groups.setdefault(c.key, []).append(c)
        for members in groups.values():
            runs = sum(c.runs for c in members)
            low_s, high_s = members[0].source.interval(runs)
            res = members[0].resources
            est += hours_of(res, members[0].source.mean_s * runs)
            lo += hours_of(res, low_s)
            hi += hours_of(res, high_s)
        return est, lo, hi

    def wall_s(self, ids: Sequence[str] | None = None) -> tuple[float, float, float]:
        """(forecast, low, high) wall seconds of the cells ``ids`` at the spec's concurrency: the
        runs' seconds / concurrency, each at least the longest run's own (its forecast, low,
        high), so the forecast always lies inside its interval (one run left at
        max_concurrent=2 takes a whole run, not half of one)."""
        est, lo, hi = self.total(ids)
        runs = [c.source for c in self.of(ids) if c.known and c.runs]
        one = [(s.mean_s, *s.interval(1)) for s in runs]  # (forecast, low, high) of one run
        c = self.concurrency
        return (
            max(est.wall_s / c, max((m for m, _, _ in one), default=0.0)),
            max(lo.wall_s / c, max((a for _, a, _ in one), default=0.0)),
            max(hi.wall_s / c, max((b for _, _, b in one), default=0.0)),
        )

    @property
    def sources(self) -> list[Source]:
        return list({c.key: c.source for c in self.cells.values() if c.runs}.values())

    def unknown(self) -> list[str]:
        return [c.cell for c in self.cells.values() if not c.known and c.runs]


def forecast(
    plan: Plan,
    *,
    preflight: bool = True,
    walls: Callable[[str, list[str]], dict[str, list[float]]] | None = None,
) -> Forecast:
    """Forecast every cell of ``plan``. ``preflight``: time the backend's step where the store
    has nothing comparable (False: those cells have no forecast). ``walls``: the comparable
    runs' seconds by key (default: read from the spec's store, if it exists)."""
    backend = get_backend(plan.spec.backend)
    resources = {c.id: backend.job(c).resources for c in plan.cells}
    keys = {c.id: cost_key(c, resources[c.id], backend.cost_settings(c)) for c in plan.cells}
    uri, wanted = resolve_tracking_uri(plan.spec.tracking.uri), sorted(set(keys.values()))
    # the store is never needed: one that does not answer within a few seconds is done without
    found, why = read_within(uri, lambda: (walls or _store_walls)(uri, wanted))
    sources: dict[str, Source] = {}
    out = Forecast(concurrency=plan.spec.ray.max_concurrent)
    if why is not None:
        out.note = f"{why}: forecast without it" + (" (from the pre-flight)" if preflight else "")
    found = found or {}
    for group in run_groups(plan.cells):
        for i, cell in enumerate(group):
            key = keys[cell.id]
            if key not in sources:
                sources[key] = _source(found.get(key), backend, cell, preflight)
            out.cells[cell.id] = CellForecast(
                cell.id, key, resources[cell.id], sources[key], runs=0 if i else 1
            )
    return out


def _source(walls: list[float] | None, backend: Backend, cell: Cell, preflight: bool) -> Source:
    if walls:
        n = len(walls)
        mean = sum(walls) / n
        sd = math.sqrt(sum((w - mean) ** 2 for w in walls) / (n - 1)) if n > 1 else math.nan
        return Source(STORE, mean, sd, n)
    timing = backend.step_timing(cell) if preflight else None
    if timing is None:
        return Source(NONE)
    return Source(PREFLIGHT, timing.run_s)


def _store_walls(uri: str, keys: list[str]) -> dict[str, list[float]]:
    """The comparable runs' seconds in the store at ``uri``; none when it does not exist (then
    MLflow is not even imported: ``plan`` of a first sweep stays fast)."""
    if not store_exists(uri):
        return {}
    from gppo.store.comparable import comparable_walls

    return comparable_walls(uri, keys)


def hours_line(hours: Hours, lo: Hours, hi: Hours) -> str:
    """``0.16 CPU-h [0.11, 0.22], 0 GPU-h``."""
    f = fmt_hours
    cpu = f"{f(hours.cpu)} CPU-h [{f(lo.cpu)}, {f(hi.cpu)}]"
    gpu = f"{f(hours.gpu)} GPU-h" + (f" [{f(lo.gpu)}, {f(hi.gpu)}]" if hours.gpu else "")
    return f"{cpu}, {gpu}"


def wall_line(fc: Forecast, ids: Sequence[str] | None = None) -> str:
    """``wall time ≈ 5m40s [3m40s, 7m40s] at max_concurrent=2``."""
    est, lo, hi = fc.wall_s(ids)
    return (
        f"wall time ≈ {fmt_duration(est)} [{fmt_duration(lo)}, {fmt_duration(hi)}] at "
        f"max_concurrent={fc.concurrency}"
    )


def forecast_lines(fc: Forecast, price: Price | None = None) -> list[str]:
    """What ``plan`` prints: the total (hours, their interval, money with a price, wall time) and
    per group of cells with one cost key, a run's forecast and its source."""
    runs = sum(c.runs for c in fc.cells.values())
    unknown = fc.unknown()
    notes = [f"forecast: {fc.note}"] if fc.note else []
    if len(unknown) == sum(1 for c in fc.cells.values() if c.runs):
        store = "the store not read" if fc.note else "no comparable finished runs in the store"
        return [
            *notes,
            f"forecast: none ({store}, and the backend times no training step here)",
        ]
    est, lo, hi = fc.total()
    money = est.money(price)
    paid = f" = {money_text(money, price)}" if money is not None and price else ""
    lines = [
        *notes,
        f"forecast: {hours_line(est, lo, hi)}{paid} for {runs - len(unknown)} runs; "
        + wall_line(fc),
    ]
    groups: dict[str, list[CellForecast]] = {}
    for c in fc.cells.values():
        groups.setdefault(c.key, []).append(c)
    for members in groups.values():
        first = members[0]
        who = "every cell" if len(groups) == 1 else _few([c.cell for c in members])
        if not first.known:
            lines.append(f"  {who}: no forecast")
            continue
        run = hours_of(first.resources, first.source.mean_s)
        lines.append(
            f"  {who}: {fmt_duration(first.source.mean_s)}, {hours_text(run)} a run"
            f" ({first.source.text()})"
        )
    if unknown:
        lines.append(f"  no forecast for {_few(unknown)}: not in the total")
    return lines


def _few(ids: list[str], shown: int = 4) -> str:
    more = f", ... ({len(ids)} cells)" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def status_lines(
    fc: Forecast, paid: Hours, open_ids: Sequence[str], price: Price | None
) -> list[str]:
    """What ``status`` prints under its table: the spend so far (``paid``, every attempt) and the
    forecast of the cells not yet done (``open_ids``)."""
    lines = [f"spent so far: {hours_text(paid, price)} ({paid.runs} runs)"]
    lines += [f"forecast: {fc.note}"] if fc.note else []
    todo = [c for c in fc.of(open_ids) if c.runs]
    if not todo:
        return [*lines, "forecast left: nothing (every cell done)"]
    est, lo, hi = fc.total(open_ids)
    money = est.money(price)
    more = f" = {money_text(money, price)}" if money is not None and price else ""
    missing = [c.cell for c in todo if not c.known]
    note = f"; no forecast for {_few(missing)}" if missing else ""
    return [
        *lines,
        f"forecast left: {hours_line(est, lo, hi)}{more} for {len(todo) - len(missing)} runs; "
        + wall_line(fc, open_ids)
        + note,
    ]
