"""A cell's state: one vocabulary (:class:`State`) and one derivation from its runs; and where a
sweep's runs live (:class:`SweepRef`).

Every reader of a sweep (the launcher's reconcile and orphan settling, ``status``, ``cancel``, the
report's records) derives a cell's state here, from three things only: the cell's MLflow runs
(status and ``gppo.finished`` tag), its config hash (runs of other settings do not count), and,
for a run still marked RUNNING, its Ray job's status. The derivation table (tests/store/
test_state.py checks every row)::

    no run with the cell's current config hash        -> PENDING
    any such run with gppo.finished=true (not FAILED/KILLED)  -> DONE
    else the latest such run, by MLflow status:
      RUNNING / SCHEDULED and its job PENDING/RUNNING -> RUNNING
      RUNNING / SCHEDULED and its job ended or gone   -> INTERRUPTED  (its driver died)
      RUNNING / SCHEDULED and no job status asked     -> RUNNING      (the report's view)
      KILLED                                          -> STOPPED
      FAILED, or FINISHED without gppo.finished       -> FAILED

The launcher adds the two states only it can see: WAITING (a retry waiting out its backoff) and
ENDING (the job ended, its run not yet closed). It lives in ``store`` (not ``sweep``) because the
report's records, one layer below the sweep, use it too; the job status comes from the caller.

:class:`SweepRef` is one sweep's coordinates in the store, the handle from a launch to its
report: the launcher holds every coordinate of its sweep (store, experiment, parent run, the run
of each cell) and hands them over in :attr:`gppo.sweep.result.LaunchResult.ref`;
:func:`gppo.analysis.write_report` reads the sweep through it without searching the store again.
:func:`gppo.store.records.find_sweep` builds one for a sweep that ran earlier
(``gppo-sweep report SPEC``). Nothing here imports MLflow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from gppo import metrics as M

if TYPE_CHECKING:
    from mlflow.entities import Run

#: Ray job statuses of a job that is still alive
ACTIVE_JOB = frozenset({"PENDING", "RUNNING"})


class State(str, Enum):
    """The state of a cell (or of one of its runs); compares equal to its lowercase value."""

    PENDING = "pending"  # no run with the cell's current settings (Table 1: "no run (missing)")
    WAITING = "waiting"  # launcher only: a retry waiting for its backoff
    RUNNING = "running"
    ENDING = "ending"  # launcher only: the job ended, its run not yet closed
    DONE = "done"  # its final evaluation is logged (gppo.finished=true)
    FAILED = "failed"
    STOPPED = "stopped"  # cancelled or interrupted on purpose (MLflow KILLED)
    INTERRUPTED = "interrupted"  # marked RUNNING, but its job is gone (its driver died)

    def __str__(self) -> str:
        return self.value

    @property
    def unfinished(self) -> bool:
        """Whether a launch still has work to do for a cell in this state."""
        return self in (State.PENDING, State.WAITING, State.RUNNING, State.ENDING)


def is_done(status: str, tags: Mapping[str, str]) -> bool:
    """A run whose job logged its final evaluation and that did not end FAILED/KILLED."""
    finished = tags.get(M.TAG_FINISHED, "").lower() == "true"
    return finished and status not in ("FAILED", "KILLED")


def run_state(status: str, tags: Mapping[str, str], job_status: str | None = None) -> State:
    """The state of one run from its MLflow ``status`` and tags; ``job_status`` (its Ray job's)
    tells RUNNING from INTERRUPTED for a run still marked RUNNING (None: not asked)."""
    if is_done(status, tags):
        return State.DONE
    if status in ("RUNNING", "SCHEDULED"):
        if job_status is None or job_status in ACTIVE_JOB:
            return State.RUNNING
        return State.INTERRUPTED
    if status == "KILLED":
        return State.STOPPED
    return State.FAILED


@dataclass(frozen=True)
class Derived:
    """A cell's state and the run it was read from (the DONE run, else the latest; None when
    PENDING)."""

    state: State
    run: Run | None = None


def cell_state(
    runs: Sequence[Run],
    config_hash: str,
    job_status: Callable[[str], str | None] | None = None,
) -> Derived:
    """Derive a cell's state (the table in the module docstring).

    Args:
        runs: the cell's ``mlflow.entities.Run`` s, oldest first (``Tracking.cell_runs``).
        config_hash: the cell's current ``Cell.config_hash``; runs of other settings are ignored.
        job_status: submission id -> Ray job status (None when the cluster does not know it),
            asked only for a latest run still marked RUNNING; None: do not ask.
    """
    same = [r for r in runs if r.data.tags.get(M.TAG_CELL_HASH) == config_hash]
    if not same:
        return Derived(State.PENDING)
    done = [r for r in same if is_done(r.info.status, r.data.tags)]
    if done:
        return Derived(State.DONE, done[-1])
    run = same[-1]
    job = None
    if job_status is not None and run.info.status in ("RUNNING", "SCHEDULED"):
        job = job_status(run.data.tags.get(M.TAG_RAY_JOB_ID, "")) or "GONE"
    return Derived(run_state(run.info.status, run.data.tags, job), run)


@dataclass(frozen=True)
class SweepRef:
    """One sweep's coordinates in MLflow.

    Attributes:
        sweep_id: the ``gppo.sweep_id`` tag of the parent run and of every cell run.
        tracking_uri: the MLflow tracking URI (resolved, never None).
        experiment_id: the experiment that holds the sweep's runs.
        parent_run_id: the sweep's parent run (tag ``gppo.role=sweep``).
        run_ids: cell id -> the run of its latest attempt (those the launcher knew; may be empty).
        ended: the last launch ended the sweep (every cell done, not needed or left by the
            budget, a failed seed's besides), as :func:`gppo.store.records.find_sweep` read it.
    """

    sweep_id: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str | None = None
    run_ids: Mapping[str, str] = field(default_factory=dict)
    ended: bool = False
