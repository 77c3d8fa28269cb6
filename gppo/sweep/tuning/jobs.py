"""A study is a sweep: its trials are Ray jobs with MLflow child runs, through the sweep's parts.

The study's sweep id is ``<study>-tune``; :func:`open_study_session` opens it with
:func:`gppo.sweep.session.open_session` (store, experiment ``tracking.experiment`` or the spec
name, parent run tagged TAG_STUDY_NAME, ``.gppo/<study>-tune/`` beside the store, cluster), and
trials go through its :class:`~gppo.sweep.running.dispatcher.Dispatcher`: one child run per trial
(TAG_ROLE=trial, TAG_TRIAL_NUMBER, TAG_STUDY_NAME; TAG_ATTEMPT = the trial number, which keeps
Ray submission ids unique), ended from the trial's Optuna state by :func:`end_trial`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gppo import metrics as M
from gppo.backends.base import Job, get_backend
from gppo.cell import Cell
from gppo.grid import GridSpec
from gppo.store.tracking import log_params, sweep_filter
from gppo.sweep.cluster.connect import local_head_for
from gppo.sweep.running.dispatcher import DONE, FAILED, STOPPED, Attempt, Dispatcher
from gppo.sweep.session import Session, open_session

if TYPE_CHECKING:
    from gppo.store.tracking import Run

#: tag holding the Optuna state a trial ended in (COMPLETE / PRUNED / FAIL)
TAG_TRIAL_STATE = "gppo.trial_state"
#: how a trial's Optuna state ends its run (FINISHED, KILLED, FAILED)
OUTCOME = {"COMPLETE": DONE, "PRUNED": STOPPED, "FAIL": FAILED}


def study_sweep_id(study_name: str) -> str:
    """The sweep id of a study (``<study>-tune``; never of the ``<name>-<hash8>`` grid form)."""
    return f"{study_name}-tune"


def open_study_session(grid: GridSpec, name: str, study_name: str) -> Session:
    """The study's sweep session (``grid``: a trial's grid spec; ``name``: the spec's name)."""
    session = open_session(
        grid.tracking.uri,
        grid.tracking.experiment or name,  # as for the grid spec
        study_sweep_id(study_name),
        address=grid.ray.address,
        local_head=local_head_for(grid),
        stop_grace_s=grid.retries.kill_grace_s,
    )
    session.tracking.set_tags(session.parent_run_id, {M.TAG_STUDY_NAME: study_name})
    return session


def submit_trial(
    disp: Dispatcher,
    cell: Cell,
    number: int,
    params: Mapping[str, object],
    study_name: str,
    served: Callable[[Job], Job] = lambda job: job,
) -> Attempt:
    """Create trial ``number``'s child run (params ``trial.<name>``) and submit its cell's job
    (as the backend's :meth:`~gppo.backends.base.Backend.serving` makes it: ``served``)."""
    job = served(get_backend(cell.backend).job(cell))
    tags = {M.TAG_TRIAL_NUMBER: str(number), M.TAG_STUDY_NAME: study_name}
    # stride 1000: an id left on the cluster by an earlier study of this name is skipped
    # without taking the next trial's number
    att = disp.submit(
        cell, job, attempt=number, role=M.ROLE_TRIAL, extra_tags=tags, stride=1000, tries=5
    )
    log_params(disp.tracking, att.run_id, {f"trial.{k}": v for k, v in sorted(params.items())})
    return att


def end_trial(disp: Dispatcher, run_id: str, sid: str, state: str, note: str = "") -> None:
    """End a trial's run from its Optuna ``state`` (:data:`OUTCOME`, tag TAG_TRIAL_STATE)."""
    disp.end(run_id, sid, OUTCOME[state], note=note, tags={TAG_TRIAL_STATE: state})


def trial_run(session: Session, number: int) -> Run | None:
    """Trial ``number``'s latest MLflow run, found by its tags (None if it has none): the run
    exists before the job is submitted, so a tuner that died before recording it is covered."""
    flt = (
        sweep_filter(session.sweep_id, M.ROLE_TRIAL)
        + f" and tags.`{M.TAG_TRIAL_NUMBER}` = '{number}'"
    )
    runs = session.tracking.search(session.experiment_id, flt)
    return max(runs, key=lambda r: r.info.start_time, default=None)
