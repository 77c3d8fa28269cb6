"""One Ray job per cell attempt, each logging into its own MLflow child run.

:class:`Dispatcher` is the library layer the launcher (and the tuner) build on: it creates the
attempt's run, submits the job with a deterministic submission id, polls, stops, reads logs and
ends the run. It keeps no state of its own beyond the :class:`Attempt` objects it returns, so a
new process can re-attach to an attempt from its run's tags (:meth:`Dispatcher.attach`).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gppo import metrics as M
from gppo import processes
from gppo.backends.base import Job, get_backend
from gppo.cell import Cell
from gppo.errors import GppoError, SubmissionExists, SubmissionRefused
from gppo.store.cost import Hours, attempt_cost, attempt_hours, cost_key, resource_metrics
from gppo.store.state import ACTIVE_JOB, State
from gppo.store.tracking import Tracking, is_finished, log_metrics
from gppo.store.uri import without_password

if TYPE_CHECKING:
    from gppo.store.tracking import Run
from gppo.sweep.cluster.connect import Cluster
from gppo.sweep.cluster.ray_http import JOBS_API_ERRORS

log = logging.getLogger(__name__)

ACTIVE = ACTIVE_JOB  # Ray job statuses of a live job
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
#: an attempt's outcomes, in the one vocabulary of cell states (gppo.store.state)
DONE, FAILED, STOPPED = State.DONE, State.FAILED, State.STOPPED
#: the MLflow run status of each outcome of an attempt
RUN_STATUS = {DONE: "FINISHED", STOPPED: "KILLED", FAILED: "FAILED"}
#: what Ray answers a submission with when the cluster, not the job, is the problem: its own
#: "No available agent to submit job, please try again later", any 5xx
_NOT_READY = re.compile(r"try again later|No available agent|status code 5\d\d", re.IGNORECASE)
LOG_TAIL_LINES = 40
#: terminal colour codes (Ray colours its ``(Actor pid=...)`` log prefixes): not kept in MLflow
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: submission ids a submit tries before giving up (see :meth:`Dispatcher.submit`)
SUBMIT_TRIES = 3


def submission_id(sweep_id: str, cell_id: str, attempt: int) -> str:
    """``gppo-<sweep>-<cell>-a<attempt>`` with anything outside ``[A-Za-z0-9_-]`` as ``_``."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"gppo-{sweep_id}-{cell_id}-a{attempt}")


class ClusterNotReady(GppoError, OSError):
    """Ray refused a submission for the cluster's own state (no agent ready, a 5xx, no answer):
    the job was not judged, so the attempt does not count; the run made for it was deleted
    (a reused run was ended FAILED again, as it was). An ``OSError``: the caller waits for the
    cluster as for any call it does not answer."""


@dataclass
class Attempt:
    """One submitted attempt of one cell (or trial; None when re-attached from its run alone).

    ``submitted_at`` is this attempt's submission (tag ``gppo.submitted_at``), also for an
    attempt re-attached by a relaunch; :meth:`Dispatcher.finish` fills in what the attempt's end
    made known: ``metrics`` (the run's latest values, read to decide the outcome), ``hours``
    (this attempt's cost, what the budget counts) and ``failure`` (the failure tag it wrote: the
    note and the log's last lines)."""

    cell: Cell | None
    attempt: int
    run_id: str
    submission_id: str
    submitted_at: float = field(default_factory=time.time)
    status: str = "PENDING"
    metrics: dict[str, float] = field(default_factory=dict)
    #: this attempt's own cost (None: no resources logged), set by :meth:`Dispatcher.finish`
    hours: Hours | None = None
    #: re-attached from its run by another launcher than the one that submitted it
    #: (:meth:`Dispatcher.attach`): its job may have ended while no launcher watched it
    attached: bool = False
    failure: str = ""
    #: what ending its processes took (:func:`gppo.processes.end_attempt`), set at its end
    ended: processes.Ended | None = None
    #: the signal its job's driver died of (``SIGKILL``), when it died of one
    killed_by: str | None = None


class Dispatcher:
    """Submit, poll and stop the Ray jobs of one sweep; create and end their MLflow runs.

    An attempt's end is verified: whenever a job is stopped or its run ended, every process of
    the attempt still alive on this machine is ended (:func:`gppo.processes.end_attempt`:
    SIGTERM, ``kill_grace_s``, SIGKILL, checked gone) before the call returns, so a retry never
    overlaps its predecessor.

    Args:
        cluster: where jobs run (:func:`gppo.sweep.cluster.connect.ensure_cluster`).
        tracking: the sweep's store (:class:`gppo.store.tracking.Tracking`, store initialised).
        experiment_id, parent_run_id, sweep_id: the sweep's MLflow coordinates
            (:meth:`Tracking.experiment_id`, :meth:`Tracking.sweep_run`).
        kill_grace_s: seconds between SIGTERM and SIGKILL for an attempt's leftover processes
            (``retries.kill_grace_s``).
    """

    def __init__(
        self,
        cluster: Cluster,
        tracking: Tracking,
        *,
        experiment_id: str,
        parent_run_id: str,
        sweep_id: str,
        kill_grace_s: float = processes.KILL_GRACE_S,
    ) -> None:
        self.cluster, self.tracking = cluster, tracking
        self.kill_grace_s = kill_grace_s
        #: what ending each attempt's processes took, by submission id (kept for its run's end)
        self._ended: dict[str, processes.Ended] = {}
        self.experiment_id, self.parent_run_id, self.sweep_id = (
            experiment_id,
            parent_run_id,
            sweep_id,
        )
        self.client = cluster.client()

    # -- submission --------------------------------------------------------------------------
    def job_exists(self, sid: str) -> bool:
        return self.status(sid) is not None

    def submit(
        self,
        cell: Cell,
        job: Job,
        *,
        attempt: int,
        run_id: str | None = None,
        role: str = M.ROLE_CELL,
        extra_tags: dict[str, str] | None = None,
        stride: int = 1,
        tries: int = SUBMIT_TRIES,
    ) -> Attempt:
        """Create the attempt's run (or reuse ``run_id``), then submit ``job`` as one Ray job.

        The run exists, tagged with the submission id, BEFORE the job is submitted, so a crash
        between the two is seen by the next launch (run RUNNING, no such job: interrupted).

        A refusal for the cluster's state (:class:`ClusterNotReady`, an ``OSError``) is told
        apart from a refusal of the job itself (:class:`~gppo.errors.SubmissionRefused`: a bad
        entrypoint or runtime env, a 4xx; its run is ended FAILED with the reason).

        Submission ids are handled here only: an attempt number whose id the cluster already
        has is skipped (``attempt += stride``; the tuner's stride keeps trial numbers apart), and
        when the cluster refuses an id as taken (another process got there first) the run is
        ended FAILED and the next number is tried, ``tries`` times in all before
        :class:`SubmissionExists`. The returned :attr:`Attempt.attempt` is the number used."""
        for _ in range(tries):
            while self.job_exists(submission_id(self.sweep_id, cell.id, attempt)):
                attempt += stride
            try:
                return self._submit_once(cell, job, attempt, run_id, role, extra_tags)
            except SubmissionExists:
                attempt += stride
        raise SubmissionExists(
            f"no free Ray submission id for cell {cell.id} after {tries} tries "
            f"(last: {submission_id(self.sweep_id, cell.id, attempt - stride)})"
        )

    def _submit_once(
        self,
        cell: Cell,
        job: Job,
        attempt: int,
        run_id: str | None,
        role: str,
        extra_tags: dict[str, str] | None,
    ) -> Attempt:
        sid = submission_id(self.sweep_id, cell.id, attempt)
        reused = run_id is not None
        if run_id is None:
            run_id = self.tracking.create_cell_run(
                self.experiment_id,
                self.parent_run_id,
                self.sweep_id,
                cell,
                attempt=attempt,
                submission_id=sid,
                role=role,
                extra_tags={**(extra_tags or {}), M.TAG_RAY_ADDRESS: self.cluster.address},
            )
        else:  # a backend that keeps one run across attempts
            self.tracking.client.update_run(run_id, status="RUNNING")
            tags = {M.TAG_ATTEMPT: str(attempt), M.TAG_RAY_JOB_ID: sid}
            self.tracking.set_tags(run_id, {**tags, M.TAG_RAY_ADDRESS: self.cluster.address})
        submitted_at = time.time()
        log_metrics(self.tracking.client, run_id, resource_metrics(job.resources), step=0)
        self.tracking.set_tags(
            run_id,
            {
                M.TAG_COST_KEY: cost_key(cell, job.resources, cost_settings(cell)),
                M.TAG_SUBMITTED_AT: repr(submitted_at),
            },
        )
        # Ray's job info is readable by everyone with access to the cluster (the Jobs API, the
        # dashboard): no password in it; the job's node supplies its own credentials
        public_uri = without_password(self.tracking.uri)
        env = {**dict(job.env), M.ENV_TRACKING_URI: public_uri, M.ENV_RUN_ID: run_id}
        env[processes.ENV_ATTEMPT] = sid  # names every process of the attempt
        kwargs = entrypoint_resources(cell, job)
        try:
            self.client.submit_job(
                entrypoint=job.entrypoint,
                submission_id=sid,
                runtime_env={"env_vars": env},
                metadata={"gppo_sweep": self.sweep_id, "gppo_cell": cell.id},
                **kwargs,
            )
        except Exception as exc:
            reason = " ".join(str(exc).split())[:500] or type(exc).__name__
            taken = "already exists" in reason
            if not taken and (isinstance(exc, OSError) or _NOT_READY.search(reason)):
                # the cluster's state, not the job's: this attempt never was
                if reused:
                    self.tracking.terminate(run_id, "FAILED")
                else:
                    self.tracking.client.delete_run(run_id)
                raise ClusterNotReady(reason) from exc
            self.tracking.set_tags(run_id, {M.TAG_FAILURE: f"submission failed: {exc}"[:4000]})
            self.tracking.terminate(run_id, "FAILED")
            if taken:
                raise SubmissionExists(sid) from exc
            raise SubmissionRefused(f"{sid}: {reason}", attempt) from exc
        return Attempt(
            cell=cell, attempt=attempt, run_id=run_id, submission_id=sid, submitted_at=submitted_at
        )

    def attach(self, cell: Cell | None, run: Run) -> Attempt:
        """An :class:`Attempt` for a run created earlier (possibly by another process), submitted
        when its tag ``gppo.submitted_at`` says: a run kept across attempts (verl) started with
        its first attempt, and the earlier attempts' time is already in its ``cost/wall_s``
        (a run from before the tag: its start)."""
        tags = run.data.tags
        return Attempt(
            cell=cell,
            attempt=int(tags.get(M.TAG_ATTEMPT, "0") or 0),
            run_id=run.info.run_id,
            submission_id=tags.get(M.TAG_RAY_JOB_ID, ""),
            submitted_at=submitted_at_of(run),
            attached=True,
        )

    # -- observation and control ---------------------------------------------------------------
    def statuses(self, sids: list[str]) -> dict[str, str | None]:
        """The status of each job in ``sids`` (None: the cluster does not know it) in ONE request
        (the Jobs API's list of all jobs, ``GET /api/jobs/``); raises when it gets no answer."""
        if not sids:
            return {}
        known = {
            j.submission_id: str(getattr(j.status, "value", j.status))
            for j in self.client.list_jobs()
            if j.submission_id
        }
        return {sid: known.get(sid) for sid in sids}

    def status(self, sid: str) -> str | None:
        """The job's status (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED) or None if unknown."""
        if not sid:
            return None
        try:
            return str(self.client.get_job_status(sid).value)
        except RuntimeError as exc:
            if "does not exist" in str(exc) or "404" in str(exc):
                return None
            raise

    def stop(self, sid: str, *, wait_s: float = 15.0) -> str | None:
        """Ask Ray to stop the job, wait until it is no longer active (up to ``wait_s`` past
        ``kill_grace_s``, the grace a local head gives the driver), then end whatever of the
        attempt is still alive on this machine (:meth:`end_processes`)."""
        try:
            self.client.stop_job(sid)
        except RuntimeError:
            status = self.status(sid)
        else:
            deadline = time.monotonic() + wait_s + self.kill_grace_s
            status = self.status(sid)
            while status in ACTIVE and time.monotonic() < deadline:
                time.sleep(0.5)
                status = self.status(sid)
        self.end_processes(sid)
        return status

    def end_processes(self, sid: str) -> processes.Ended:
        """End the attempt's processes left on this machine (SIGTERM, ``kill_grace_s``,
        SIGKILL, checked gone): :func:`gppo.processes.end_attempt`. What it took is kept for the
        run's end (its failure tag and the ``killed`` event) and returned."""
        ended = processes.end_attempt(sid, self.kill_grace_s)
        before = self._ended.get(sid)
        if before is not None and before.found and not ended.found:
            return before
        if ended.found or before is None:
            self._ended[sid] = ended
        return ended

    def ended_at(self, sid: str) -> float | None:
        """When the job ended as Ray recorded it (its ``end_time``, Unix seconds); None when Ray
        does not say (no such job, no answer, still running)."""
        if not sid:
            return None
        try:
            info = self.client.get_job_info(sid)
        except JOBS_API_ERRORS as exc:
            log.info("job %s: Ray gives no end time now (%s): the attempt ends now", sid, exc)
            return None
        end = getattr(info, "end_time", None)
        return end / 1000.0 if isinstance(end, (int, float)) and end > 0 else None

    def exit_signal(self, sid: str) -> str | None:
        """The signal the job's driver died of (``SIGKILL``), from Ray's ``driver_exit_code``;
        None when it exited by itself or Ray does not say."""
        try:
            info = self.client.get_job_info(sid)
        except JOBS_API_ERRORS as exc:
            log.info("job %s: Ray gives no exit code now (%s): no signal read", sid, exc)
            return None
        return processes.exit_signal(getattr(info, "driver_exit_code", None))

    def logs(self, sid: str) -> str:
        """The job's whole log (Jobs API) as plain text, or ``""``; for a failed entrypoint, the
        last lines Ray's job message quotes are added when the log lacks them (the Jobs API's log
        of a driver that ran on another node can hold the job manager's lines only)."""
        try:
            text = str(self.client.get_job_logs(sid))
        except JOBS_API_ERRORS as exc:
            log.info("job %s: the Jobs API gives no log (%s)", sid, exc)
            text = ""
        try:
            message = str(self.client.get_job_info(sid).message or "")
        except JOBS_API_ERRORS as exc:
            log.info("job %s: the Jobs API gives no job message (%s)", sid, exc)
            message = ""
        quoted = message.partition("last available logs")[2].partition(":")[2].strip()
        if quoted and quoted not in text:
            text = f"{text.rstrip()}\n{quoted}".lstrip("\n")
        return _ANSI.sub("", text)

    def logs_tail(self, sid: str, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.logs(sid).splitlines()[-lines:])

    def finish(self, att: Attempt, status: str, *, note: str = "") -> State:
        """End the attempt's run from the job's terminal ``status``.

        Returns ``State.DONE`` (job succeeded and logged ``gppo.finished``), ``State.STOPPED`` (job
        stopped: run KILLED) or ``State.FAILED`` (run FAILED, tag ``gppo.failure`` = the note and
        the last log lines). Logs the attempt's cost (:func:`gppo.store.cost.attempt_cost`: the
        job's resources x the seconds from its submission to its end: now, or, for an attempt
        re-attached by a relaunch, the job's end time as Ray recorded it when that is earlier: a
        job that ended while no launcher watched it), whatever the outcome.
        Sets ``att.metrics`` (the run's latest values, its cost included) and ``att.failure``
        (the failure tag written, ``""`` for DONE), so no caller reads the run back for them.
        """
        run = self.tracking.get_run(att.run_id)
        att.metrics = dict(run.data.metrics)
        now = time.time()
        ended = self.ended_at(att.submission_id) if att.attached and status in TERMINAL else None
        # this attempt's own time, not the run's earlier attempts'; a re-attached one's to its
        # job's end when Ray says it ended earlier (it ended while no launcher watched it)
        seconds = max(0.0, (min(now, ended) if ended else now) - att.submitted_at)
        att.hours = attempt_hours(att.metrics, seconds)
        cost = attempt_cost(att.metrics, seconds)  # gppo.store.cost
        if cost:
            log_metrics(self.tracking.client, att.run_id, cost, step=0)
            att.metrics.update(cost)
        if status == "SUCCEEDED" and is_finished(run):
            outcome = DONE
        elif status == "STOPPED":
            outcome, note = STOPPED, note or "job stopped"
        else:
            outcome = FAILED
            if status == "FAILED":
                att.killed_by = self.exit_signal(att.submission_id)
            note = note or (
                f"job FAILED: killed by {att.killed_by}"
                if att.killed_by
                else f"job {status or 'lost'}"
                if status != "SUCCEEDED"
                else "job exited 0 without logging its final evaluation (gppo.finished)"
            )
        att.failure = ""
        return self.end(att.run_id, att.submission_id, outcome, note=note, written=att)

    def end(
        self,
        run_id: str,
        sid: str,
        outcome: State,
        *,
        note: str = "",
        tags: dict[str, str] | None = None,
        written: Attempt | None = None,
    ) -> State:
        """End a run as ``outcome`` (with ``tags``): DONE → FINISHED; STOPPED →
        KILLED and FAILED → FAILED, both with ``gppo.failure`` = ``note`` + the log's tail (also
        kept as ``written.failure`` when given).

        First the attempt's processes left on this machine are ended (:meth:`end_processes`);
        when some had to be, the run's ``gppo.processes`` tag says what it took (also
        ``written.ended``), and a failure's note says so too."""
        ended = self.end_processes(sid) if sid else None
        self._ended.pop(sid, None)
        if written is not None:
            written.ended = ended
        if ended is not None and ended.found:
            tags = {**(tags or {}), M.TAG_PROCESSES: ended.note}
            note = f"{note}; {ended.note}" if note else ended.note
        if tags:
            self.tracking.set_tags(run_id, tags)
        if outcome != DONE:
            tail = self.logs_tail(sid) if sid else ""
            self.tracking.set_tags(run_id, {M.TAG_FAILURE: f"{note}\n{tail}"})
            if written is not None:
                written.failure = f"{note}\n{tail}"
        self.tracking.terminate(run_id, RUN_STATUS[outcome])
        return outcome


def cost_settings(cell: Cell) -> dict[str, object]:
    """The cell's settings that drive its cost, as its backend marks them
    (:meth:`gppo.backends.base.Backend.cost_settings`)."""
    return get_backend(cell.backend).cost_settings(cell)


def submitted_at_of(run: Run) -> float:
    """When the run's latest attempt was submitted: its tag ``gppo.submitted_at``, else (a run
    from before the tag) the run's start."""
    try:
        return float(run.data.tags[M.TAG_SUBMITTED_AT])
    except (KeyError, ValueError):
        return run.info.start_time / 1000.0


def log_file(temp_dir: str | None, sid: str) -> Path | None:
    """The driver log a stopped local head left on disk for job ``sid``."""
    if not temp_dir:
        return None
    path = Path(temp_dir) / "session_latest" / "logs" / f"job-driver-{sid}.log"
    return path if path.exists() else None


def entrypoint_resources(cell: Cell, job: Job) -> dict[str, Any]:
    """Ray entrypoint resources of a job.

    A backend whose entrypoint only drives workers of its own (verl starts its GPU actors
    itself) declares ``entrypoint_holds_resources = False``: its entrypoint is submitted with
    no GPUs, or verl's placement groups could never get them. The launcher gates only the number
    of running cells (``max_concurrent``), not their resources: size it to the cluster.
    """
    res = job.resources
    # custom resources pin the entrypoint to the nodes that have them (whatever the backend)
    custom = {"entrypoint_resources": dict(res.custom)} if res.custom else {}
    if not get_backend(cell.backend).entrypoint_holds_resources:
        return {"entrypoint_num_cpus": min(res.num_cpus, 1.0), "entrypoint_num_gpus": 0, **custom}
    kwargs: dict[str, Any] = {
        **custom,
        "entrypoint_num_cpus": res.num_cpus,
        "entrypoint_num_gpus": res.num_gpus,
    }
    if res.memory_gb:
        kwargs["entrypoint_memory"] = int(res.memory_gb * 2**30)
    return kwargs
