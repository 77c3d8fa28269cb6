"""``status``, ``logs`` and ``cancel``: read the sweep from MLflow and its Ray cluster.

``status`` and ``logs`` write nothing (no store is created, no run changed, no cluster started).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gppo import metrics as M
from gppo.errors import ClusterUnreachable
from gppo.grid.load import Plan
from gppo.grid.sharing import run_groups, whole_groups
from gppo.store.cost import spent
from gppo.store.follower import costs_nothing
from gppo.store.health import failure_line, node_refusal, what_to_grant
from gppo.store.run_score import run_score
from gppo.store.state import ACTIVE_JOB, State, cell_state, run_state
from gppo.store.tracking import attempt_of, latest_metric
from gppo.sweep.cluster.connect import Cluster, ensure_cluster, last_temp_dir, stop_local_head
from gppo.sweep.cluster.ray_http import JOBS_API_ERRORS
from gppo.sweep.running.dispatcher import log_file
from gppo.sweep.session import read_sweep, sweep_state_dir

if TYPE_CHECKING:
    from gppo.stats.rounds import Rounds

log = logging.getLogger(__name__)


@dataclass
class CellStatus:
    cell: str
    state: State  # PENDING, RUNNING, DONE, FAILED, STOPPED or INTERRUPTED (gppo.store.state)
    attempt: int | None = None
    step: int | None = None
    score: float | None = None
    eval_score: float | None = None
    run_id: str | None = None
    job_id: str | None = None
    job_status: str | None = None
    #: why the latest failed attempt of this cell failed (first line of ``gppo.failure``)
    last_failure: str | None = None
    #: what the cell's runs have cost so far, every attempt (gppo.store.cost; None: nothing yet)
    cpu_hours: float | None = None
    gpu_hours: float | None = None
    #: what to do when the tracking server refused the cell's node (what to grant to whom)
    fix: str | None = None
    #: a DONE cell's avg@k averaged over its benchmarks, in points (adaptive seeds' score)
    seed_score: float | None = None
    #: adaptive seeds: a pending cell no later round will ask for, with why (``unneeded``: its
    #: row was decided; ``row failed``: its row stopped on a failed seed); None otherwise
    idle: str | None = None

    @property
    def unneeded(self) -> bool:
        """A pending cell the adaptive rounds will not ask for (its row decided or failed)."""
        return self.idle is not None

    @property
    def shown_state(self) -> str:
        """The state as ``status`` shows it: ``unneeded`` or ``row failed`` for a cell the
        rounds will not ask for."""
        return self.idle or self.state.value

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        del out["seed_score"], out["idle"]
        out["state"] = self.idle or self.state
        return out


def _cluster(plan: Plan, address: str | None) -> Cluster | None:
    """The sweep's cluster when it is up (its recorded local head, or ``address``), else None."""
    try:
        return ensure_cluster(address or plan.spec.ray.address, sweep_state_dir(plan), start=False)
    except (OSError, TypeError, ValueError) as exc:  # an unreadable or malformed record
        log.warning("%s: no cluster read (%s): job states not shown", plan.sweep_id, exc)
        return None


def _job_status(client: Any, sid: str) -> str | None:
    if client is None or not sid:
        return None
    try:
        return str(client.get_job_status(sid).value)
    except JOBS_API_ERRORS as exc:  # the job is gone, or the cluster stopped answering
        log.info("job %s: no status from the Jobs API (%s)", sid, exc)
        return None


def sweep_status(plan: Plan, *, address: str | None = None) -> list[CellStatus]:
    """Per cell: state, latest attempt, step, latest train score, final eval, run id.

    Adaptive seeds: :class:`gppo.stats.rounds.Rounds`, asked with the DONE cells' scores, says
    the cells the rounds need so far; a pending cell outside them (and outside the group of
    identical cells of one of them) is ``unneeded``."""
    opened = read_sweep(plan)
    groups = opened[0].cell_runs(opened[1], plan.sweep_id) if opened else {}
    cluster = _cluster(plan, address) if opened else None
    client = None
    if cluster is not None:
        client = _client(cluster)
    out = []
    k = plan.spec.eval.k

    @functools.cache
    def job(sid: str) -> str | None:
        return _job_status(client, sid)

    for cell in plan.cells:
        runs = groups.get(cell.id, [])
        derived = cell_state(runs, cell.config_hash, job)
        run = derived.run
        if run is None:
            out.append(CellStatus(cell.id, derived.state))
            continue
        sid = run.data.tags.get(M.TAG_RAY_JOB_ID, "")
        st = CellStatus(cell.id, derived.state, attempt_of(run), run_id=run.info.run_id, job_id=sid)
        if derived.state in (State.RUNNING, State.INTERRUPTED):
            st.job_status = job(sid)
        same = [r for r in runs if r.data.tags.get(M.TAG_CELL_HASH) == cell.config_hash]
        failed = [r for r in same if r.info.status in ("FAILED", "KILLED")]
        if failed:
            failure = (failed[-1].data.tags.get(M.TAG_FAILURE) or "").strip()
            st.last_failure = failure_line(failure) or None  # a cell refused by MLflow: why
            refused = node_refusal(failure)
            if refused:
                if refused not in (st.last_failure or ""):
                    st.last_failure = f"{st.last_failure}: {refused}"
                st.fix = what_to_grant(refused, plan.spec.experiment, opened[1])  # type: ignore[index]  # opened: set when a run failed
        got = latest_metric(run, M.TRAIN_SCORE)
        if got:
            st.score, st.step = got
        ev = latest_metric(run, M.eval_domain_metric(k))
        st.eval_score = ev[0] if ev else None
        own = [r for r in runs if not costs_nothing(r.data.tags)]
        paid = spent(r.data.metrics for r in own) if own else None
        if paid is not None:
            st.cpu_hours, st.gpu_hours = paid.cpu, paid.gpu
        if derived.state is State.DONE:
            st.seed_score = run_score(run.data.metrics, cell.eval_k)
        out.append(st)
    if plan.spec.adaptive is not None:
        from gppo.stats.rounds import Rounds  # scipy: only for adaptive seeds

        _mark_unneeded(plan, out, Rounds.of_plan(plan))
    return out


def _mark_unneeded(plan: Plan, rows: list[CellStatus], rounds: Rounds) -> None:
    """Mark the pending cells no later round will ask for, with why (as the launcher's seed gate
    holds them back: a needed cell's whole group of identical cells is needed). A pending cell
    of a row still open stays ``pending``: a later round may need it."""
    scores = {r.cell: r.seed_score for r in rows if r.seed_score is not None}
    failed = {r.cell for r in rows if r.state is State.FAILED}
    wanted = whole_groups(rounds.wanted(scores, failed), run_groups(plan.cells))
    idle = rounds.idle(scores, failed)
    for r in rows:
        if r.state is State.PENDING and r.cell not in wanted:
            r.idle = idle.get(r.cell)


def _latest_run(plan: Plan, cell_id: str) -> Any | None:
    opened = read_sweep(plan)
    if opened is None:
        return None
    runs = opened[0].cell_runs(opened[1], plan.sweep_id).get(cell_id, [])
    return runs[-1] if runs else None


def cell_logs(
    plan: Plan, cell_id: str, *, address: str | None = None, follow: bool = False
) -> Iterator[str]:
    """The log text of the cell's latest attempt, in chunks (``follow``: until the job ends)."""
    plan.cell(cell_id)  # raises SpecError for an unknown cell
    run = _latest_run(plan, cell_id)
    if run is None:
        yield f"cell {cell_id} has not run yet\n"
        return
    sid = run.data.tags.get(M.TAG_RAY_JOB_ID, "")
    # as status does: --address, ray.address, RAY_ADDRESS, the sweep's live local head; then
    # the cluster the attempt was submitted to (its run's tag)
    cluster = _cluster(plan, address)
    recorded = run.data.tags.get(M.TAG_RAY_ADDRESS)
    elsewhere = not address and recorded and (cluster is None or cluster.address != recorded)
    if elsewhere and (cluster is None or _job_status(_client(cluster), sid) is None):
        cluster = _cluster(plan, recorded)
    if cluster is None and run.info.status == "RUNNING":  # its job should exist: find it
        raise ClusterUnreachable(
            f"{plan.source}: cell {cell_id}'s job {sid} is running on a Ray cluster this "
            "command cannot find (no --address, no ray.address in the spec, no RAY_ADDRESS, no "
            "live local head of this sweep, no address recorded in its run): pass --address"
        )
    if cluster is not None and _job_status(_client(cluster), sid) is not None:
        client = cluster.client()
        if follow:
            yield from _follow(client, sid)
        else:
            yield client.get_job_logs(sid)
        return
    path = log_file(last_temp_dir(sweep_state_dir(plan)), sid)
    if path is not None:
        yield path.read_text(errors="replace")
        return
    if cluster is not None and run.info.status == "RUNNING" and _client(cluster) is None:
        raise ClusterUnreachable(
            f"{plan.source}: the Ray cluster at {cluster.address} does not answer; cell "
            f"{cell_id}'s job {sid} cannot be read now (pass --address if it moved)"
        )
    failure = run.data.tags.get(M.TAG_FAILURE)
    yield (
        f"(the Ray job {sid} is gone; last lines recorded:)\n{failure}\n"
        if failure
        else f"(no logs: the Ray job {sid} is gone)\n"
    )


def _client(cluster: Cluster) -> Any | None:
    """The cluster's Jobs API client, or None (said in the log) when it does not answer."""
    try:
        return cluster.client()
    except OSError as exc:
        log.warning("the Ray cluster at %s does not answer (%s)", cluster.address, exc)
        return None


def _follow(client: Any, sid: str) -> Iterator[str]:
    import asyncio

    agen = client.tail_job_logs(sid)
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(agen.aclose())
        loop.close()


def cancel(plan: Plan, cell_id: str | None = None, *, address: str | None = None) -> list[str]:
    """Stop the running jobs of the sweep (or of one cell), end their processes on this machine
    (:meth:`Dispatcher.stop`) and mark their runs KILLED.

    Without a cell, also stops the sweep's local Ray head (if this package started one) and ends
    the parent run. Returns the ids of the cells stopped."""
    from gppo.sweep.running.dispatcher import Dispatcher

    if cell_id is not None:
        plan.cell(cell_id)
    opened = read_sweep(plan)
    stopped: list[str] = []
    cluster = _cluster(plan, address)
    if opened is not None:
        tracking, exp = opened
        parent = tracking.sweep_run(exp, plan.sweep_id, create=False)
        disp = None
        if cluster is not None and parent is not None:
            disp = Dispatcher(
                cluster, tracking, experiment_id=exp, parent_run_id=parent,
                sweep_id=plan.sweep_id, kill_grace_s=plan.spec.retries.kill_grace_s,
            )  # fmt: skip
        for cid, runs in tracking.cell_runs(exp, plan.sweep_id).items():
            if cell_id is not None and cid != cell_id:
                continue
            for run in runs:
                if run.info.status != "RUNNING":
                    continue
                sid = run.data.tags.get(M.TAG_RAY_JOB_ID, "")
                if disp is not None and disp.status(sid) in ACTIVE_JOB:
                    disp.stop(sid)
                if run_state(run.info.status, run.data.tags) is State.DONE:
                    tracking.terminate(run.info.run_id, "FINISHED")
                    continue
                tracking.set_tags(run.info.run_id, {M.TAG_FAILURE: "cancelled (gppo-sweep cancel)"})
                tracking.terminate(run.info.run_id, "KILLED")
                stopped.append(cid)
        if (
            cell_id is None
            and parent is not None
            and tracking.get_run(parent).info.status == "RUNNING"
        ):
            tracking.terminate(parent, "KILLED")
    if cell_id is None and cluster is not None and cluster.local:
        stop_local_head(sweep_state_dir(plan))
    return stopped
