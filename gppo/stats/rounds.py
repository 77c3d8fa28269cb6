"""Adaptive seeds on a plan: the rounds of ``seeds: {min, max}`` (issue 48), replayed from the
runs' scores.

A plan's cells form one table per axis point (a cell that an axis does not move stands in every
table); a table's rows are its cells over seeds (``tv/mc``, ``gspo``), one of them the spec's
reference. :func:`replay` plays the rule of :mod:`gppo.stats.sequential` look by look on the
scores there are (a run's avg@k averaged over its benchmarks, in points): each look needs the
rows still open and the reference at the look's seed count; a look whose seeds have all finished
is decided and the next one begins; the first look with a seed missing is the round under way,
and its seeds are the ones :meth:`Rounds.wanted` lets the launcher start.

**The state is the data.** Nothing about the rounds is stored: a relaunched launcher (after a
kill -9) replays the same looks on the same finished runs, so it wants exactly the seeds the last
one wanted, a finished seed is never run again (its run is reused) and no round is lost. The
report replays the same way, so Table 1, the page, ``status`` and the launch agree on why each
row stopped.

A row's stop (:class:`RowStop`): ``separated``, ``equivalent`` (within ``seeds.equivalence``),
``futile`` (reason ``futility``: a separation by max improbable; ``max``: neither at max), or
still ``open`` (the launch has not finished its round, or the budget left its seeds pending:
``budget``). A row that is the reference's own runs (``chi2/mc`` beside ``tv/mc``) is equivalent
by ``same runs``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gppo.cell import Cell
from gppo.grid.sharing import run_key
from gppo.stats.inference import DEFAULT_TEST
from gppo.stats.sequential import CONTINUE, STATUS_NAMES, Design, RowDecision, decide

if TYPE_CHECKING:
    from gppo.grid.load import Plan
    from gppo.grid.schema import GridSpec

#: a row not yet decided (its round under way, or left by the budget)
OPEN = "open"
#: the reason of an open row whose next seeds the budget left pending
BUDGET = "budget"
#: a row stopped by a seed that failed with no retry left (issue 57): its status, its reasons
FAILED = "failed"
SEED_FAILED = "seed failed"
REFERENCE_FAILED = "reference seed failed"
#: why a cell the rounds do not ask for will not run (:meth:`Rounds.idle`): its row was decided
#: by the rule, or it stopped on a seed that failed with no retry left
UNNEEDED = "unneeded"
ROW_FAILED = "row failed"


def design_of(spec: GridSpec, rows: int | None = None) -> Design:
    """The :class:`~gppo.stats.sequential.Design` of a spec's ``seeds: {min, max, batch,
    equivalence}`` and ``analysis.test`` (``rows``: the correction's family, the rows compared
    with the reference)."""
    a = spec.adaptive
    if a is None:
        raise ValueError("the spec has a fixed seeds count or list, not seeds: {min, max}")
    analysis = getattr(spec, "analysis", None)
    test = analysis.test if analysis is not None else DEFAULT_TEST
    return Design(
        min_seeds=a.min, max_seeds=a.max, batch=a.batch, margin=a.equivalence, rows=rows,
        test=test,
    )  # fmt: skip


def row_of(cell: Cell) -> str:
    """The table row of a cell: ``divergence/estimator`` for a grid cell, else its method."""
    return f"{cell.divergence}/{cell.estimator}" if cell.divergence else cell.method


def point_text(point: Mapping[str, object]) -> str:
    """``lr=0.0001, steps=60``; empty without axes."""
    return ", ".join(f"{k}={v}" for k, v in sorted(point.items()))


@dataclass(frozen=True)
class RowStop:
    """Why a row stopped (or that it goes on): ``status`` (separated | equivalent | futile |
    open | failed), ``reason`` (bound | futility | max | same runs | budget | seed failed |
    reference seed failed | ""), its seeds, Δ̂ in points
    and the interval valid under the design (None before the first look or without spread)."""

    status: str
    reason: str
    seeds: int
    delta: float | None = None
    interval: tuple[float, float] | None = None

    @classmethod
    def of(cls, d: RowDecision) -> RowStop:
        status = OPEN if d.status == STATUS_NAMES[CONTINUE] else d.status
        return cls(status, d.reason, d.n, d.delta, d.interval)

    def text(self) -> str:
        """``separated at 4 seeds``, ``not separable within max (8 seeds)``, ``open (3 seeds)``."""
        s = f"{self.seeds} seed{'s' * (self.seeds != 1)}"
        if self.status == "futile":
            return f"not separable within max ({s})" if self.reason == "max" else f"futile at {s}"
        if self.status == OPEN:
            return f"left by the budget at {s}" if self.reason == BUDGET else f"open ({s})"
        if self.status == FAILED:  # no retry left: the row cannot be decided
            return f"{self.reason} at {s}: not decided"
        if self.reason == "same runs":
            return "equivalent: the reference's own runs"
        return f"{self.status} at {s}"


@dataclass
class TableRounds:
    """One table's rounds: its axis ``point``, its rows' cells by seed (``cells[row][i]``: the
    cell of the row's i-th seed of ``seed_list``), the reference row and the rows run on the
    reference's own runs (``same``)."""

    point: dict[str, Any]
    cells: dict[str, list[Cell]]
    reference: str
    same: frozenset[str] = frozenset()

    def replay(
        self, design: Design, scores: Mapping[str, float], failed: Collection[str] = ()
    ) -> tuple[dict[str, RowStop], set[str], int]:
        """The looks played on ``scores`` (cell id -> points): each row's stop, the cells the
        round under way needs (and every cell an earlier look used), the looks completed. The
        correction's family is this table's rows compared with the reference (one axis point;
        a row on the reference's own runs is none), as Table 1's
        (:func:`gppo.analysis.tables.table1.comparison_family`).

        ``failed``: cells whose seed failed with no retry left (issue 57): a row with such a
        seed among a look's stops there as ``failed`` (reason ``seed failed``), leaves the
        family, and the other rows' looks go on; a failed reference seed stops every open row
        of the table (``reference seed failed``). A seed still missing otherwise (running, or
        waiting for its retry) holds the look, so that every replay of the same finished runs
        agrees; no row is decided by a seed that has not finished."""
        ref = self.cells[self.reference]
        others = [r for r in self.cells if r != self.reference]
        compared = len(others) - len(self.same)
        stops: dict[str, RowStop] = {}
        decided: dict[str, str] = {}
        used_n: dict[str, int] = {}
        gone: set[str] = set()  # rows stopped by a failed seed
        wanted: set[str] = set()
        lost = set(failed) - set(scores)
        for j, look in enumerate(design.looks):
            active = [r for r in others if r not in decided and r not in self.same | gone]
            for r in [self.reference, *active]:
                wanted |= {c.id for c in self.cells[r][:look]}
            if any(c.id in lost for c in ref[:look]):  # the reference cannot be had: stuck
                for r in active:
                    have = sum(c.id in scores for c in self.cells[r][:look])
                    last = _last(stops.get(r))
                    stops[r] = RowStop(FAILED, REFERENCE_FAILED, have, *last)
                return stops, wanted, j
            for r in active:
                if any(c.id in lost for c in self.cells[r][:look]):
                    have = sum(c.id in scores for c in self.cells[r][:look])
                    stops[r] = RowStop(FAILED, SEED_FAILED, have, *_last(stops.get(r)))
                    gone.add(r)
            active = [r for r in active if r not in gone]
            missing = [
                c for r in [self.reference, *active] for c in self.cells[r][:look]
                if c.id not in scores
            ]  # fmt: skip
            if missing:
                for r in active:
                    have = sum(c.id in scores for c in self.cells[r][:look])
                    stops[r] = RowStop(OPEN, "", have, *_last(stops.get(r)))
                return stops, wanted, j
            if not others:  # the reference alone: nothing to compare, min seeds and done
                return stops, wanted, j + 1
            if not active and not decided and len(gone) + len(self.same) == len(others):
                return stops, wanted, j  # every compared row lost to a failed seed
            ref_scores = [scores[c.id] for c in ref[:look]]
            rows = {
                r: ref_scores if r in self.same else
                [scores[c.id] for c in self.cells[r][: used_n.get(r, look)]]
                for r in others if r not in gone
            }  # fmt: skip
            # the family: the rows compared that a failed seed has not taken out
            at = replace(design, rows=max(compared - len(gone), 1))
            rnd = decide(rows, ref_scores, at, decided=decided, same_runs=self.same)
            for r, d in rnd.rows.items():
                if r in decided:
                    continue
                stops[r] = RowStop.of(d)
                if stops[r].status != OPEN:
                    decided[r], used_n[r] = d.status, d.n
            if rnd.done:
                return stops, wanted, j + 1
        return stops, wanted, len(design.looks)


def _last(stop: RowStop | None) -> tuple[float | None, tuple[float, float] | None]:
    """An open row keeps the Δ̂ and interval of its last completed look."""
    return (None, None) if stop is None else (stop.delta, stop.interval)


def tables_of(cells: Sequence[Cell], seeds: Sequence[int], reference: str) -> list[TableRounds]:
    """The plan's tables, one per axis point (cells not moved by an axis stand in every table)."""
    index = {s: i for i, s in enumerate(seeds)}
    paths = sorted({k for c in cells for k in c.axes})
    points: list[dict[str, Any]] = []
    for c in cells:
        if set(c.axes) == set(paths) and c.axes not in points:
            points.append(dict(c.axes))
    tables = []
    for point in points or [{}]:
        rows: dict[str, list[Cell | None]] = {}
        for c in cells:
            if all(point.get(k) == v for k, v in c.axes.items()):
                rows.setdefault(row_of(c), [None] * len(seeds))[index[c.seed]] = c
        full = {r: [c for c in cs if c is not None] for r, cs in rows.items()}
        if reference not in full:
            raise ValueError(f"no cells of the reference {reference!r} at {point_text(point)}")
        ref_keys = [run_key(c) for c in full[reference]]
        same = frozenset(
            r for r, cs in full.items() if r != reference and [run_key(c) for c in cs] == ref_keys
        )
        tables.append(TableRounds(point, full, reference, same))
    return tables


@dataclass
class Rounds:
    """A plan's adaptive rounds: its tables and design. :meth:`wanted` answers the launcher
    (which cells may start), :meth:`stops` the reports (why each row stopped)."""

    design: Design
    tables: list[TableRounds]

    @classmethod
    def of_plan(cls, plan: Plan) -> Rounds:
        """The rounds of an adaptive plan (``plan.spec.seeds`` is ``{min, max}``)."""
        spec = plan.spec
        tables = tables_of(plan.cells, spec.seed_list, spec.reference)
        compared = max(len(t.cells) - 1 - len(t.same) for t in tables)
        return cls(design_of(spec, rows=max(compared, 1)), tables)

    def wanted(self, scores: Mapping[str, float], failed: Collection[str] = ()) -> set[str]:
        """The cells the rounds need so far (finished or not): the union over the tables;
        ``failed``: cells whose seed failed with no retry left (:meth:`TableRounds.replay`)."""
        out: set[str] = set()
        for t in self.tables:
            out |= t.replay(self.design, scores, failed)[1]
        return out

    def idle(self, scores: Mapping[str, float], failed: Collection[str] = ()) -> dict[str, str]:
        """The cells the rounds do not ask for and never will, with why: :data:`UNNEEDED` (the
        rule decided its row: separated, equivalent, futile, the reference's own runs) or
        :data:`ROW_FAILED` (its row, or the reference, stopped on a failed seed). A cell of a row
        still open is not idle: a later round may need it. A cell standing in several tables is
        idle only where every table leaves it; failed where any of them stopped on a failure."""
        verdicts: dict[str, set[str]] = {}
        for t in self.tables:
            stops, wanted, _ = t.replay(self.design, scores, failed)
            compared = [stops.get(r) for r in t.cells if r != t.reference and r not in t.same]
            open_rows = any(s is None or s.status == OPEN for s in compared)
            ref_lost = any(s is not None and s.reason == REFERENCE_FAILED for s in compared)
            for r, cs in t.cells.items():
                if r == t.reference or r in t.same:  # needed while a compared row is open
                    status = OPEN if open_rows else FAILED if ref_lost else ""
                else:
                    stop = stops.get(r)
                    status = OPEN if stop is None else stop.status
                for c in cs:
                    if c.id not in wanted:
                        verdicts.setdefault(c.id, set()).add(status)
        out: dict[str, str] = {}
        for cid, seen in verdicts.items():
            if OPEN not in seen:
                out[cid] = ROW_FAILED if FAILED in seen else UNNEEDED
        return out

    def stops(
        self,
        scores: Mapping[str, float],
        left: Collection[str] = (),
        failed: Collection[str] = (),
    ) -> list[dict[str, RowStop]]:
        """Each table's rows' stops; an open row one of whose next cells is in ``left`` (the
        budget's) is ``open`` for the ``budget``; ``failed`` as :meth:`wanted`."""
        out = []
        for t in self.tables:
            stops, wanted, _ = t.replay(self.design, scores, failed)
            for r, s in stops.items():
                if s.status == OPEN and any(c.id in left for c in t.cells[r] if c.id in wanted):
                    stops[r] = RowStop(OPEN, BUDGET, s.seeds, s.delta, s.interval)
            out.append(stops)
        return out

    def cell_texts(
        self,
        scores: Mapping[str, float],
        left: Collection[str] = (),
        failed: Collection[str] = (),
    ) -> dict[str, str]:
        """For every cell with a score: why its row stopped (:meth:`RowStop.text`; a cell
        standing in several tables: each point's, ``lr=0.0001: ...; lr=0.0003: ...``)."""
        out: dict[str, list[str]] = {}
        for t, stops in zip(self.tables, self.stops(scores, left, failed), strict=True):
            where = f"{point_text(t.point)}: " if t.point else ""
            for r, cs in t.cells.items():
                stop = stops.get(r) if r != t.reference else None
                text = stop.text() if stop is not None else "the reference"
                for c in cs:
                    if c.id in scores:
                        out.setdefault(c.id, []).append(where + text)
        return {cid: "; ".join(texts) for cid, texts in out.items()}

    def runs_range(self) -> tuple[int, int]:
        """The fewest and the most runs the rounds can take: every row decided at its first look
        (``min`` seeds a cell), every row run to ``max`` (cells sharing a run count once)."""
        lo: set[str] = set()
        hi: set[str] = set()
        for t in self.tables:
            for r, cs in t.cells.items():
                if r in t.same:
                    continue
                lo |= {run_key(c) for c in cs[: self.design.min_seeds]}
                hi |= {run_key(c) for c in cs[: self.design.max_seeds]}
        return len(lo), len(hi)

    def first_round(self) -> list[str]:
        """The cells of the first round (``min`` seeds each), in plan order."""
        first = (
            c.id
            for t in self.tables
            for cs in t.cells.values()
            for c in cs[: self.design.min_seeds]
        )
        return list(dict.fromkeys(first))
