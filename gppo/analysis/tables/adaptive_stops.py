"""Adaptive seeds in the reports: why each row of Table 1 stopped (issue 48).

The rounds (:class:`gppo.stats.rounds.Rounds`) are replayed on the runs' scores, as the
launcher replays them, so Table 1 (every format), the page and ``status`` say the same thing:

- :func:`cell_scores`: cell id -> the run's seed score (:func:`gppo.store.run_score.run_score`,
  what :mod:`gppo.sweep.running.seed_gate` reads), from the collected runs;
- :func:`label_stops`: each table's (axis point's) stops keyed by Table 1's row label
  (``tv/mc``, ``gspo``), the base model not in them (it is not part of the rounds);
- :func:`mark_table`: a Table 1 with its rows' stops: the column Stopped, Δ and its interval the
  design's (the repeated confidence interval at the row's last look), ``†`` where the rule
  separated the row, the fixed-n p-values dropped (not valid under repeated looks) and the note
  that says so (:func:`design_note`);
- :func:`stop_lines`: ``kl/atomic: separated at 4 seeds, Δ -3.1 [-5.9, -0.4]`` (``status``);
- :func:`runs_line`: ``adaptive seeds 2-8: 14 runs of at most 40`` (the page's summary).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pandas as pd

from gppo.analysis.data.tidy import axis_cell, axis_columns, label_of_cell
from gppo.analysis.tables.table1 import decimal_of
from gppo.analysis.tables.table1_model import Entry, Table1
from gppo.cell import Cell
from gppo.grid.sharing import run_groups, whole_groups
from gppo.stats.rounds import OPEN, Rounds, RowStop, point_text
from gppo.stats.sequential import Design
from gppo.store.state import State

#: where docs/statistics.md explains the rule
RULE_DOC = "docs/statistics.md#adaptive-seeds-the-rule"
CORRECTION_NAMES = {"holm": "Holm", "bonferroni": "Bonferroni"}


def failed_cells(runs: pd.DataFrame, scores: Mapping[str, float], retries: int) -> set[str]:
    """The cells without a score whose runs failed ``retries`` + 1 times (the spec's
    ``retries.max``): a seed with no retry left, which the rounds cannot have (issue 57;
    ``runs``: as :func:`cell_scores`; a function of the runs, as the launcher's own FAILED)."""
    if not len(runs) or "status" not in runs:
        return set()
    bad = runs[runs["status"] == State.FAILED.value]["cell_id"].astype(str).value_counts()
    return {str(c) for c, k in bad.items() if k > retries} - set(scores)


def cell_scores(runs: pd.DataFrame) -> dict[str, float]:
    """Per cell id with a DONE run: its seed score, in points (``runs``:
    :attr:`gppo.analysis.data.collect.Collected.runs`, whose ``seed_score`` is
    :func:`gppo.store.run_score.run_score` of the run, what :mod:`gppo.sweep.running.seed_gate` reads)."""
    if not len(runs) or "seed_score" not in runs:
        return {}
    done = runs[(runs["status"] == State.DONE.value) & runs["seed_score"].notna()]
    return {str(c): float(s) for c, s in zip(done["cell_id"], done["seed_score"], strict=True)}


def without_unneeded(
    tidy: pd.DataFrame, cells: Sequence[Cell], needed: Collection[str]
) -> pd.DataFrame:
    """``tidy`` without the pending rows (no run) of the cells the rounds did not need: they are
    not missing. ``needed``: the cells the rounds asked for (a cell whose run an identical
    needed cell's run serves is needed too)."""
    wanted = whole_groups(needed, run_groups(cells))
    unneeded = {
        (label_of_cell(c), int(c.seed), _point_key(c.axes)) for c in cells if c.id not in wanted
    }
    if not unneeded or not len(tidy):
        return tidy
    axes = axis_columns(tidy)
    keys = [
        (str(rec["cell"]), int(rec["seed"]), _point_key({a: rec[a] for a in axes}))
        for rec in tidy[["cell", "seed", *axes]].to_dict("records")
    ]
    pending = (tidy["status"] == State.PENDING.value).tolist()
    keep = [not (p and key in unneeded) for p, key in zip(pending, keys, strict=True)]
    return tidy[keep].reset_index(drop=True)


def _point_key(point: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """An axis point comparable between a cell's axes and a tidy row's axis columns (None:
    the axis does not move it)."""
    return tuple(sorted((k, axis_cell(v)) for k, v in point.items() if v is not None))


def label_stops(
    rounds: Rounds,
    scores: Mapping[str, float],
    left: Collection[str] = (),
    failed: Collection[str] = (),
) -> list[tuple[dict[str, Any], dict[str, RowStop]]]:
    """Each table's axis point and its rows' stops, keyed by Table 1's row label (``left``,
    ``failed``: :meth:`gppo.stats.rounds.Rounds.stops`)."""
    out = []
    for table, stops in zip(rounds.tables, rounds.stops(scores, left, failed), strict=True):
        labels = {r: label_of_cell(cells[0]) for r, cells in table.cells.items() if cells}
        out.append((table.point, {labels.get(r, r): s for r, s in stops.items()}))
    return out


def stops_at(
    found: Sequence[tuple[dict[str, Any], dict[str, RowStop]]], point: Mapping[str, object]
) -> dict[str, RowStop]:
    """The stops of the table at ``point`` (a Table 1's axis point, its values as tidy cells);
    none when no table of the rounds stands there."""
    for where, stops in found:
        if all(axis_cell(where.get(k)) == axis_cell(v) for k, v in point.items()):
            return stops
    return {}


def design_note(design: Design) -> str:
    """The note of an adaptive Table 1: whose intervals Δ shows, and where the rule is told."""
    correction = CORRECTION_NAMES.get(design.correction, design.correction)
    rows = design.rows or 1
    return (
        "Adaptive seeds "
        f"{design.min_seeds}-{design.max_seeds}: Δ and its interval are the row's at its last"
        " look (its seeds against the reference's first as many), intervals valid under the"
        f" adaptive design: repeated confidence intervals, {correction} over {rows}"
        f" row{'s' * (rows != 1)}, α={design.alpha:g}; {RULE_DOC}. A row stopped early shows"
        " a Δ biased away from 0 (it stopped because its Δ was far from 0 at that look); its"
        " interval stays valid. Δ is the row's mean over the n seeds named in Stopped minus the"
        " reference's mean over its first n; Avg. is over every seed of each row (the"
        " reference's up to the last look), so Avg. minus the reference's Avg. need not equal"
        " Δ. The base model is not part of the rounds: its Δ"
        " has no interval."
    )


def mark_table(table: Table1, stops: Mapping[str, RowStop], design: Design) -> None:
    """Give ``table``'s rows their stops (by row label): Δ and its interval the design's, ``†``
    where the rule separated the row; the fixed-n p-values (not valid under repeated looks) are
    dropped. Rows without a stop (the base model, not part of the rounds) keep Δ without an
    interval or mark."""
    table.adaptive = design_note(design)
    for block in table.blocks:
        for row in block.rows:
            stop = stops.get(row.cell)
            row.stop = stop
            row.p_value = row.p_adjusted = None
            row.significant = stop is not None and stop.status == "separated"
            if stop is None:
                row.delta = Entry(row.delta.mean, n=row.delta.n)
                continue
            lo, hi = stop.interval if stop.interval is not None else (None, None)
            row.delta = (
                Entry(None)
                if stop.delta is None
                else Entry(
                    decimal_of(stop.delta, table.precision),
                    decimal_of(lo, table.precision),
                    decimal_of(hi, table.precision),
                    n=stop.seeds,
                )
            )


def _pts(value: float) -> str:
    return f"{value:+.1f}" if round(value, 1) else "0.0"


def stop_line(row: str, stop: RowStop) -> str:
    """``kl/atomic: separated at 4 seeds, Δ -3.1 [-5.9, -0.4]``."""
    line = f"{row}: {stop.text()}"
    if stop.delta is not None and stop.reason != "same runs":
        line += f", Δ {_pts(stop.delta)}"
        if stop.interval is not None:
            line += f" [{stop.interval[0]:.1f}, {stop.interval[1]:.1f}]"
    return line


def stop_lines(
    rounds: Rounds, scores: Mapping[str, float], failed: Collection[str] = ()
) -> list[str]:
    """One line per row that has stopped (not open), each table's rows under its axis point;
    ``failed``: cells whose seed failed with no retry left (their rows: ``seed failed``)."""
    lines = []
    for table, stops in zip(rounds.tables, rounds.stops(scores, (), failed), strict=True):
        where = point_text(table.point)
        for row, stop in stops.items():
            if stop.status != OPEN:
                lines.append((f"{where}: " if where else "") + stop_line(row, stop))
    return lines


def runs_line(rounds: Rounds, runs: pd.DataFrame | None) -> str:
    """``adaptive seeds 2-8: 14 runs of at most 40`` (runs: the distinct runs that trained a
    cell; a cell served by an identical cell's run counts once, as the range does)."""
    d = rounds.design
    used = len({r for r in runs["run_id"] if r}) if runs is not None and len(runs) else 0
    most = rounds.runs_range()[1]
    return f"adaptive seeds {d.min_seeds}-{d.max_seeds}: {used} runs of at most {most}"
