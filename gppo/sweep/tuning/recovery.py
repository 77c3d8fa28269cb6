"""Crash safety: settle the trials a dead tuner left RUNNING before asking for new ones.

For every RUNNING trial of the study whose owner is gone (:func:`attrs.owner_alive`), its MLflow
run goes through the launcher's own rule for a run whose driver died
(:func:`gppo.sweep.launch.settle_orphan`), and then:

* its Ray job is still PENDING/RUNNING → the new tuner re-attaches: it owns the trial, reports
  the values logged meanwhile and goes on polling it like its own;
* its job SUCCEEDED while no tuner watched → the objective is read back from MLflow and the trial
  is told COMPLETE (nothing is lost);
* no job recorded, the job FAILED/STOPPED, or the cluster no longer knows it → the job is stopped
  (if it still runs without a run), the trial is told FAIL and its MLflow run ends FAILED.

Trials owned by a live tuner (same study on a shared database) are left alone. Afterwards no
trial of a dead tuner stays RUNNING, and the loop continues to ``n_trials`` done trials.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from optuna.trial import FrozenTrial, TrialState

from gppo.sweep.dispatcher import ACTIVE
from gppo.sweep.launch import settle_orphan
from gppo.sweep.tuning import attrs
from gppo.sweep.tuning.study import trial_handle

if TYPE_CHECKING:
    from gppo.sweep.tuning.runner import Tuner


def _job_status(tuner: Tuner, ft: FrozenTrial) -> str | None:
    """The orphan's job status after settling its run (None: unknown to the cluster)."""
    run_id, job_id = ft.user_attrs.get(attrs.RUN_ID), ft.user_attrs.get(attrs.JOB_ID) or ""
    if not run_id:  # the tuner died between submitting and recording the run: stop its job
        job = tuner.disp.status(job_id) if job_id else None
        if job in ACTIVE:
            tuner.stop(job_id)
        return job
    run = tuner.session.tracking.get_run(run_id)
    if run.info.status != "RUNNING":
        return tuner.disp.status(job_id)
    return settle_orphan(
        tuner.session, tuner.disp, tuner.disp.attach(None, run), run, driver="tuner"
    )


def _settle(tuner: Tuner, ft: FrozenTrial) -> str:
    """Adopt, complete or fail one orphaned trial; returns which."""
    run_id, job_id = ft.user_attrs.get(attrs.RUN_ID), ft.user_attrs.get(attrs.JOB_ID) or ""
    try:
        status = _job_status(tuner, ft)
    except Exception:  # the cluster does not answer
        status = "UNREACHABLE"
    trial = trial_handle(tuner.study, tuner.storage, ft.number)
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
