"""What a launch hands back (:class:`LaunchResult`), and how it ends: the sweep's
:class:`~gppo.store.state.SweepRef`, the parent run closed, the ``after_sweep`` hook's report."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gppo import metrics as M
from gppo.store.state import State, SweepRef
from gppo.store.tracking import store_exception
from gppo.sweep.running.attempts import DONE, RUNNING, CellState
from gppo.sweep.session import SweepContext

log = logging.getLogger(__name__)

#: called as ``hook(plan, ref)`` (:class:`~gppo.store.state.SweepRef`) once every cell has finished;
#: what it returns is kept as :attr:`LaunchResult.report` (the CLI passes the report writer)
AfterSweep = Callable[..., Any]


@dataclass
class LaunchResult:
    """What a launch did: each cell's :class:`CellState` (keyed by cell id), whether it was
    interrupted or left its jobs running (``detached``), the sweep's :class:`SweepRef` (``ref``:
    hand it to :func:`gppo.analysis.write_report`) and the ``after_sweep`` hook's report."""

    sweep_id: str
    cells: dict[str, CellState] = field(default_factory=dict)
    interrupted: bool = False
    detached: bool = False
    #: another launcher took the sweep over (its lease, a server store): its jobs are left to it
    lost: bool = False
    #: where the sweep's runs are (set once the store is open)
    ref: SweepRef | None = None
    #: what the ``after_sweep`` hook returned (the report), when it ran
    report: Any = None
    #: the cells the budget left pending, with why (gppo.sweep.planning.budget); a relaunch with a larger
    #: budget runs them
    left: dict[str, str] = field(default_factory=dict)
    #: adaptive seeds: the cells the rounds have not asked for (:mod:`gppo.sweep.running.
    #: seed_gate`); a sweep is complete without them
    held: set[str] = field(default_factory=set)
    #: the held cells no later round will ask for, with why: ``unneeded`` (their row was decided)
    #: or ``row failed`` (their row stopped on a seed that failed with no retry left)
    idle: dict[str, str] = field(default_factory=dict)

    @property
    def unneeded(self) -> set[str]:
        """The cells whose rows the adaptive rule decided: their seeds were not needed."""
        return {cid for cid, why in self.idle.items() if why == "unneeded"}

    def count(self, state: State) -> int:
        return sum(1 for c in self.cells.values() if c.state == state)

    @property
    def ok(self) -> bool:
        """Every cell done, left by the budget or not needed by the adaptive rounds (what ran is
        reported; exit 0)."""
        return bool(self.cells) and all(
            c.state == DONE or cid in self.left or cid in self.held for cid, c in self.cells.items()
        )


def close_launch(
    ctx: SweepContext,
    result: LaunchResult,
    on_update: Callable[[LaunchResult], None],
    after_sweep: AfterSweep | None,
) -> None:
    """The launch's end: a lost sweep (``result.lost``) is left to its new launcher; else the
    result gets its ``ref`` and, with no job left running, the parent run ends FINISHED, KILLED
    or FAILED and the local head this sweep started stops while ``on_update`` and the report
    run. ``after_sweep`` runs only when every cell is done."""
    if result.lost:  # the sweep belongs to another launcher now: end nothing of it
        on_update(result)
        return
    runs = {cid: st.run_id for cid, st in result.cells.items() if st.run_id}
    running = any(c.state == RUNNING for c in result.cells.values())
    ended = not running and (result.ok or bool(result.left))
    result.ref = SweepRef(
        ctx.sweep_id, ctx.tracking.uri, ctx.experiment_id, ctx.parent_run_id, runs, ended=ended
    )
    _record_budget_left(ctx, bool(result.left) and not running)

    def report() -> None:
        on_update(result)
        if result.ok and after_sweep is not None:
            run_after_sweep_hook(ctx, result, after_sweep)

    if running:
        report()
        return
    status = "FINISHED" if result.ok else ("KILLED" if result.interrupted else "FAILED")
    ctx.close(status, meanwhile=report)  # the report is written while the local head stops


def _record_budget_left(ctx: SweepContext, left: bool) -> None:
    """Say on the parent run whether this launch ended with cells its budget left
    (:data:`gppo.metrics.TAG_BUDGET_LEFT`); a store error costs only that later report's words."""
    try:
        ctx.tracking.set_tags(ctx.parent_run_id, {M.TAG_BUDGET_LEFT: str(left).lower()})
    except (store_exception(), OSError) as exc:
        log.warning("the budget's end not recorded on the sweep's run (the store: %s)", exc)


def run_after_sweep_hook(ctx: SweepContext, result: LaunchResult, hook: AfterSweep) -> None:
    """Call ``hook`` (the CLI passes the report writer); never fails the launch."""
    try:
        result.report = hook(ctx.plan, result.ref)
    except Exception as exc:
        log.warning("after-sweep hook failed: %s", exc)
