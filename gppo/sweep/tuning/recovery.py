"""Crash safety: settle the trials a dead tuner left RUNNING before asking for new ones.

For every RUNNING trial of the study whose owner is gone (:func:`attrs.owner_alive`), its MLflow
run goes through the launcher's own rule for a run whose driver died
(:func:`gppo.sweep.session.settle_orphan`), and then:

* its Ray job is still PENDING/RUNNING → the new tuner re-attaches: it owns the trial, reports
  the values logged meanwhile and goes on polling it like its own;
* its job SUCCEEDED while no tuner watched → the objective is read back from MLflow and the trial
  is told COMPLETE (nothing is lost);
* no job recorded, the job FAILED/STOPPED, or the cluster no longer knows it → the job is stopped
  (if it still runs without a run), the trial is told FAIL and its MLflow run ends FAILED.

A trial's run is found by its tags when the dead tuner had not recorded it yet (it is created
before the job is submitted), so no run of a dead tuner stays RUNNING.

Trials owned by a live tuner (same study on a shared database) are left alone. Afterwards no
trial of a dead tuner stays RUNNING, and the loop continues to ``n_trials`` done trials.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from gppo import metrics as M
from gppo.sweep.cluster.ray_http import JOBS_API_ERRORS
from gppo.sweep.running.dispatcher import ACTIVE
from gppo.sweep.session import settle_orphan
from gppo.sweep.tuning import attrs
from gppo.sweep.tuning.jobs import trial_run
from gppo.sweep.tuning.study import trial_handle

#: the :class:`gppo.sweep.tuning.runner.Tuner` being shown or recovered (not imported: the runner
#: imports this module)
Tuner = Any


def _run_of(tuner: Tuner, trial: optuna.trial.Trial, ft: FrozenTrial) -> Any | None:
    """The orphan's MLflow run: recorded in its user attrs, else found by its tags (the tuner
    died between creating it and recording it; the attrs are recorded now)."""
    run_id = ft.user_attrs.get(attrs.RUN_ID)
    if run_id:
        return tuner.session.tracking.get_run(run_id)
    run = trial_run(tuner.session, ft.number)
    if run is not None:
        trial.set_user_attr(attrs.RUN_ID, run.info.run_id)
        trial.set_user_attr(attrs.JOB_ID, run.data.tags.get(M.TAG_RAY_JOB_ID, ""))
    return run


def _job_status(tuner: Tuner, run: Any | None, job_id: str) -> str | None:
    """The orphan's job status after settling its run (None: unknown to the cluster)."""
    if run is not None and run.info.status == "RUNNING":
        att = tuner.disp.attach(None, run)
        return settle_orphan(tuner.session, tuner.disp, att, run, driver="tuner")
    job = tuner.disp.status(job_id) if job_id else None
    if job in ACTIVE and run is None:  # a job without a run: nothing can follow it
        tuner.stop(job_id)
    return job


def _settle(tuner: Tuner, ft: FrozenTrial) -> str:
    """Adopt, complete or fail one orphaned trial; returns which."""
    trial = trial_handle(tuner.study, tuner.storage, ft.number)
    run = _run_of(tuner, trial, ft)
    run_id = run.info.run_id if run is not None else None
    job_id = ft.user_attrs.get(attrs.JOB_ID) or (
        run.data.tags.get(M.TAG_RAY_JOB_ID, "") if run is not None else ""
    )
    try:
        status = _job_status(tuner, run, job_id)
    except JOBS_API_ERRORS:  # the cluster does not answer: said as the status, UNREACHABLE
        status = "UNREACHABLE"
    if status in ACTIVE and run_id:
        tuner.adopt(trial, ft, run_id, job_id)
        return "adopted"
    if status == "SUCCEEDED" and run_id:
        return "complete" if tuner.finish_succeeded(trial, run_id, job_id) else "failed"
    why = f"its tuner died; job {job_id or '(none)'} {status or 'MISSING'}"
    tuner.fail(trial, why, run_id, job_id)
    tuner.failures -= 1  # a crash is not the configuration's fault
    return "failed"


def recover(tuner: Tuner) -> dict[str, int]:
    """Settle orphaned RUNNING trials; returns counts by outcome (adopted/complete/failed)."""
    outcome = {"adopted": 0, "complete": 0, "failed": 0, "left": 0}
    for ft in tuner.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        started = ft.datetime_start.timestamp() if ft.datetime_start else None
        if attrs.owner_alive(
            ft.user_attrs,
            me=tuner.owner,
            stale_after_s=tuner.spec.tune.stale_after_s,
            started_at=started,
        ):
            outcome["left"] += 1
        else:
            outcome[_settle(tuner, ft)] += 1
    if any(outcome[k] for k in ("adopted", "complete", "failed")):
        tuner.progress.event(
            "resumed: {adopted} re-attached, {complete} completed meanwhile, "
            "{failed} marked FAIL, {left} owned by another live tuner".format(**outcome)
        )
    return outcome
