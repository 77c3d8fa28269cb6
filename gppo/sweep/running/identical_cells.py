"""Identical cells run once: the launcher's side of :mod:`gppo.grid.sharing`.

A group of cells that are one run (:func:`gppo.grid.sharing.run_groups`) submits one job per
launch round at most: the **runner**, the group's lead (its first cell in plan order), or a
member whose run is already under way (re-attached on resume). The other members wait without
a job and never count against ``max_concurrent`` or the retries. When one member has a finished
run of its own, every open member is recorded as served by it
(:func:`gppo.store.same_runs.record_same_runs`: a FINISHED run with the source's metrics and
``gppo.same_runs``), and is DONE. When the runner fails for good, the waiting members fail with
it, saying whose run failed; a relaunch retries the runner once for the whole group.

Resume needs one step of its own: a follower's run that a killed launcher left mid-copy is
deleted before the sweep's runs are read (:meth:`SameRuns.drop_partial`), so the follower is
absent and recorded again, never failed with its lead's job. Otherwise: a follower with its
recorded run is DONE by the ordinary rules
(:func:`gppo.sweep.session.reconcile`: a finished run of its config hash); a follower whose
lead finished while the launcher was gone is recorded at the first round; an interrupted shared
run is settled and retried once, as the runner's (no follower ever has a job to retry). A group
of one cell is untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gppo.cell import Cell
from gppo.grid.sharing import run_groups, run_key
from gppo.store.same_runs import drop_partial_copies, record_same_runs, source_of
from gppo.sweep.running.attempts import (
    DONE,
    ENDING,
    FAILED,
    PENDING,
    RUNNING,
    WAITING,
    CellState,
    Event,
)
from gppo.sweep.session import Session

#: a member that may still be served: it has no job of its own
_WAITING = (PENDING, WAITING)
_BUSY = (RUNNING, ENDING)


class SameRuns:
    """The groups of a launch's cells that share runs (``groups`` of two or more cells)."""

    def __init__(self, cells: Sequence[Cell]) -> None:
        self.groups = [g for g in run_groups(cells) if len(g) > 1]
        self._group = {c.id: g for g in self.groups for c in g}

    @staticmethod
    def drop_partial(ctx: Session) -> list[str]:
        """Before a launch reads the sweep's runs: delete the follower runs a killed launcher
        left mid-copy (:func:`~gppo.store.same_runs.drop_partial_copies`; recorded again at
        the first round); their ids."""
        return drop_partial_copies(ctx.tracking, ctx.experiment_id, ctx.sweep_id)

    def follows(self, cell_id: str) -> str | None:
        """The cell whose run serves ``cell_id`` (its group's lead), None for a lead or a cell
        that runs alone."""
        g = self._group.get(cell_id)
        return None if g is None or g[0].id == cell_id else g[0].id

    def may_start(self, st: CellState, states: Mapping[str, CellState]) -> bool:
        """Whether ``st``'s cell may submit a job now: it runs alone, or it is its group's
        runner (no member busy or done, and it is the first member still waiting)."""
        g = self._group.get(st.cell.id)
        if g is None:
            return True
        members = [states[c.id] for c in g if c.id in states]
        if any(m.state in (*_BUSY, DONE) for m in members):
            return False
        runner = next((m for m in members if m.state in _WAITING), None)
        return runner is st

    def settle(
        self,
        ctx: Session,
        states: Mapping[str, CellState],
        emit: Callable[[Event], None],
    ) -> None:
        """Serve every waiting member of a group that has a finished run (record it); fail the
        waiting members of a group whose runner failed for good."""
        for g in self.groups:
            members = [states[c.id] for c in g if c.id in states]
            waiting = [m for m in members if m.state in _WAITING]
            if not waiting or any(m.state in _BUSY for m in members):
                continue
            done = next((m for m in members if m.state is DONE and m.run_id), None)
            if done is not None and done.run_id:
                source = source_of(ctx.tracking.get_run(done.run_id))
                for m in waiting:
                    self._serve(ctx, m, source, done.cell.id, emit)
                continue
            failed = next((m for m in members if m.state is FAILED), None)
            if failed is not None and not self.may_start_any(members):
                for m in waiting:
                    m.state, m.note = FAILED, f"its runs' cell {failed.cell.id} failed"
                    emit(Event("failed", m.cell.id, m.attempt, reason=m.note, note="same runs"))

    @staticmethod
    def may_start_any(members: Sequence[CellState]) -> bool:
        """Whether the group's runner is still to run (its first waiting member is its lead, or
        its lead is waiting): a failed member that is not the lead leaves the lead to run."""
        return bool(members) and members[0].state in _WAITING

    @staticmethod
    def _serve(
        ctx: Session, m: CellState, source: str, by: str, emit: Callable[[Event], None]
    ) -> None:
        m.attempt += 1
        m.run_id = record_same_runs(
            ctx.tracking, ctx.experiment_id, ctx.parent_run_id, ctx.sweep_id, m.cell, source,
            attempt=m.attempt, run_key=run_key(m.cell),
        )  # fmt: skip
        m.state, m.current, m.note = DONE, None, f"same runs as {by}"
        emit(Event("shared", m.cell.id, m.attempt, note=m.note))
