"""The ask/tell loop: keep ``n_parallel`` trials running as Ray jobs until ``n_trials`` are done.

One cycle (every ``tune.poll_s``): for each running trial, report the new intermediate values read
back from its MLflow run to Optuna and prune it if the pruner says so (its Ray job is stopped);
tell Optuna the finished ones (COMPLETE with the objective read from MLflow, FAIL when the job
failed or logged no objective); then ask for new trials while slots are free.

Each trial's attempts go through the sweep's :class:`~gppo.sweep.running.attempts.AttemptDriver`, as a
launch's cells do: one status request per cycle for all running trials, the grid's ``retries``
(a failed or stalled attempt is resubmitted after its backoff, under the same trial number; the
trial is FAIL only after the last), and the outage clocks of ``ray.unreachable_timeout_s`` and
``tracking.unreachable_timeout_s`` (while the tracking server is away no trial is started or
ended; past either limit the tuner stops and leaves its trials RUNNING for the next tuner's
recovery; those checks are the launcher's :class:`~gppo.sweep.running.service_watch.Watch`, with the tuner's
lines). A job that succeeded is told COMPLETE with its objective, never retried.

Done = COMPLETE + PRUNED trials of the study (whoever ran them); FAIL trials do not count, so a
crash never shortens the study. Trials RUNNING in another live tuner are counted as in flight.
Optuna is used through its public API only (``ask``, ``tell`` by trial number, ``Trial`` methods,
``get_trials``). Crash safety: see :mod:`gppo.sweep.tuning.recovery`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from gppo.backends.base import Job, get_backend
from gppo.cell import DEFAULT_EVAL_K, Cell
from gppo.errors import ClusterUnreachable, StoreFull, TrackingUnreachable, TuneError
from gppo.grid import SpecError
from gppo.store.health import fail_fast
from gppo.store.uri import resolve_tracking_uri
from gppo.sweep.cluster.guard import check_store_reachable, resolve_address
from gppo.sweep.running.attempts import (
    ENDING,
    FAILED,
    PENDING,
    RUNNING,
    WAITING,
    AttemptDriver,
    CellState,
    Event,
    Limits,
)
from gppo.sweep.running.dispatcher import Attempt
from gppo.sweep.running.outage import OutageClock
from gppo.sweep.running.service_watch import Left, Watch
from gppo.sweep.signals import signals_set
from gppo.sweep.tuning import attrs, readback
from gppo.sweep.tuning.cells import check_spec, trial_cell
from gppo.sweep.tuning.jobs import end_trial, open_study_session, submit_trial
from gppo.sweep.tuning.percell import enqueue_default
from gppo.sweep.tuning.recovery import recover
from gppo.sweep.tuning.space import suggest
from gppo.sweep.tuning.spec import TuneSpec
from gppo.sweep.tuning.study import make_storage, open_study, storage_url
from gppo.sweep.tuning.study_progress import Progress

log = logging.getLogger(__name__)


#: what a tuner that gives up leaves, and what to do (the next tuner recovers its trials)
LEFT = Left(
    outage="the trials are left RUNNING: tune again once it answers",
    head="their trials are left RUNNING for the next tuner, which starts a new head, tells "
    "them FAIL and asks for new ones",
    disk_full="the tuner stopped, its trials are left RUNNING: free space on that disk and "
    "tune again (finished trials are kept)",
)
#: the driver's events a study prints (its own lines say when a trial starts, ends or fails)
SHOWN = ("retrying", "stalled", "killed", "outage", "recovered")


@dataclass
class TrialCell(CellState):
    """A trial's cell under the driver, with the trial it belongs to."""

    trial: Any = None


def _annotate(trial: optuna.trial.Trial, key: str, value: Any) -> None:
    """Set a trial's user attr, unless the trial is told already: a trial stays active after
    ``study.tell`` when ending its MLflow run failed (a slow or away store), and the next poll
    retries only that end; its heartbeat and failure note no longer apply."""
    try:
        trial.set_user_attr(key, value)
    except optuna.exceptions.UpdateFinishedTrialError:
        log.debug("trial %s is told already: %s not set", trial.number, key)


@dataclass
class Active:
    """A trial this tuner drives; ``st``: its attempts, as the driver sees them."""

    trial: optuna.trial.Trial
    st: TrialCell
    label: str
    last_step: int = -1
    reported: dict[int, float] = field(default_factory=dict)

    @property
    def number(self) -> int:
        return self.trial.number

    @property
    def run_id(self) -> str:
        return self.st.run_id or ""

    @property
    def job_id(self) -> str:
        return self.st.current.submission_id if self.st.current is not None else ""


class Tuner:
    """Run (or resume) the study of a tuning spec."""

    def __init__(self, spec: TuneSpec, *, progress: Progress | None = None) -> None:
        self.spec = spec
        self.progress = progress or Progress(None)
        self.owner = attrs.Owner.me()
        self.active: dict[int, Active] = {}
        self.failures = 0
        self.last_failure = ""
        self.k = int((spec.base.get("eval") or {}).get("k", DEFAULT_EVAL_K))
        self._last_beat = 0.0
        #: what the backend's ``serving`` makes of a trial's job (its fork server, for local)
        self._served: Callable[[Job], Job] = lambda job: job

    # --- setup -------------------------------------------------------------------------------
    def open(self) -> None:
        grid = self.grid = check_spec(self.spec)  # raises before anything is started
        check_store_reachable(  # a remote cluster must reach the store (before any write)
            grid.ray.address,
            resolve_tracking_uri(grid.tracking.uri),
            shared_filesystem=grid.tracking.shared_filesystem,
        )
        self.storage = make_storage(storage_url(self.spec))
        self.study = open_study(self.spec, self.storage)
        enqueue_default(self.spec, self.study)
        self.session = open_study_session(grid, self.spec.name, self.spec.study_name)
        self.disp = self.session.dispatcher(grid.retries.kill_grace_s)
        self.watch = Watch(
            self.session,
            self.spec.file,
            grid.ray.unreachable_timeout_s,
            grid.tracking.unreachable_timeout_s,
            self._outage,
            left=LEFT,
        )
        self.driver = AttemptDriver(
            self.disp,
            Limits(grid.retries, get_backend(grid.backend)),
            cluster=self.watch.cluster,
            emit=self._event,
            submit=self._submit,
            head_gone=self.watch.head_gone,
        )

    def _event(self, event: Event) -> None:
        if event.kind in SHOWN:
            self.progress.event(event.text())

    def _outage(self, kind: str, clock: OutageClock) -> None:
        self._event(Event.of(kind, clock))
        if kind == "recovered" and clock is self.watch.tracking:  # no step could be read meanwhile
            self.driver.pause_stall_clocks([a.st for a in self.active.values()], clock.last_down_s)

    def _submit(self, st: CellState) -> Attempt:
        """Submit one attempt of a trial (its first, or a retry under the same number)."""
        assert isinstance(st, TrialCell)
        trial = st.trial
        att = submit_trial(
            self.disp, st.cell, trial.number, trial.params, self.spec.study_name, self._served
        )
        trial.set_user_attr(attrs.RUN_ID, att.run_id)
        trial.set_user_attr(attrs.JOB_ID, att.submission_id)
        return att

    # --- the loop ------------------------------------------------------------------------------
    def run(self) -> optuna.Study:
        self.open()
        t = self.spec.tune
        max_failures = t.max_failures if t.max_failures is not None else t.n_trials
        stop = threading.Event()
        restore = signals_set(stop)
        try:
            recover(self)
            last_recover = time.monotonic()
            here = resolve_address(self.grid.ray.address) is None  # trials run on this machine
            serving = get_backend(self.grid.backend).serving(on_this_machine=here)
            with self.progress.live(self), serving as self._served:
                while True:
                    if stop.is_set():
                        raise KeyboardInterrupt
                    if time.monotonic() - last_recover > t.stale_after_s / 2:
                        recover(self)  # trials of tuners that died since (shared storage)
                        last_recover = time.monotonic()
                    tracking_ok = self._poll()
                    done, others = self._counts()
                    if done >= t.n_trials and not self.active:
                        break
                    if self.failures > max_failures:
                        if not self.active:
                            raise TuneError(
                                f"{self.failures} trials failed (max_failures={max_failures}); "
                                f"last: {self.last_failure}"
                            )
                    elif tracking_ok and not self.watch.cluster.down:  # one try per free slot
                        for _ in range(self.spec.n_parallel - len(self.active)):
                            if done + len(self.active) + others < t.n_trials:
                                self._launch()
                    self._heartbeat()
                    self.progress.update(self)
                    stop.wait(t.poll_s)
        except (ClusterUnreachable, TrackingUnreachable, StoreFull):
            raise  # its trials stay RUNNING: the next tuner recovers them
        except BaseException:
            self._abandon("the tuner was interrupted")
            raise
        finally:
            restore()
            if not self._any_running():  # end the parent run, stop a local head we started
                done, _ = self._counts()
                try:
                    self.session.close("FINISHED" if done >= t.n_trials else "KILLED")
                except Exception as exc:  # the store or the head is away: said, not raised
                    log.warning("could not close the study's parent run or its local head: %s", exc)
        return self.study

    def _counts(self) -> tuple[int, int]:
        """(done trials, trials RUNNING under another live tuner)."""
        done = others = 0
        for ft in self.study.get_trials(deepcopy=False):
            if ft.state in (TrialState.COMPLETE, TrialState.PRUNED):
                done += 1
            elif ft.state == TrialState.RUNNING and ft.number not in self.active:
                others += 1
        return done, others

    def _any_running(self) -> bool:
        try:
            states = (TrialState.RUNNING,)
            return bool(self.active) or bool(self.study.get_trials(False, states=states))
        except Exception as exc:  # any storage error: a trial may still run, keep the parent open
            log.warning("the study's storage does not answer (%s): its parent run left open", exc)
            return True

    # --- one trial -------------------------------------------------------------------------------
    def _own(self, trial: optuna.trial.Trial) -> None:
        trial.set_user_attr(attrs.OWNER, self.owner.as_attr())
        trial.set_user_attr(attrs.HEARTBEAT, time.time())

    def _launch(self) -> None:
        trial = self.study.ask()
        self._own(trial)
        try:
            cfg = suggest(trial, self.spec.tune.space)
            cell, _ = trial_cell(self.spec, cfg, trial.number)
        except (SpecError, ValueError) as err:
            self.fail(trial, f"invalid configuration: {err}")
            return
        trial.set_user_attr(attrs.CELL_ID, cell.id)
        trial.set_user_attr(attrs.CONFIG, cfg.label)
        trial.set_user_attr(attrs.RAY_ADDRESS, self.disp.cluster.address)
        a = Active(trial, TrialCell(cell, trial=trial), cfg.label)
        self.active[trial.number] = a
        try:
            with fail_fast(self.disp.tracking.uri):
                started = self.driver.start(a.st)
        except Exception as err:  # the store went away: the trial is submitted once it is back
            if not self.watch.store_error(err):  # a full disk raises StoreFull
                del self.active[trial.number]
                self.fail(trial, f"submit failed: {err}")
                return
            started = False
        if started:
            self.progress.event(
                f"trial {trial.number} started: {cfg.label} ({cell.id}, job {a.job_id})"
            )
        elif a.st.state == FAILED:  # refused: the dispatcher ended its run FAILED already
            del self.active[trial.number]
            self.fail(trial, f"submit failed: {a.st.why}")
        # else the cluster did not take it (an outage): submitted again once it answers

    def adopt(
        self, trial: optuna.trial.Trial, frozen: FrozenTrial, run_id: str, job_id: str
    ) -> None:
        """Take over a trial whose job is still running (after its tuner died)."""
        self._own(trial)
        reported = dict(frozen.intermediate_values)
        label = str(frozen.user_attrs.get(attrs.CONFIG, ""))
        last = max(reported, default=-1)
        cell = self._cell_of(trial)
        st = TrialCell(cell, state=RUNNING, trial=trial, run_id=run_id)
        st.current = Attempt(cell, trial.number, run_id, job_id, status="RUNNING")
        self.active[trial.number] = Active(trial, st, label, last, reported)
        self.driver.attached(st)
        self.progress.event(f"trial {trial.number} re-attached to running job {job_id}")

    def _cell_of(self, trial: optuna.trial.Trial) -> Cell:
        """A trial's cell again (its parameters suggested once more give the stored values)."""
        cell, _ = trial_cell(self.spec, suggest(trial, self.spec.tune.space), trial.number)
        return cell

    def _report(self, a: Active) -> bool:
        """Report new intermediate values; True when something new was reported."""
        new = False
        metric = self.spec.tune.intermediate.metric
        for step, value in readback.intermediate_values(self.disp.tracking, a.run_id, metric):
            if step > a.last_step:
                a.trial.report(value, step)
                a.reported[step] = value
                a.last_step = step
                self.driver.progressed(a.st, step, value)
                new = True
        return new

    def _poll(self) -> bool:
        """One cycle over the running trials: one status request, then (while the tracking
        server answers) their new values, prunes, endings, retries and stalls. False while the
        tracking server is away (nothing is started or ended)."""
        self.driver.poll([a.st for a in self.active.values()])
        self.watch.check_cluster()
        if not self.watch.tracking_answers():
            return False
        with fail_fast(self.disp.tracking.uri):  # an outage mid-cycle raises, not blocks
            for number, a in list(self.active.items()):
                try:
                    self._poll_one(number, a)
                except Exception as err:  # a transient store error: try again next cycle
                    log.warning("trial %s: poll error", number, exc_info=True)
                    self.progress.event(f"trial {number}: poll error ({type(err).__name__}: {err})")
            self.driver.stop_stalled(a.st for a in self.active.values())
        return True

    def _poll_one(self, number: int, a: Active) -> None:
        st = a.st
        if st.state in (PENDING, WAITING):  # not taken by the cluster yet, or a retry
            if st.ready_at <= time.time() and not self.watch.cluster.down and self.driver.start(st):
                a.last_step = -1  # the new attempt's run logs from its first step
                self.progress.event(f"trial {number} attempt {st.attempt} started (job {a.job_id})")
            elif st.state == FAILED and st.run_id:
                self._failed(number, a)
            elif st.state == FAILED:  # refused at its first submission: it has no run
                del self.active[number]
                self.fail(a.trial, f"submit failed: {st.why}")
            return
        if st.state == RUNNING:
            if self._report(a) and a.trial.should_prune():
                self.stop(a.job_id)
                self.study.tell(number, state=TrialState.PRUNED, skip_if_finished=True)
                end_trial(self.disp, a.run_id, a.job_id, "PRUNED", f"pruned at step {a.last_step}")
                del self.active[number]
                self.progress.event(f"trial {number} pruned at step {a.last_step}")
            return
        if st.state != ENDING or st.current is None:
            return
        self._report(a)  # the values it logged since the last cycle, before it is told
        if st.current.status == "SUCCEEDED" and not st.stall_note:
            self.finish_succeeded(a.trial, a.run_id, a.job_id)
            del self.active[number]  # only once settled: an error above is retried next cycle
            return
        if self.driver.end(st) == FAILED:  # else WAITING: retried after its backoff
            self._failed(number, a)

    def _failed(self, number: int, a: Active) -> None:
        """The trial's last attempt failed (its run is ended FAILED): tell FAIL with the reason."""
        self.fail(a.trial, f"{a.st.note}: {a.st.why}", a.run_id or None)
        del self.active[number]

    def finish_succeeded(self, trial: optuna.trial.Trial, run_id: str, job_id: str) -> bool:
        """The job exited 0: tell COMPLETE with the objective read back (True), or FAIL."""
        value = readback.objective_value(
            self.disp.tracking, run_id, metric=self.spec.tune.objective.metric, k=self.k
        )
        if value is None:
            what = self.spec.tune.objective.metric or f"eval avg@{self.k}"
            self.fail(trial, f"the job succeeded but logged no {what}", run_id, job_id)
            return False
        self.study.tell(trial.number, value, skip_if_finished=True)
        end_trial(self.disp, run_id, job_id, "COMPLETE")
        self.progress.event(f"trial {trial.number} complete: {value:.4f}")
        return True

    def fail(
        self, trial: optuna.trial.Trial, why: str, run_id: str | None = None, job_id: str = ""
    ) -> None:
        """Tell FAIL (user attr ``gppo.failure`` = ``why``) and end the trial's run FAILED."""
        why = " ".join(why.split())[:500]
        _annotate(trial, attrs.FAILURE, why)
        self.study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
        if run_id:
            end_trial(self.disp, run_id, job_id, "FAIL", why)
        self.failures += 1
        self.last_failure = why
        self.progress.event(f"trial {trial.number} failed: {why}")

    def stop(self, job_id: str) -> None:
        """Stop a trial's job (best effort: an unreachable cluster stops nothing, and says so)."""
        try:
            self.disp.stop(job_id, wait_s=5.0)
        except Exception as exc:
            log.warning("could not stop trial job %s: %s", job_id, exc)

    def _heartbeat(self) -> None:
        now = time.time()
        if now - self._last_beat < min(10.0, self.spec.tune.stale_after_s / 4):
            return
        self._last_beat = now
        for a in self.active.values():
            _annotate(a.trial, attrs.HEARTBEAT, now)

    def _abandon(self, why: str) -> None:
        """Stop this tuner's jobs and fail their trials (Ctrl-C, SIGTERM, an error)."""
        for a in list(self.active.values()):
            if a.job_id:
                self.stop(a.job_id)
            try:
                self.fail(a.trial, why, a.run_id or None, a.job_id)
            except Exception as exc:  # the study's store is away: the trial stays RUNNING, and
                # the next tuner recovers it as stale (tune.stale_after_s)
                log.warning(
                    "could not fail trial %d (%s); the next tuner recovers it: %s",
                    a.trial.number, why, exc,
                )  # fmt: skip
                self.progress.event(f"trial {a.trial.number} left RUNNING: its store is away")
        self.active.clear()


def run_tuning(spec: TuneSpec, *, progress: Progress | None = None) -> optuna.Study:
    """Run or resume ``spec``'s study to ``tune.n_trials`` finished trials; returns the study."""
    return Tuner(spec, progress=progress).run()
