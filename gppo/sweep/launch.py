"""``gppo-sweep launch``: reconcile with what already ran, then dispatch until every cell ends.

Which cells run and which re-attach is :func:`gppo.sweep.session.reconcile`'s (the resume
rules). The attempts themselves (submit, one status round, stall limits, end, retry with backoff, the
events a display prints) are :class:`gppo.sweep.running.attempts.AttemptDriver`'s; the waits on a silent
cluster or tracking server are :class:`gppo.sweep.running.service_watch.Watch`'s; what the launch returns and how
it ends are :mod:`gppo.sweep.result`'s. This module adds the rounds around them.
One launcher per sweep at a time, whatever the store (:mod:`gppo.sweep.cluster.lock`: a file lock next to
a local store, a lease in the sweep's parent run on a tracking server). A remote Ray cluster with
a store only this machine sees is refused before anything is written (:mod:`gppo.sweep.cluster.guard`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable

from gppo import metrics as M
from gppo.backends.base import Job, get_backend
from gppo.cell import Cell
from gppo.grid.load import Plan
from gppo.store.comparable import sweep_spent
from gppo.store.health import fail_fast
from gppo.store.tracking import latest_metric, store_exception
from gppo.sweep.cluster.guard import check_store_reachable, resolve_address
from gppo.sweep.cluster.lock import sweep_lock
from gppo.sweep.planning.budget import Keeper
from gppo.sweep.planning.forecast import forecast
from gppo.sweep.quiet import quiet_mlflow
from gppo.sweep.result import AfterSweep, LaunchResult, close_launch
from gppo.sweep.running.attempts import (
    ENDING,
    OPEN,
    PENDING,
    RUNNING,
    STOPPED,
    WAITING,
    AttemptDriver,
    CellState,
    Event,
    Limits,
)
from gppo.sweep.running.dispatcher import Dispatcher
from gppo.sweep.running.identical_cells import SameRuns
from gppo.sweep.running.outage import OutageClock
from gppo.sweep.running.seed_gate import SeedGate
from gppo.sweep.running.service_watch import Watch, cluster_silent
from gppo.sweep.session import SweepContext, open_sweep, reconcile
from gppo.sweep.signals import signals_set

log = logging.getLogger(__name__)

#: after the backend says a cell has returned: a round every HURRY_POLL_S for HURRY_S seconds
HURRY_POLL_S, HURRY_S = 0.1, 3.0
#: runs read by one search of the store in a metrics round
RUNS_PER_READ = 200
#: how soon a wait notices a stop (Ctrl-C, SIGTERM, a lost lease)
STOP_CHECK_S = 0.25


class Launcher:
    """Runs one launch of a sweep; :meth:`run` returns when no cell is pending or running.

    ``on_update(result)`` is called after every round (a live table); ``on_event(event)`` with
    each :class:`~gppo.sweep.running.attempts.Event` as it happens (the launch log)."""

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
        on_event: Callable[[Event], None] | None = None,
        stop_event: threading.Event | None = None,
        after_sweep: AfterSweep | None = None,
        unreachable_timeout_s: float | None = None,
    ) -> None:
        self.plan, self.address, self.detach = plan, address, detach
        self.max_concurrent = max_concurrent or plan.spec.ray.max_concurrent
        self.poll_s, self.metrics_every_s = poll_s, metrics_every_s
        self.on_update = on_update or (lambda _r: None)
        self.on_event = on_event or (lambda _e: None)
        self.stop_event = stop_event or threading.Event()
        self.after_sweep = after_sweep
        self.backend = get_backend(plan.spec.backend)
        self.retries = plan.spec.retries
        self.lost = False  # the lease was taken over by another launcher (server store)
        self._lock_fresh: Callable[[], bool] = lambda: True
        #: how long the cluster may go without answering (``ray.unreachable_timeout_s``)
        self.unreachable_timeout_s = unreachable_timeout_s or plan.spec.ray.unreachable_timeout_s
        #: what the backend's :meth:`~gppo.backends.base.Backend.serving` makes of a job
        self._served: Callable[[Job], Job] = lambda job: job
        #: set (from the backend's thread) when a cell has returned: poll now, not in poll_s
        self._cell_ended = threading.Event()
        self._hurry_until = 0.0  # monotonic time until which rounds come every HURRY_POLL_S
        self._cells: list[CellState] = []
        #: cells that are one run (gppo.grid.sharing): only a group's runner submits a job
        self.same = SameRuns(plan.cells)
        #: the spec's budget, kept (None without one)
        self.keeper: Keeper | None = None
        #: adaptive seeds: the cells the rounds need so far (None: a fixed seeds count or list)
        self.gate: SeedGate | None = None
        if plan.spec.adaptive is not None:
            from gppo.stats.rounds import Rounds  # scipy: only for adaptive seeds

            self.gate = SeedGate(Rounds.of_plan(plan), self.same)

    def run(self) -> LaunchResult:
        """Check the store is reachable from the cluster, hold the sweep's lock, dispatch.

        Raises :class:`gppo.sweep.cluster.guard.StoreNotShared` or :class:`gppo.sweep.cluster.lock.LaunchBusy`
        before anything is submitted."""
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
        with quiet_mlflow(), sweep_lock(self.plan, on_lost=self._lost) as self._lock_fresh:
            return self._run()

    def _lost(self) -> None:
        """Another launcher took the sweep over: leave the jobs to it and stop."""
        self.lost = self.detach = True
        self.stop_event.set()

    def _event(self, kind: str, clock: OutageClock) -> None:
        """An outage clock started or stopped: one event."""
        event = Event.of(kind, clock)
        log.info("%s", event.text())
        self.on_event(event)
        if kind == "recovered" and clock.service == "tracking":  # no step was read meanwhile
            self.driver.pause_stall_clocks(self._cells, clock.last_down_s)

    def _run(self) -> LaunchResult:
        # what the jobs share on this machine (a local head) starts while the head starts
        here = resolve_address(self.address or self.plan.spec.ray.address) is None
        served = self.backend.serving(on_this_machine=here, on_job_end=self._cell_ended.set)
        with served as self._served:
            ctx = open_sweep(self.plan, address=self.address)
            try:
                disp = ctx.dispatcher(self.retries.kill_grace_s)
            except OSError as exc:  # the Jobs API did not answer at all (refused, timed out)
                raise cluster_silent(ctx, self.unreachable_timeout_s, exc) from None
            limit_s = self.plan.spec.tracking.unreachable_timeout_s
            self.watch = Watch(
                ctx, self.plan.source, self.unreachable_timeout_s, limit_s, self._event
            )
            self.driver = AttemptDriver(
                disp, Limits(self.retries, self.backend),
                job_for=lambda cell: self._served(self.backend.job(cell)),
                cluster=self.watch.cluster, emit=self.on_event,
                reuse_run=self.backend.reuse_run_on_retry, head_gone=self.watch.head_gone,
            )  # fmt: skip
            result = LaunchResult(self.plan.sweep_id)
            restore = signals_set(self.stop_event)
            marker = ctx.state_dir / "launcher.json"
            try:
                self.same.drop_partial(ctx)  # a follower's copy is whole or absent
                result.cells = reconcile(ctx, disp, list(self.plan.cells))
                self._cells = list(result.cells.values())
                self.keeper = self._budget(ctx, result.cells)
                self._next_round(ctx, result)
                self.on_update(result)  # the sweep's cells, before any event
                for st in result.cells.values():
                    if st.state == RUNNING:
                        self.driver.attached(st)
                marker.write_text(json.dumps({"pid": os.getpid(), "started": time.time()}))
                self._loop(ctx, result)
            except KeyboardInterrupt:
                result.interrupted = True
                self._interrupt(disp, result)
            finally:
                restore()
                marker.unlink(missing_ok=True)
        result.lost = self.lost
        close_launch(ctx, result, self.on_update, self.after_sweep)
        return result

    # -- the loop --------------------------------------------------------------------------------
    def _loop(self, ctx: SweepContext, result: LaunchResult) -> None:
        cells, driver = result.cells, self.driver
        last_metrics = 0.0
        while not self.stop_event.is_set():
            now = time.time()
            if driver.poll(cells.values()):
                self._hurry_until = 0.0  # found: back to poll_s rounds
            self.watch.check_cluster()
            if self.watch.tracking_answers():  # else submissions and endings wait for it
                try:
                    with fail_fast(ctx.tracking.uri):  # an outage mid-round raises, not blocks
                        # cells an identical cell's finished run serves are recorded first
                        self.same.settle(ctx, cells, self.on_event)
                        # free slots are refilled first; the ended runs' bookkeeping comes after
                        self._submit_ready(cells)
                        for st in [c for c in cells.values() if c.state == ENDING]:
                            att = st.current
                            driver.end(st)
                            if self.keeper is not None and att is not None:
                                self.keeper.ended(st.cell.id, att.hours)  # as its run logged
                        self._next_round(ctx, result)
                        if time.monotonic() - last_metrics >= self.metrics_every_s:
                            self._refresh_metrics(ctx, cells)
                            last_metrics = time.monotonic()
                            driver.stop_stalled(cells.values())
                except Exception as exc:
                    if not self.watch.store_error(exc):  # a full disk raises StoreFull
                        raise
            self.on_update(result)
            result.left = left = self._left(cells)
            skip = left.keys() | result.held
            if not [c for cid, c in cells.items() if c.state in OPEN and cid not in skip]:
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

    def _submit_ready(self, cells: dict[str, CellState]) -> None:
        if not self._lock_fresh():  # back from a suspension: the lease may be someone else's
            return
        in_flight = sum(1 for c in cells.values() if c.state == RUNNING)
        now = time.time()
        for st in cells.values():
            if in_flight >= self.max_concurrent:
                return
            if not self.same.may_start(st, cells):  # an identical cell's run serves it
                continue
            if self.gate is not None and not self.gate.admits(st.cell.id):
                continue  # adaptive seeds: not needed by the rounds (yet)
            if st.state == PENDING or (st.state == WAITING and st.ready_at <= now):
                if self.keeper is not None and self.keeper.admit(st.cell.id) is not None:
                    continue  # left pending: its forecast would take the sweep past the budget
                if self.driver.start(st) and st.reuse_run:
                    # a retry that resumes the run (verl) must log a step past the run's latest
                    st.step = _logged_step(self.driver.disp, st.reuse_run)
                if self.watch.cluster.down:  # no answer: one try a round, no more
                    return
                in_flight += st.state == RUNNING

    def _next_round(self, ctx: SweepContext, result: LaunchResult) -> None:
        """Adaptive seeds: read the newly finished cells' scores, ask the rounds which cells
        they need now (:mod:`gppo.sweep.running.seed_gate`); the others are ``result.held``, and
        those no later round will need ``result.idle`` (with why)."""
        if self.gate is None:
            return
        self.gate.observe(ctx, result.cells.values(), left=self._left(result.cells))
        result.held = self.gate.held(result.cells)
        result.idle = self.gate.idle(result.cells)

    def _left(self, cells: dict[str, CellState]) -> dict[str, str]:
        """The cells the budget left pending, with why: those it refused to start, and the
        waiting members of a group of identical cells whose runner it refused."""
        if self.keeper is None:
            return {}
        left = {cid: why for cid, why in self.keeper.left.items() if cid in cells}
        for group in self.same.groups:
            runner = next((c.id for c in group if c.id in left), None)
            if runner is None:
                continue
            for cell in group:
                if cells[cell.id].state in (PENDING, WAITING) and cell.id not in left:
                    left[cell.id] = f"its runs' cell {runner} was left: {left[runner]}"
        return left

    def _budget(self, ctx: SweepContext, cells: dict[str, CellState]) -> Keeper | None:
        """The spec's budget (:mod:`gppo.sweep.planning.budget`) with the sweep's spend so far, or None;
        the runs a relaunch re-attached (RUNNING) are counted at their forecast until they end."""
        budget = self.plan.spec.budget
        if budget is None:
            return None
        spent = sweep_spent(ctx.tracking.uri, self.plan.sweep_id, ctx.experiment_id)
        keeper = Keeper(budget, forecast(self.plan), spent)
        for st in cells.values():
            if st.state == RUNNING:
                keeper.running(st.cell.id)
        return keeper

    # -- progress ----------------------------------------------------------------------------------
    def _refresh_metrics(self, ctx: SweepContext, cells: dict[str, CellState]) -> None:
        """Each running cell's latest train score and step, told to the driver (its stall
        clock and ``step`` events): one search of the store per :data:`RUNS_PER_READ` runs."""
        running = {
            st.current.run_id: st
            for st in cells.values()
            if st.state == RUNNING and st.current is not None
        }
        ids = list(running)
        for i in range(0, len(ids), RUNS_PER_READ):
            quoted = ", ".join(f"'{rid}'" for rid in ids[i : i + RUNS_PER_READ])
            try:
                runs = ctx.tracking.search(ctx.experiment_id, f"attributes.run_id IN ({quoted})")
            except (store_exception(), OSError) as exc:  # progress must never stop the launch
                log.warning("no train scores read this round (the store: %s); next round", exc)
                continue
            for run in runs:
                got = latest_metric(run, M.TRAIN_SCORE)
                if got is not None:
                    self.driver.progressed(running[run.info.run_id], got[1], got[0])

    def stall_timeout_s(self, cell: Cell, *, first_step: bool = False) -> float:
        """:meth:`gppo.sweep.running.attempts.Limits.stall_s` of this sweep's ``retries``."""
        return Limits(self.retries, self.backend).stall_s(cell, first_step=first_step)

    # -- endings ---------------------------------------------------------------------------------
    def _interrupt(self, disp: Dispatcher, result: LaunchResult) -> None:
        """Ctrl-C / SIGTERM: stop running jobs (or leave them with --detach)."""
        for st in result.cells.values():
            if st.state == ENDING:  # its job already ended: just record how
                self.driver.end(st)
                continue
            if st.state != RUNNING or st.current is None or self.detach:
                continue
            try:
                status = disp.stop(st.current.submission_id)
            except OSError:  # the cluster does not answer: leave the run for a relaunch
                st.note = "left running: the cluster did not answer the stop"
                continue
            disp.finish(st.current, status or "STOPPED", note="launch interrupted")
            st.state, st.current, st.note = STOPPED, None, "interrupted"
            self.driver.emit("stopped", st, note=st.note)
        result.detached = self.detach


def _logged_step(disp: Dispatcher, run_id: str) -> int | None:
    """The highest step of any metric in the run: the steps a resumed attempt will log again
    (verl's raw metrics are there before the entrypoint maps them onto ours)."""
    try:
        metrics = disp.tracking.get_run(run_id).data.to_proto().metrics
    except (store_exception(), OSError) as exc:  # the first step seen counts as progress
        log.warning("run %s: logged steps unreadable (%s): counting from its next", run_id, exc)
        return None
    return max((m.step for m in metrics), default=None)
