"""``gppo-sweep launch``: reconcile with what already ran, then dispatch until every cell ends.

Resume rules (the store is the source of truth; each run carries its cell's config hash):
- a cell with a run of the same hash tagged ``gppo.finished`` is done and never reruns;
- a RUNNING run whose Ray job is still PENDING/RUNNING is re-attached (no second copy starts);
- a RUNNING run whose job ended or never existed (launcher killed) is ended (FINISHED if it
  logged ``gppo.finished``, else FAILED with a note) and the cell is retried;
- a RUNNING run of an older hash (the cell's settings changed) is stopped and KILLED.
A cluster that stops answering (every status poll failing: connection refused, a GET timing out)
is waited on for ``ray.unreachable_timeout_s``; then the launcher raises
:class:`~gppo.errors.ClusterUnreachable` and leaves the runs RUNNING and the jobs alone, for the
next launch to re-attach to or settle as above.
One launcher per sweep at a time, whatever the store (:mod:`gppo.sweep.lock`: a file lock next to
a local store, a lease in the sweep's parent run on a tracking server). A remote Ray cluster with
a store only this machine sees is refused before anything is written (:mod:`gppo.sweep.guard`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gppo import metrics as M
from gppo.backends.base import Job, get_backend
from gppo.cell import Cell
from gppo.errors import ClusterUnreachable, StoreFull, SubmissionRefused, TrackingUnreachable
from gppo.grid.plan import Plan
from gppo.store.health import (
    DISK_FULL_SIGNS,
    fail_fast,
    is_disk_full,
    is_unreachable_error,
    tracking_unreachable,
)
from gppo.store.ref import SweepRef
from gppo.store.state import ACTIVE_JOB as ACTIVE
from gppo.store.state import State, cell_state
from gppo.store.tracking import attempt_of, is_finished, latest_metric
from gppo.sweep.dispatcher import Attempt, Dispatcher, SubmissionExists
from gppo.sweep.guard import check_store_reachable, resolve_address
from gppo.sweep.lock import LaunchBusy, sweep_lock
from gppo.sweep.owner import pid_alive
from gppo.sweep.session import Session, SweepContext, open_sweep
from gppo.sweep.signals import signals_set

log = logging.getLogger(__name__)

#: after the backend says a cell has returned: a round every HURRY_POLL_S for HURRY_S seconds
HURRY_POLL_S, HURRY_S = 0.1, 3.0
#: how soon a wait notices a stop (Ctrl-C, SIGTERM, a lost lease)
STOP_CHECK_S = 0.25
#: called as ``hook(plan, ref)`` (:class:`~gppo.store.ref.SweepRef`) once every cell has finished;
#: what it returns is kept as :attr:`LaunchResult.report` (the CLI passes the report writer)
AfterSweep = Callable[..., Any]
PENDING, WAITING, RUNNING, ENDING = State.PENDING, State.WAITING, State.RUNNING, State.ENDING
DONE, FAILED, STOPPED = State.DONE, State.FAILED, State.STOPPED


__all__ = [
    "ClusterUnreachable",
    "LaunchBusy",
    "LaunchResult",
    "Launcher",
    "backoff",
    "reconcile",
    "settle_orphan",
]


@dataclass
class CellState:
    """One cell during a launch: its :class:`~gppo.store.state.State` (PENDING, WAITING for a
    retry, RUNNING, ENDING, DONE, FAILED, STOPPED), attempt counters, the current attempt, the
    latest step and train score seen, and a short note (a retry, a failure reason)."""

    cell: Cell
    state: State = PENDING
    attempt: int = 0  # highest attempt number seen for this cell
    tries: int = 0  # attempts that ended in failure during this launch
    ready_at: float = 0.0
    current: Attempt | None = None
    reuse_run: str | None = None
    step: int | None = None
    score: float | None = None
    note: str = ""
    #: when the current attempt last made progress (submitted, or logged a new step): time.time()
    progress_at: float = 0.0
    #: whether the current attempt has logged a training step of its own (not a resumed run's)
    stepped: bool = False
    stall_note: str = ""  # set when the launcher stopped the attempt as stalled
    #: the MLflow run of the cell's latest attempt (its finished run for a DONE cell)
    run_id: str | None = None


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

    def count(self, state: State) -> int:
        return sum(1 for c in self.cells.values() if c.state == state)

    @property
    def ok(self) -> bool:
        return bool(self.cells) and all(c.state == DONE for c in self.cells.values())


def backoff(base_s: float, max_s: float, failures: int) -> float:
    """Seconds before retry number ``failures`` (1, 2, ...): base · 2^(n-1), capped."""
    return min(max_s, base_s * 2 ** max(0, failures - 1))


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


class Launcher:
    """Runs one launch of a sweep; :meth:`run` returns when no cell is pending or running."""

    def __init__(
        self,
        plan: Plan,
        *,
        address: str | None = None,
        max_concurrent: int | None = None,
        detach: bool = False,
        poll_s: float = 1.0,
        metrics_every_s: float = 5.0,
        on_update: Callable[[LaunchResult], None] | None = None,
        stop_event: threading.Event | None = None,
        after_sweep: AfterSweep | None = None,
        unreachable_timeout_s: float | None = None,
    ) -> None:
        self.plan, self.address, self.detach = plan, address, detach
        self.max_concurrent = max_concurrent or plan.spec.ray.max_concurrent
        self.poll_s, self.metrics_every_s = poll_s, metrics_every_s
        self.on_update = on_update or (lambda _r: None)
        self.stop_event = stop_event or threading.Event()
        self.after_sweep = after_sweep
        self.backend = get_backend(plan.spec.backend)
        self.retries = plan.spec.retries
        self.lost = False  # the lease was taken over by another launcher (server store)
        self._lock_fresh: Callable[[], bool] = lambda: True
        #: how long the cluster may go without answering (``ray.unreachable_timeout_s``)
        self.unreachable_timeout_s = unreachable_timeout_s or plan.spec.ray.unreachable_timeout_s
        self._silent_since: float | None = None  # monotonic time of the first unanswered call
        self._silent_error = ""
        #: the same for the tracking server (``tracking.unreachable_timeout_s``)
        self.tracking_timeout_s = plan.spec.tracking.unreachable_timeout_s
        self._tracking_down_since: float | None = None
        self._tracking_error = ""
        #: what the backend's :meth:`~gppo.backends.base.Backend.serving` makes of a job
        self._served: Callable[[Job], Job] = lambda job: job
        #: set (from the backend's thread) when a cell has returned: poll now, not in poll_s
        self._cell_ended = threading.Event()
        self._hurry_until = 0.0  # monotonic time until which rounds come every HURRY_POLL_S

    def run(self) -> LaunchResult:
        """Check the store is reachable from the cluster, hold the sweep's lock, dispatch.

        Raises :class:`gppo.sweep.guard.StoreNotShared` or :class:`LaunchBusy` before anything
        is submitted."""
        from gppo.store.uri import resolve_tracking_uri

        spec = self.plan.spec
        for cell in self.plan.cells:  # e.g. the verl smoke assets, before anything is submitted
            self.backend.prepare(self.backend.validate_settings(cell.settings))
        check_store_reachable(
            self.address or spec.ray.address,
            resolve_tracking_uri(spec.tracking.uri),
            shared_filesystem=spec.tracking.shared_filesystem,
            where=self.plan.source,
        )
        with sweep_lock(self.plan, on_lost=self._lost) as self._lock_fresh:
            return self._run()

    def _lost(self) -> None:
        """Another launcher took the sweep over: leave the jobs to it and stop."""
        self.lost = self.detach = True
        self.stop_event.set()

    def _run(self) -> LaunchResult:
        # what the jobs share on this machine (a local head) starts while the head starts
        here = resolve_address(self.address or self.plan.spec.ray.address) is None
        served = self.backend.serving(on_this_machine=here, on_job_end=self._cell_ended.set)
        with served as self._served:
            ctx = open_sweep(self.plan, address=self.address)
            try:
                disp = ctx.dispatcher()
            except OSError as exc:  # the Jobs API did not answer at all (refused, timed out)
                line = self._unreachable_line(ctx, "did not answer", exc)
                raise ClusterUnreachable(line) from None
            result = LaunchResult(self.plan.sweep_id)
            restore = signals_set(self.stop_event)
            marker = ctx.state_dir / "launcher.json"
            try:
                result.cells = reconcile(ctx, disp, list(self.plan.cells))
                marker.write_text(json.dumps({"pid": os.getpid(), "started": time.time()}))
                self._loop(ctx, disp, result)
            except KeyboardInterrupt:
                result.interrupted = True
                self._interrupt(ctx, disp, result)
            finally:
                restore()
                marker.unlink(missing_ok=True)
        self._close(ctx, result)
        return result

    @staticmethod
    def _ref(ctx: SweepContext, result: LaunchResult) -> SweepRef:
        runs = {cid: st.run_id for cid, st in result.cells.items() if st.run_id}
        return SweepRef(ctx.sweep_id, ctx.tracking.uri, ctx.experiment_id, ctx.parent_run_id, runs)

    # -- the loop --------------------------------------------------------------------------------
    def _loop(self, ctx: SweepContext, disp: Dispatcher, result: LaunchResult) -> None:
        cells = result.cells
        last_metrics = 0.0
        while not self.stop_event.is_set():
            now = time.time()
            for st in [c for c in cells.values() if c.state == RUNNING]:
                if self._poll(ctx, st, disp):
                    self._hurry_until = 0.0  # found: back to poll_s rounds
                elif self._silent_since is not None:
                    break  # no answer: the other polls of this round would wait in vain too
            self._check_silence(ctx)
            if self._tracking_answers(ctx):  # else submissions and endings wait for it
                try:
                    with fail_fast(ctx.tracking.uri):  # an outage mid-round raises, not blocks
                        # free slots are refilled first; the ended runs' bookkeeping comes after
                        self._submit_ready(ctx, disp, cells)
                        for st in [c for c in cells.values() if c.state == ENDING]:
                            self._end(disp, st)
                        if time.monotonic() - last_metrics >= self.metrics_every_s:
                            self._refresh_metrics(ctx, cells)
                            last_metrics = time.monotonic()
                            self._stop_stalled(disp, cells)
                except Exception as exc:
                    if is_disk_full(exc):
                        raise StoreFull(self._disk_full_line(ctx, exc)) from None
                    if not is_unreachable_error(exc):
                        raise
                    self._tracking_failed(ctx, _reason(exc))  # the same step is retried
            self.on_update(result)
            active = [c for c in cells.values() if c.state in (PENDING, WAITING, RUNNING, ENDING)]
            if not active:
                return
            waits = [c.ready_at - now for c in cells.values() if c.state == WAITING]
            delay = min([self.poll_s, *(w for w in waits if w > 0)])
            self._pause(max(0.05, delay))
        raise KeyboardInterrupt

    def _pause(self, delay: float) -> None:
        """Wait ``delay`` s for the next round, less when the backend says a cell has returned:
        its job ends within tenths of a second (Ray sees the process exit), so rounds then come
        every :data:`HURRY_POLL_S` for :data:`HURRY_S` and the free slot is refilled at once. A
        stop ends the wait within :data:`STOP_CHECK_S`."""
        now = time.monotonic()
        if now < self._hurry_until:
            delay = min(delay, HURRY_POLL_S)
        end = now + delay
        while not self.stop_event.is_set() and (left := end - time.monotonic()) > 0:
            if self._cell_ended.wait(min(left, STOP_CHECK_S)):
                self._cell_ended.clear()
                self._hurry_until = time.monotonic() + HURRY_S
                return

    def _poll(self, ctx: SweepContext, st: CellState, disp: Dispatcher) -> bool:
        """True when the cell's job has ended (its state becomes ENDING)."""
        att = st.current
        assert att is not None
        try:
            status = disp.status(att.submission_id)
        except Exception as exc:  # no answer: gone for good if our local head died
            cluster = ctx.cluster
            if cluster is None or not cluster.local or pid_alive(cluster.pid):
                self._no_answer(ctx, exc)
                return False
            status = "STOPPED"
        else:
            self._answered(ctx)
        if status in ACTIVE:
            att.status = status
            return False
        att.status = status or "LOST"
        st.state = ENDING
        return True

    # -- a tracking server that does not answer ------------------------------------------------
    def _tracking_answers(self, ctx: SweepContext) -> bool:
        """Probe the tracking server; say when it goes away and comes back; give up (raise
        :class:`TrackingUnreachable`) after ``tracking.unreachable_timeout_s``."""
        why = tracking_unreachable(ctx.tracking.uri)
        if why is not None:
            self._tracking_failed(ctx, why)
            return False
        if self._tracking_down_since is not None:
            log.warning(
                "the tracking server at %s answers again after %.0f s; resuming submissions and "
                "run endings", ctx.tracking.uri, time.monotonic() - self._tracking_down_since,
            )  # fmt: skip
            self._tracking_down_since = None
        return True

    def _tracking_failed(self, ctx: SweepContext, why: str) -> None:
        self._tracking_error = why
        now = time.monotonic()
        if self._tracking_down_since is None:
            self._tracking_down_since = now
            log.warning(
                "the tracking server at %s does not answer (%s); holding submissions and run "
                "endings, waiting up to %.0f s (running cells keep training)",
                ctx.tracking.uri, why, self.tracking_timeout_s,
            )  # fmt: skip
        elif now - self._tracking_down_since >= self.tracking_timeout_s:
            raise TrackingUnreachable(
                f"{self.plan.source}: the tracking server at {ctx.tracking.uri} has not answered "
                f"for {now - self._tracking_down_since:.0f} s (tracking.unreachable_timeout_s = "
                f"{self.tracking_timeout_s:g}; last error: {why}); running jobs and their runs "
                "are left as they are: launch again once it answers"
            )

    # -- a cluster that does not answer -------------------------------------------------------
    def _no_answer(self, ctx: SweepContext, exc: BaseException) -> None:
        self._silent_error = _reason(exc)
        if self._silent_since is None:
            self._silent_since = time.monotonic()
            log.warning(
                "the Ray cluster at %s does not answer (%s); waiting up to %.0f s for it",
                self._address(ctx), self._silent_error, self.unreachable_timeout_s,
            )  # fmt: skip

    def _answered(self, ctx: SweepContext) -> None:
        if self._silent_since is not None:
            log.warning("the Ray cluster at %s answers again", self._address(ctx))
            self._silent_since = None

    def _check_silence(self, ctx: SweepContext) -> None:
        """Raise :class:`ClusterUnreachable` once the cluster has been silent for too long, or at
        once when it is the local head this sweep started and its process has exited."""
        cluster = ctx.cluster
        if cluster is not None and cluster.local and cluster.pid and not pid_alive(cluster.pid):
            raise ClusterUnreachable(
                f"{self.plan.source}: the local Ray head this sweep started (pid {cluster.pid}) "
                "has exited, and its jobs with it; their runs are left for a relaunch, which "
                "starts a new head and reruns every unfinished cell"
            )
        if self._silent_since is None:
            return
        silent_s = time.monotonic() - self._silent_since
        if silent_s >= self.unreachable_timeout_s:
            line = self._unreachable_line(
                ctx, f"has not answered for {silent_s:.0f} s", self._silent_error
            )
            raise ClusterUnreachable(line)

    def _disk_full_line(self, ctx: SweepContext, exc: BaseException) -> str:
        found = next((s for s in DISK_FULL_SIGNS if s in str(exc)), "no space left on device")
        return (
            f"{self.plan.source}: the tracking store's disk is full ({ctx.tracking.uri}: {found});"
            " the launch stopped, its jobs and runs are left as they are: free space on that disk"
            " and launch again (finished cells are kept)"
        )

    def _address(self, ctx: SweepContext) -> str:
        return ctx.cluster.address if ctx.cluster is not None else "?"

    def _unreachable_line(self, ctx: SweepContext, what: str, error: object) -> str:
        error = _reason(error)
        return (
            f"{self.plan.source}: the Ray cluster at {self._address(ctx)} {what} "
            f"(ray.unreachable_timeout_s = {self.unreachable_timeout_s:g}; last error: {error}); "
            f"its jobs and their runs are left as they are: launch again once it answers"
        )

    def _end(self, disp: Dispatcher, st: CellState) -> None:
        """End the run of a cell whose job ended; decide done / retry / failed / stopped."""
        att = st.current
        assert att is not None
        lost = att.status == "LOST"
        note = st.stall_note or ("job disappeared" if lost else "")
        st.stall_note = ""
        outcome = disp.finish(att, "FAILED" if lost else att.status, note=note)
        st.current = None
        if outcome == DONE:
            st.state = DONE
        elif outcome == STOPPED:
            st.state, st.note = STOPPED, "stopped"
        else:
            if self.backend.reuse_run_on_retry:  # e.g. verl: the retry resumes the same run
                st.reuse_run = att.run_id
            self._retry_or_fail(st)

    def _retry_or_fail(self, st: CellState) -> None:
        """A failed attempt: WAITING for a retry after its backoff, or FAILED after the last."""
        st.tries += 1
        if st.tries <= self.retries.max:
            st.state = WAITING
            st.ready_at = time.time() + backoff(
                self.retries.backoff_s, self.retries.backoff_max_s, st.tries
            )
            st.note = f"retry {st.tries}/{self.retries.max}"
        else:
            st.state, st.note = FAILED, f"failed after {st.tries} attempt(s)"

    def _submit_ready(
        self, ctx: SweepContext, disp: Dispatcher, cells: dict[str, CellState]
    ) -> None:
        if not self._lock_fresh():  # back from a suspension: the lease may be someone else's
            return
        in_flight = sum(1 for c in cells.values() if c.state == RUNNING)
        now = time.time()
        for st in cells.values():
            if in_flight >= self.max_concurrent:
                return
            if st.state == PENDING or (st.state == WAITING and st.ready_at <= now):
                self._start(ctx, disp, st)
                if self._silent_since is not None:  # no answer: one try a round, no more
                    return
                in_flight += 1

    def _start(self, ctx: SweepContext, disp: Dispatcher, st: CellState) -> None:
        job = self._served(self.backend.job(st.cell))
        try:
            att = disp.submit(st.cell, job, attempt=st.attempt + 1, run_id=st.reuse_run)
        except SubmissionExists:
            st.tries += 1
            st.state, st.note = FAILED, "could not find a free submission id"
            return
        except SubmissionRefused as exc:  # its run was ended FAILED with the reason
            self._answered(ctx)
            st.attempt = exc.attempt
            log.warning(
                "%s attempt %d: Ray refused the submission: %s", st.cell.id, exc.attempt, exc
            )
            self._retry_or_fail(st)
            return
        except OSError as exc:  # no answer: the cell stays as it is (a run made for it was
            self._no_answer(ctx, exc)  # ended FAILED) and is submitted once the cluster answers
            return
        self._answered(ctx)
        st.attempt, st.current, st.state, st.score = att.attempt, att, RUNNING, None
        st.run_id = att.run_id
        # a retry that resumes the run (verl) must log a step past the run's latest to progress
        st.step = self._logged_step(ctx, att.run_id) if st.reuse_run else None
        st.progress_at, st.stepped = time.time(), False

    @staticmethod
    def _logged_step(ctx: SweepContext, run_id: str) -> int | None:
        """The highest step of any metric in the run: the steps a resumed attempt will log
        again (verl's raw metrics are there before the entrypoint maps them onto ours)."""
        try:
            metrics = ctx.tracking.get_run(run_id).data.to_proto().metrics
        except Exception:  # unreadable now: the first step seen counts as progress
            return None
        return max((m.step for m in metrics), default=None)

    def _refresh_metrics(self, ctx: SweepContext, cells: dict[str, CellState]) -> None:
        for st in cells.values():
            if st.state == RUNNING and st.current is not None:
                try:
                    run = ctx.tracking.get_run(st.current.run_id)
                except Exception:  # the progress display must never stop the launch
                    continue
                got = latest_metric(run, M.TRAIN_SCORE)
                if got is None:
                    continue
                st.score = got[0]
                # progress only past the highest step known: a resumed run's score can lag its
                # raw steps (verl's are mirrored later, maybe by this attempt while it starts)
                if st.step is None or got[1] > st.step:
                    st.progress_at, st.stepped, st.step = time.time(), True, got[1]

    def stall_timeout_s(self, cell: Cell, *, first_step: bool = False) -> float:
        """``retries.stall_timeout_s``, else the backend's default for the cell; 0: never. With
        ``first_step``, the limit before an attempt's first step: ``retries.first_step_timeout_s``,
        else ``retries.stall_timeout_s``, else the backend's first-step default."""
        if first_step and self.retries.first_step_timeout_s is not None:
            return self.retries.first_step_timeout_s
        if self.retries.stall_timeout_s is not None:
            return self.retries.stall_timeout_s
        settings = self.backend.validate_settings(cell.settings)
        return self.backend.stall_timeout_s(settings, first_step=first_step) or 0.0

    def _stop_stalled(self, disp: Dispatcher, cells: dict[str, CellState]) -> None:
        """Stop each attempt that has logged no new training step for its stall timeout; it
        then ends FAILED (tag ``gppo.failure``: stalled ...) and is retried like any failure."""
        now = time.time()
        for st in cells.values():
            first = not st.stepped
            limit = self.stall_timeout_s(st.cell, first_step=first) if st.state == RUNNING else 0.0
            if not limit or st.current is None or now - st.progress_at < limit:
                continue
            att = st.current
            since = "its submission" if first else f"step {st.step}"
            own_knob = self.retries.first_step_timeout_s or self.retries.stall_timeout_s is None
            knob = "first_step_timeout_s" if first and own_knob else "stall_timeout_s"
            note = (
                f"stalled: no new training step for {now - st.progress_at:.0f} s since {since} "
                f"(retries.{knob} = {limit:g}); attempt stopped"
            )
            log.warning("%s attempt %d %s", st.cell.id, att.attempt, note)
            try:
                disp.stop(att.submission_id)
            except OSError:  # no answer: the cluster-silence path takes over
                continue
            # FAILED with the note, retried like any failure (ended by the loop: the run's
            # bookkeeping waits for the tracking server like every other ending)
            att.status, st.stall_note, st.state = "FAILED", note, ENDING

    # -- endings ---------------------------------------------------------------------------------
    def _interrupt(self, ctx: SweepContext, disp: Dispatcher, result: LaunchResult) -> None:
        """Ctrl-C / SIGTERM: stop running jobs (or leave them with --detach)."""
        for st in result.cells.values():
            if st.state == ENDING:  # its job already ended: just record how
                self._end(disp, st)
                continue
            if st.state != RUNNING or st.current is None:
                continue
            if self.detach:
                continue
            try:
                status = disp.stop(st.current.submission_id)
            except OSError:  # the cluster does not answer: leave the run for a relaunch
                st.note = "left running: the cluster did not answer the stop"
                continue
            disp.finish(st.current, status or "STOPPED", note="launch interrupted")
            st.state, st.current, st.note = STOPPED, None, "interrupted"
        result.detached = self.detach

    def _close(self, ctx: SweepContext, result: LaunchResult) -> None:
        if self.lost:  # the sweep belongs to another launcher now: end nothing of it
            result.lost = True
            self.on_update(result)
            return
        result.ref = self._ref(ctx, result)

        def report() -> None:
            self.on_update(result)
            if result.ok and self.after_sweep is not None:
                run_after_sweep_hook(ctx, result, self.after_sweep)

        if any(c.state == RUNNING for c in result.cells.values()):
            report()
            return
        status = "FINISHED" if result.ok else ("KILLED" if result.interrupted else "FAILED")
        ctx.close(status, meanwhile=report)  # the report is written while the local head stops


def _reason(error: object) -> str:
    """One short line for an error: the OS's reason (``[Errno 111] Connection refused``) out of
    requests' long message when it has one."""
    text = " ".join(str(error).split())
    found = re.search(r"\[Errno -?\d+\][^\"')]*", text)
    return (found.group(0).strip() if found else text)[:300] or type(error).__name__


def run_after_sweep_hook(ctx: SweepContext, result: LaunchResult, hook: AfterSweep) -> None:
    """Call ``hook`` (the CLI passes the report writer); never fails the launch."""
    try:
        result.report = hook(ctx.plan, result.ref)
    except Exception as exc:
        log.warning("after-sweep hook failed: %s", exc)
