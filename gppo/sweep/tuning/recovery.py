"""Crash safety: settle the trials a dead tuner left RUNNING before asking for new ones.

For every RUNNING trial of the study whose owner is gone (:func:`attrs.owner_alive`):

* its Ray job is still PENDING/RUNNING → the new tuner re-attaches: it owns the trial, reports
  the values logged meanwhile and goes on polling it like its own;
* its job SUCCEEDED while no tuner watched → the objective is read back from MLflow and the trial
  is told COMPLETE (nothing is lost);
* no job recorded, the job FAILED/STOPPED, or the cluster no longer knows it → the job is stopped
  (if it can be reached), the trial is told FAIL and its MLflow run ends FAILED.

Trials owned by a live tuner (same study on a shared database) are left alone. Afterwards no
trial of a dead tuner stays RUNNING, and the loop continues to ``n_trials`` done trials.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState

from gppo.sweep.tuning import attrs, jobs

if TYPE_CHECKING:
    from gppo.sweep.tuning.runner import Tuner


def _status(tuner: Tuner, job_id: str, address: str | None) -> str:
    if address and address.rstrip("/") != tuner.jobs.address.rstrip("/"):
        try:  # the trial ran on another cluster: ask that one
            from ray.job_submission import JobSubmissionClient

            return str(JobSubmissionClient(address).get_job_status(job_id).value)
        except Exception:
            return jobs.UNREACHABLE
    return tuner.jobs.status(job_id)


def recover(tuner: Tuner) -> dict[str, int]:
    """Settle orphaned RUNNING trials; returns counts by outcome (adopted/complete/failed)."""
    study = tuner.study
    spec = tuner.spec
    outcome = {"adopted": 0, "complete": 0, "failed": 0, "left": 0}
    for ft in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        started = ft.datetime_start.timestamp() if ft.datetime_start else None
        ua = ft.user_attrs
        if attrs.owner_alive(
            ua, me=tuner.owner, stale_after_s=spec.tune.stale_after_s, started_at=started
        ):
            outcome["left"] += 1
            continue
        run_id, job_id = ua.get(attrs.RUN_ID), ua.get(attrs.JOB_ID)
        status = _status(tuner, job_id, ua.get(attrs.RAY_ADDRESS)) if job_id else jobs.MISSING
        if status in jobs.ACTIVE and run_id:
            trial = optuna.trial.Trial(study, ft._trial_id)
            tuner.adopt(trial, run_id, job_id, str(ua.get(attrs.CONFIG, "")))
            outcome["adopted"] += 1
        elif status == jobs.SUCCEEDED and run_id:
            tuner.finish_succeeded(ft.number, run_id, job_id)
            state = study._storage.get_trial(ft._trial_id).state
            outcome["complete" if state == TrialState.COMPLETE else "failed"] += 1
        else:
            if job_id and status not in (jobs.MISSING, jobs.UNREACHABLE):
                tuner.jobs.stop(job_id)
            why = f"its tuner died; job {job_id or '(none)'} {status}"
            tuner._fail_number(ft.number, why, run_id, job_id or "")
            tuner.failures -= 1  # a crash is not the configuration's fault
            outcome["failed"] += 1
    if any(outcome[k] for k in ("adopted", "complete", "failed")):
        tuner.progress.event(
            "resumed: {adopted} re-attached, {complete} completed meanwhile, "
            "{failed} marked FAIL, {left} owned by another live tuner".format(**outcome)
        )
    return outcome
