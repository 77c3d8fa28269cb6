"""Open a sweep's side of the world (store, experiment, parent run, state dir, cluster), and
settle what already ran before a launch (or a tuner) drives anything.

A tuning study is a sweep too (:func:`open_session` with its own sweep id): the same store,
parent run, state dir, cluster and :class:`~gppo.sweep.running.dispatcher.Dispatcher`; only the grid
:class:`~gppo.grid.load.Plan` (the cells known up front) is the launcher's own
(:class:`SweepContext`).

Resume rules (:func:`reconcile`; the store is the source of truth; each run carries its cell's
config hash):
- a cell with a run of the same hash tagged ``gppo.finished`` is done and never reruns;
- a RUNNING run whose Ray job is still PENDING/RUNNING is re-attached (no second copy starts);
- a RUNNING run whose job ended or never existed (launcher killed) is ended (FINISHED if it
  logged ``gppo.finished``, else FAILED with a note) and the cell is retried
  (:func:`settle_orphan`, the tuner's rule for its trials too);
- a RUNNING run of an older hash (the cell's settings changed) is stopped and KILLED.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gppo import metrics as M
from gppo.backends.base import get_backend
from gppo.cell import Cell
from gppo.grid.load import Plan
from gppo.grid.schema import LocalHead
from gppo.processes import KILL_GRACE_S
from gppo.store.cost import attempt_cost
from gppo.store.state import ACTIVE_JOB as ACTIVE
from gppo.store.state import cell_state
from gppo.store.tracking import Tracking, attempt_of, is_finished, log_metrics
from gppo.store.uri import resolve_tracking_uri, state_root, store_exists

if TYPE_CHECKING:
    from gppo.store.tracking import Run
from gppo.sweep.cluster.connect import Cluster, ensure_cluster, local_head_for, stop_local_head
from gppo.sweep.running.attempts import DONE, RUNNING, CellState
from gppo.sweep.running.dispatcher import Attempt, Dispatcher


def state_dir_of(tracking_uri: str | None, sweep_id: str) -> Path:
    """``.gppo/<sweep id>`` next to the tracking store (cluster.json, launch.lock)."""
    return state_root(resolve_tracking_uri(tracking_uri)) / sweep_id


def sweep_state_dir(plan: Plan) -> Path:
    """``.gppo/<sweep id>`` next to the sweep's tracking store (cluster.json, launch.lock)."""
    return state_dir_of(plan.spec.tracking.uri, plan.sweep_id)


@dataclass
class Session:
    """One sweep's (or study's) store coordinates, state dir and cluster."""

    sweep_id: str
    tracking: Tracking
    experiment_id: str
    parent_run_id: str
    state_dir: Path
    cluster: Cluster | None

    def dispatcher(self, kill_grace_s: float = KILL_GRACE_S) -> Dispatcher:
        """The :class:`Dispatcher` of this sweep's jobs (needs a cluster); ``kill_grace_s``:
        the spec's ``retries.kill_grace_s``."""
        assert self.cluster is not None
        return Dispatcher(
            self.cluster,
            self.tracking,
            experiment_id=self.experiment_id,
            parent_run_id=self.parent_run_id,
            sweep_id=self.sweep_id,
            kill_grace_s=kill_grace_s,
        )

    def close(self, status: str, meanwhile: Callable[[], None] | None = None) -> None:
        """End the parent run as ``status`` and stop the local head this sweep started;
        ``meanwhile`` (e.g. the sweep's report) runs while the head shuts down (a second or two
        of its processes exiting), in this thread."""
        self.tracking.terminate(self.parent_run_id, status)
        stopping = None
        if self.cluster is not None and self.cluster.local:
            stopping = threading.Thread(target=stop_local_head, args=(self.state_dir,))
            stopping.start()
        try:
            if meanwhile is not None:
                meanwhile()
        finally:
            if stopping is not None:
                stopping.join()


@dataclass
class SweepContext(Session):
    """What the launcher needs for one grid sweep: the session and its plan."""

    plan: Plan


def open_session(
    tracking_uri: str | None,
    experiment: str,
    sweep_id: str,
    *,
    address: str | None = None,
    start_cluster: bool = True,
    local_head: LocalHead | None = None,
    stop_grace_s: float | None = None,
) -> Session:
    """Create the store's schema, the experiment and the parent run; attach/start Ray
    (``stop_grace_s``: a new local head's grace for a stopped job, ``retries.kill_grace_s``)."""
    tracking = Tracking(tracking_uri)
    tracking.init_store()
    exp = tracking.experiment_id(experiment)
    assert exp is not None
    parent = tracking.sweep_run(exp, sweep_id)
    assert parent is not None
    state_dir = state_dir_of(tracking_uri, sweep_id)
    state_dir.mkdir(parents=True, exist_ok=True)
    cluster = ensure_cluster(
        address, state_dir, start=start_cluster, local_head=local_head, stop_grace_s=stop_grace_s
    )
    return Session(sweep_id, tracking, exp, parent, state_dir, cluster)


def open_sweep(
    plan: Plan, *, address: str | None = None, start_cluster: bool = True
) -> SweepContext:
    """:func:`open_session` for a grid sweep (its spec's store, experiment and cluster)."""
    spec = plan.spec
    session = open_session(
        spec.tracking.uri,
        spec.experiment,
        plan.sweep_id,
        address=address or spec.ray.address,
        start_cluster=start_cluster,
        local_head=local_head_for(spec, plan.cells),
        stop_grace_s=spec.retries.kill_grace_s,
    )
    record_overrides(session, plan)
    return SweepContext(**vars(session), plan=plan)


def record_overrides(session: Session, plan: Plan) -> None:
    """The command line's spec overrides of this launch on the parent run (tag
    ``gppo.spec_overrides``, as typed; emptied by a launch without any)."""
    text = shlex.join(plan.overrides)
    if (
        text
        or M.TAG_SPEC_OVERRIDES in session.tracking.client.get_run(session.parent_run_id).data.tags
    ):
        session.tracking.set_tags(session.parent_run_id, {M.TAG_SPEC_OVERRIDES: text})


def read_sweep(plan: Plan) -> tuple[Tracking, str] | None:
    """(tracking, experiment id) of an existing sweep, touching nothing; None if absent."""
    uri = resolve_tracking_uri(plan.spec.tracking.uri)
    if not store_exists(uri):
        return None
    tracking = Tracking(uri)
    exp = tracking.experiment_id(plan.spec.experiment, create=False)
    return None if exp is None else (tracking, exp)


def settle_orphan(
    ctx: Session, disp: Dispatcher, att: Attempt, run: Run, *, driver: str
) -> str | None:
    """One RUNNING run whose driver (a launcher, a tuner) is gone: its job's status (None when
    the cluster does not know the job); raises when the cluster does not answer.

    A PENDING/RUNNING job is left to the caller (re-attach or stop it). Otherwise the run is
    ended: FINISHED when its results are in (``gppo.finished``: the driver died before ending
    it; its attempt's cost logged up to the job's end as Ray recorded it), else as :meth:`Dispatcher.finish` ends it, noted ``interrupted``."""
    job = disp.status(att.submission_id)
    if job in ACTIVE:
        return job
    if is_finished(run):
        # the attempt's cost to the job's end as Ray recorded it (it ended unwatched); no end
        # time (Ray forgot the job): none is billed rather than the hours since
        ended = disp.ended_at(att.submission_id) if job is not None else None
        cost = attempt_cost(run.data.metrics, ended - att.submitted_at) if ended else {}
        if cost:
            log_metrics(ctx.tracking.client, run.info.run_id, cost, step=0)
        ctx.tracking.terminate(run.info.run_id, "FINISHED")
    else:
        seen = "was submitted" if job is None else f"was seen {job}"
        disp.finish(att, job or "FAILED", note=f"interrupted: {driver} ended before the job {seen}")
    return job


def reconcile(ctx: SweepContext, disp: Dispatcher, cells: list[Cell]) -> dict[str, CellState]:
    """Cell states from the store and the cluster (the resume rules of the module docstring)."""
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
        if st.current is None and derived.state is DONE and derived.run is not None:
            st.state, st.run_id = DONE, derived.run.info.run_id
        elif st.current is None and reuse and derived.run is not None:
            st.reuse_run = derived.run.info.run_id
        states[cell.id] = st
    return states
