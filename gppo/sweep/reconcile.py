"""What already ran, settled before a launch (or a tuner) drives anything.

Resume rules (the store is the source of truth; each run carries its cell's config hash):
- a cell with a run of the same hash tagged ``gppo.finished`` is done and never reruns;
- a RUNNING run whose Ray job is still PENDING/RUNNING is re-attached (no second copy starts);
- a RUNNING run whose job ended or never existed (launcher killed) is ended (FINISHED if it
  logged ``gppo.finished``, else FAILED with a note) and the cell is retried;
- a RUNNING run of an older hash (the cell's settings changed) is stopped and KILLED.
"""

from __future__ import annotations

from typing import Any

from gppo import metrics as M
from gppo.backends.base import get_backend
from gppo.cell import Cell
from gppo.store.state import ACTIVE_JOB as ACTIVE
from gppo.store.state import cell_state
from gppo.store.tracking import attempt_of, is_finished
from gppo.sweep.attempts import DONE, RUNNING, CellState
from gppo.sweep.dispatcher import Attempt, Dispatcher
from gppo.sweep.session import Session, SweepContext


def settle_orphan(
    ctx: Session, disp: Dispatcher, att: Attempt, run: Any, *, driver: str
) -> str | None:
    """One RUNNING run whose driver (a launcher, a tuner) is gone: its job's status (None when
    the cluster does not know the job); raises when the cluster does not answer.

    A PENDING/RUNNING job is left to the caller (re-attach or stop it). Otherwise the run is
    ended: FINISHED when its results are in (``gppo.finished``: the driver died before ending
    it), else as :meth:`Dispatcher.finish` ends it, noted ``interrupted``."""
    job = disp.status(att.submission_id)
    if job in ACTIVE:
        return job
    if is_finished(run):
        ctx.tracking.terminate(run.info.run_id, "FINISHED")
    else:
        seen = "was submitted" if job is None else f"was seen {job}"
        disp.finish(att, job or "FAILED", note=f"interrupted: {driver} ended before the job {seen}")
    return job


def reconcile(ctx: SweepContext, disp: Dispatcher, cells: list[Cell]) -> dict[str, CellState]:
    """Cell states from the store and the cluster (see the module docstring)."""
    reuse = get_backend(ctx.plan.spec.backend).reuse_run_on_retry
    groups = ctx.tracking.cell_runs(ctx.experiment_id, ctx.sweep_id)
    states: dict[str, CellState] = {}
    for cell in cells:
        st = CellState(cell)
        runs = groups.get(cell.id, [])
        st.attempt = max((attempt_of(r) for r in runs), default=0)
        h = cell.config_hash
        for run in runs:
            if run.info.status != "RUNNING":
                continue
            att = disp.attach(cell, run)
            if run.data.tags.get(M.TAG_CELL_HASH) != h:
                if disp.status(att.submission_id) in ACTIVE:
                    disp.stop(att.submission_id)
                ctx.tracking.set_tags(run.info.run_id, {M.TAG_FAILURE: "cell settings changed"})
                ctx.tracking.terminate(run.info.run_id, "KILLED")
                continue
            job = settle_orphan(ctx, disp, att, run, driver="launcher")
            if job in ACTIVE and st.current is None:
                att.status = job
                st.current, st.state, st.run_id = att, RUNNING, att.run_id
            elif job in ACTIVE:  # cannot happen with one launcher per sweep; be safe anyway
                disp.stop(att.submission_id)
                ctx.tracking.terminate(run.info.run_id, "KILLED")
        derived = cell_state(runs, h)  # orphans settled: RUNNING runs are the re-attached ones
        if st.current is None and derived.state is DONE:
            st.state, st.run_id = DONE, derived.run.info.run_id
        elif st.current is None and reuse and derived.run is not None:
            st.reuse_run = derived.run.info.run_id
        states[cell.id] = st
    return states
