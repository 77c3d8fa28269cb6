"""The attempt driver: one place for submit → poll → start-up, stall and outage limits → end →
retry with backoff, for the launcher's cells and the tuner's trials alike.

:class:`AttemptDriver` moves :class:`CellState` objects through the states of
:class:`gppo.store.state.State` (PENDING → RUNNING → ENDING → DONE, or WAITING for a retry after
:func:`backoff`, FAILED after the last, STOPPED) and reports each change as an :class:`Event`:
``submitted``, ``attached``, ``running``, ``step``, ``finished`` (with the cell's final score),
``failed`` (with the reason; at once, not retried, when the tracking server refused the cell's
node: :func:`~gppo.store.health.node_refusal`), ``retrying``, ``stalled``, ``killed`` (an attempt's processes
outlived its job and were SIGKILLed: :mod:`gppo.processes`), ``ended`` (they were, and exited
on SIGTERM), ``stopped``, ``outage``, ``recovered``.
Displays (:class:`gppo.sweep.monitor.launch_log.LaunchLog`, the tuner's progress) print events; none
diffs snapshots or reads the store back for them.

The cluster's answers run one :class:`~gppo.sweep.running.outage.OutageClock`: a status round or a
submission that gets no answer, or a refusal for the cluster's own state
(:class:`~gppo.sweep.running.dispatcher.ClusterNotReady`: Ray's "try again later", a 5xx), starts it and
costs no cell an attempt; a refusal of the job itself (:class:`~gppo.errors.SubmissionRefused`)
fails the attempt. The driver never raises on an outage: its owner reads the clock and decides.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gppo import metrics as M
from gppo.backends.base import Job
from gppo.cell import Cell
from gppo.errors import SubmissionExists, SubmissionRefused
from gppo.store.health import node_refusal
from gppo.store.state import ACTIVE_JOB, State
from gppo.sweep.running.dispatcher import Attempt, Dispatcher
from gppo.sweep.running.outage import SERVICES, OutageClock

log = logging.getLogger(__name__)
#: the events are the output (a display prints them): never Python's last-resort stderr lines
log.addHandler(logging.NullHandler())

PENDING, WAITING, RUNNING, ENDING = State.PENDING, State.WAITING, State.RUNNING, State.ENDING
DONE, FAILED, STOPPED = State.DONE, State.FAILED, State.STOPPED
#: the states of a cell that still needs the driver
OPEN = (PENDING, WAITING, RUNNING, ENDING)


def backoff(base_s: float, max_s: float, failures: int) -> float:
    """Seconds before retry number ``failures`` (1, 2, ...): base · 2^(n-1), capped."""
    return min(max_s, base_s * 2 ** max(0, failures - 1))


def reason(error: object) -> str:
    """One short line for an error: the OS's reason (``[Errno 111] Connection refused``) out of
    requests' long message when it has one."""
    text = " ".join(str(error).split())
    found = re.search(r"\[Errno -?\d+\][^\"')]*", text)
    return (found.group(0).strip() if found else text)[:300] or type(error).__name__


@dataclass(frozen=True)
class Event:
    """One thing that happened to a cell's attempt or to a service.

    ``kind``: submitted, attached, running, step, finished, failed, retrying, stalled, stopped
    (``cell`` set), outage, recovered (``service`` and ``where`` set). ``score``: the train score
    (step) or the final eval score (finished, None when the run logged none); ``reason``: why
    (failed, retrying, stalled, outage); ``note``: the cell's note (``retry 1/2``, ``failed after
    3 attempt(s)``); ``took_s``: the attempt's time (finished) or the outage's (recovered).
    """

    kind: str
    cell: str = ""
    attempt: int = 0
    job: str = ""
    step: int | None = None
    score: float | None = None
    reason: str = ""
    note: str = ""
    took_s: float | None = None
    service: str = ""
    where: str = ""
    limit_s: float | None = None
    at: float = field(default_factory=time.time)

    @classmethod
    def of(cls, kind: str, clock: OutageClock) -> Event:
        """The ``outage`` / ``recovered`` event of an outage clock."""
        return cls(
            kind, service=clock.service, where=clock.where, reason=clock.error,
            limit_s=clock.limit_s, took_s=clock.last_down_s,
        )  # fmt: skip

    def text(self) -> str:
        """The event as one line (without a timestamp)."""
        k = f"{self.kind:<11}"
        if self.kind in ("submitted", "attached"):
            return f"{k} {self.cell}  attempt {self.attempt}  job {self.job}"
        if self.kind == "running":
            return f"{k} {self.cell}  attempt {self.attempt}"
        if self.kind == "step":
            score = "-" if self.score is None else f"{self.score:.3f}"
            return f"{k} {self.cell}  attempt {self.attempt}  step {self.step}  score {score}"
        if self.kind in ("retrying", "failed"):
            return f"{k} {self.cell}  {self.note}: {self.reason}"
        if self.kind in ("stalled", "killed", "ended"):
            return f"{k} {self.cell}  attempt {self.attempt} {self.reason}"
        if self.kind == "stopped":
            return f"{k} {self.cell}  {self.note}"
        if self.kind == "finished":
            score = "-" if self.score is None else f"{self.score:.4f}"
            took = "" if self.took_s is None else f" in {self.took_s:.0f} s"
            return f"{k} {self.cell}  attempt {self.attempt}  score {score}{took}"
        if self.service not in SERVICES:
            return f"{k} {self.cell}  {self.note or self.reason}".rstrip()
        what = SERVICES[self.service][0]
        if self.kind == "outage":
            holding = (
                "holding submissions and run endings (running cells keep training); "
                if self.service == "tracking"
                else ""
            )
            return (
                f"{k} {what} at {self.where} does not answer ({self.reason}); {holding}"
                f"waiting up to {self.limit_s or 0:.0f} s for it"
            )
        return f"{k} {what} at {self.where} answers again after {self.took_s or 0:.0f} s"


@dataclass
class CellState:
    """One cell (or trial) under the driver: its :class:`~gppo.store.state.State`, attempt
    counters, the current attempt, the latest step and train score seen, and a short note (a
    retry, a failure reason)."""

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
    stall_note: str = ""  # set when the driver stopped the attempt as stalled
    why: str = ""  # the last failed attempt's reason (one line)
    #: the MLflow run of the cell's latest attempt (its finished run for a DONE cell)
    run_id: str | None = None


@dataclass(frozen=True)
class Limits:
    """A spec's ``retries`` (:class:`gppo.grid.schema.Retries`: ``max`` retries, their
    :func:`backoff`, the stall limits) with the backend whose defaults fill the stall limits."""

    retries: Any
    backend: Any

    def stall_s(self, cell: Cell, *, first_step: bool = False) -> float:
        """``retries.stall_timeout_s``, else the backend's default for the cell; 0: never. With
        ``first_step``, the limit before an attempt's first step: ``retries.first_step_timeout_s``,
        else ``retries.stall_timeout_s``, else the backend's first-step default."""
        r = self.retries
        if first_step and r.first_step_timeout_s is not None:
            return float(r.first_step_timeout_s)
        if r.stall_timeout_s is not None:
            return float(r.stall_timeout_s)
        settings = self.backend.settings_of(cell)
        return float(self.backend.stall_timeout_s(settings, first_step=first_step) or 0.0)

    def knob(self, first_step: bool) -> str:
        """The spec key behind :meth:`stall_s` (for the stall note)."""
        r = self.retries
        own = r.first_step_timeout_s or r.stall_timeout_s is None
        return "first_step_timeout_s" if first_step and own else "stall_timeout_s"


#: submits one attempt: ``submit(cell_state) -> Attempt`` (the default: the cell's job as
#: ``job_for`` makes it, through :meth:`Dispatcher.submit` with the next attempt number; the tuner
#: submits a trial's, with its tags)
Submit = Callable[[CellState], Attempt]


class AttemptDriver:
    """Drives cells' attempts on one :class:`Dispatcher` (see the module docstring).

    Args:
        disp: the sweep's (or study's) dispatcher.
        limits: retries, backoff and stall limits.
        job_for: the cell's job as it is submitted (the backend's job, served); used by the
            default ``submit``.
        cluster: the cluster's outage clock.
        emit: receives every :class:`Event` (also logged at INFO on this module's logger).
        reuse_run: a failed attempt's run is resumed by the next (verl).
        submit: how one attempt is submitted (default: :meth:`Dispatcher.submit`).
        head_gone: True when the cluster is a local head this process started and it has
            exited (then a job whose status cannot be asked is STOPPED, not silent).
    """

    def __init__(
        self,
        disp: Dispatcher,
        limits: Limits,
        *,
        job_for: Callable[[Cell], Job] | None = None,
        cluster: OutageClock,
        emit: Callable[[Event], None] = lambda _e: None,
        reuse_run: bool = False,
        submit: Submit | None = None,
        head_gone: Callable[[], bool] = lambda: False,
    ) -> None:
        self.disp, self.limits, self.job_for = disp, limits, job_for
        self.cluster, self._emit, self.reuse_run = cluster, emit, reuse_run
        self._submit = submit or self._submit_cell
        self.head_gone = head_gone

    def emit(self, kind: str, st: CellState | None = None, **fields: Any) -> None:
        if st is not None:
            fields.setdefault("cell", st.cell.id)
            fields.setdefault("attempt", st.attempt)
        event = Event(kind, **fields)
        log.info("%s", event.text())
        try:
            self._emit(event)
        except Exception as exc:  # a display must never stop the launch
            log.warning("event display failed: %s: %s", type(exc).__name__, exc)

    # -- submission --------------------------------------------------------------------------
    def _submit_cell(self, st: CellState) -> Attempt:
        assert self.job_for is not None, "AttemptDriver: give job_for or submit"
        job = self.job_for(st.cell)
        return self.disp.submit(st.cell, job, attempt=st.attempt + 1, run_id=st.reuse_run)

    def start(self, st: CellState) -> bool:
        """Submit the cell's next attempt; True when it was submitted (RUNNING). A refusal of
        the job fails the attempt (retry or FAILED); no answer or a cluster not ready runs the
        cluster's outage clock and leaves the cell as it was."""
        try:
            att = self._submit(st)
        except SubmissionExists as exc:
            st.tries += 1
            st.state, st.note = FAILED, "could not find a free submission id"
            st.why = str(exc)
            self.emit("failed", st, note=st.note, reason=str(exc))
            return False
        except SubmissionRefused as exc:  # its run was ended FAILED with the reason
            self.cluster.answered()
            st.attempt = exc.attempt
            log.warning(
                "%s attempt %d: Ray refused the submission: %s", st.cell.id, st.attempt, exc
            )
            self.retry_or_fail(st, f"Ray refused the submission: {exc}")
            return False
        except OSError as exc:  # no answer, or not ready (ClusterNotReady): no attempt spent
            self.cluster.failed(reason(exc))
            return False
        self.cluster.answered()
        st.attempt, st.current, st.state, st.score = att.attempt, att, RUNNING, None
        st.run_id, st.step = att.run_id, None  # a resumed run's steps: the owner sets them
        st.progress_at, st.stepped = time.time(), False
        self.emit("submitted", st, job=att.submission_id)
        return True

    def attached(self, st: CellState) -> None:
        """A job found running for the cell (re-attached by a relaunch): announce it and count
        its stall limits from now."""
        assert st.current is not None
        st.progress_at, st.stepped = time.time(), False
        self.emit("attached", st, job=st.current.submission_id)

    # -- observation ---------------------------------------------------------------------------
    def poll(self, cells: Iterable[CellState]) -> list[CellState]:
        """One status round for the RUNNING cells (one request to the cluster); the cells whose
        job ended become ENDING and are returned. No answer runs the outage clock."""
        running = [c for c in cells if c.state == RUNNING and c.current is not None]
        if not running:
            return []
        try:
            found = self.disp.statuses([c.current.submission_id for c in running])  # type: ignore[union-attr]  # running: current is not None
        except Exception as exc:
            if not self.head_gone():
                self.cluster.failed(reason(exc))
                return []
            found = {c.current.submission_id: "STOPPED" for c in running}  # type: ignore[union-attr]  # as above
        else:
            self.cluster.answered()
        ended = []
        for st in running:
            att = st.current
            assert att is not None
            status = found.get(att.submission_id)
            if status in ACTIVE_JOB:
                if status == "RUNNING" and att.status != "RUNNING":
                    self.emit("running", st)
                att.status = status
                continue
            att.status = status or "LOST"
            st.state = ENDING
            ended.append(st)
        return ended

    def progressed(self, st: CellState, step: int, score: float | None) -> None:
        """The attempt's run has logged ``step`` (train score ``score``): progress only past the
        highest step known (a resumed run's score can lag its raw steps)."""
        if score is not None:
            st.score = score
        if st.step is None or step > st.step:
            st.progress_at, st.stepped, st.step = time.time(), True, step
            self.emit("step", st, step=step, score=score)

    @staticmethod
    def pause_stall_clocks(cells: Iterable[CellState], seconds: float) -> None:
        """Move the stall clocks of running cells on by ``seconds``: the time the tracking server
        was away, when no step could be read (a step logged meanwhile must not look like a
        stall)."""
        for st in cells:
            if st.state == RUNNING:
                st.progress_at += seconds

    def stop_stalled(self, cells: Iterable[CellState]) -> None:
        """Stop each attempt that has logged no new training step for its stall limit; it then
        ends FAILED (tag ``gppo.failure``: stalled ...) and is retried like any failure."""
        now = time.time()
        for st in cells:
            if st.state != RUNNING or st.current is None:
                continue
            first = not st.stepped
            limit = self.limits.stall_s(st.cell, first_step=first)
            if not limit or now - st.progress_at < limit:
                continue
            since = "its submission" if first else f"step {st.step}"
            note = (
                f"stalled: no new training step for {now - st.progress_at:.0f} s since {since} "
                f"(retries.{self.limits.knob(first)} = {limit:g}); attempt stopped"
            )
            try:
                status = self.disp.stop(st.current.submission_id)
            except OSError as exc:  # no answer: the outage clock takes over
                self.cluster.failed(reason(exc))
                continue
            st.state = ENDING  # ended by the owner's loop, when the tracking server answers
            if status == "SUCCEEDED":  # it had ended meanwhile (its exit not yet seen)
                st.current.status = status
                continue
            self.emit("stalled", st, reason=note)
            # FAILED with the note, retried like any failure
            st.current.status, st.stall_note = "FAILED", note

    # -- endings ---------------------------------------------------------------------------------
    def end(self, st: CellState) -> State:
        """End the run of a cell whose job ended (ENDING): DONE, STOPPED, or a failed attempt
        (retried after its backoff, or FAILED after the last). The ``finished`` event carries
        the run's ``eval/avg_at_k`` (the cell's k)."""
        att = st.current
        assert att is not None
        lost = att.status == "LOST"
        note = st.stall_note or ("job disappeared" if lost else "")
        st.stall_note = ""
        outcome = self.disp.finish(att, "FAILED" if lost else att.status, note=note)
        st.current = None
        if att.ended is not None and att.ended.found:
            self.emit("killed" if att.ended.killed else "ended", st, reason=att.ended.note)
        if outcome == DONE:
            st.state = DONE
            score = att.metrics.get(M.eval_domain_metric(st.cell.eval_k))
            self.emit("finished", st, score=score, took_s=time.time() - att.submitted_at)
        elif outcome == STOPPED:
            st.state, st.note = STOPPED, "stopped"
            self.emit("stopped", st, note=st.note)
        else:
            if self.reuse_run:  # e.g. verl: the retry resumes the same run
                st.reuse_run = att.run_id
            refused = node_refusal(att.failure)
            if refused:  # the setup's failure: every retry would be refused the same way
                st.tries, st.why = st.tries + 1, refused
                st.state, st.note = FAILED, "failed at once, not retried"
                self.emit("failed", st, note=st.note, reason=refused)
                return st.state
            why = (
                att.failure.strip().splitlines()[0] if att.killed_by and att.failure.strip() else ""
            )
            self.retry_or_fail(st, why or first_line_of_failure(att.failure) or "job failed")
        return st.state

    def retry_or_fail(self, st: CellState, why: str) -> None:
        """A failed attempt: WAITING for a retry after its backoff, or FAILED after the last."""
        st.tries, st.why = st.tries + 1, why
        r = self.limits.retries
        if st.tries <= r.max:
            st.state = WAITING
            st.ready_at = time.time() + backoff(r.backoff_s, r.backoff_max_s, st.tries)
            st.note = f"retry {st.tries}/{r.max}"
            self.emit("retrying", st, note=st.note, reason=why)
        else:
            st.state, st.note = FAILED, f"failed after {st.tries} attempt(s)"
            self.emit("failed", st, note=st.note, reason=why)


def first_line_of_failure(text: str) -> str:
    """The reason of a failed run from its failure tag: the tag's first line and the log's last
    error line (the last line that names an error or exception, else the last line: a trainer's
    final lines are often warnings printed while it shuts down)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    why, tail = lines[0], lines[1:]
    if not tail:
        return why
    errors = [ln for ln in tail if _ERROR_LINE.search(ln)]
    return f"{why}: {(errors or tail)[-1][:200]}"


#: a log line that reports the failure itself (``ValueError: ...``, ``Traceback``, ``ERROR``)
_ERROR_LINE = re.compile(r"\b\w*(Error|Exception)\b|\bTraceback\b|\bERROR\b|\bFatal\b")
