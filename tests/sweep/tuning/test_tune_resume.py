"""Crash safety: kill -9 the tuner mid-study, rerun it, and the study completes with every trial
settled (re-attached to its still-running job, or FAIL when its job is gone); none stays RUNNING."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from gppo import metrics as M
from gppo.store.tracking import Tracking
from gppo.sweep.tuning import attrs as A
from gppo.sweep.tuning import load_tune_spec, open_study, run_tuning
from gppo.sweep.tuning.cells import trial_cell
from gppo.sweep.tuning.space import corner_configs

from .conftest import TESTS_DIR, spec_dict, write

pytestmark = pytest.mark.slow


def _tuner_process(spec_path: Path, log: Path) -> subprocess.Popen:
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS_DIR)!r}); import sweep.tuning.tune_probe; "
        "from gppo.sweep.tuning import load_tune_spec, run_tuning; "
        f"run_tuning(load_tune_spec({str(spec_path)!r}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_RUN_ID")}
    with open(log, "wb") as fh:
        return subprocess.Popen([sys.executable, "-c", code], stdout=fh, stderr=fh, env=env)


def _wait_running_jobs(
    spec, proc: subprocess.Popen, log: Path, n: int, timeout: float = 120
) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            trials = open_study(spec).get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        except Exception:  # the tuner is still creating the storage
            trials = []
        with_jobs = [t for t in trials if A.JOB_ID in t.user_attrs]
        if len(with_jobs) >= n:
            return with_jobs
        time.sleep(0.3)
    raise AssertionError(f"no {n} running trials in time:\n{log.read_text()[-3000:]}")


def test_kill9_then_resume_to_completion(tmp_path: Path, ray_cluster) -> None:
    data = spec_dict(
        tmp_path,
        ray_cluster.address,
        tuneprobe={"steps": 5, "sleep_s": 0.4},
        tune={"n_trials": 3, "pruner": {"kind": "none"}},
    )
    path = write(tmp_path, data)
    spec = load_tune_spec(path)
    # SIGTERM (like Ctrl-C): the tuner stops its jobs and marks its trials FAIL before exiting
    proc = _tuner_process(path, tmp_path / "tuner0.log")
    try:
        interrupted = _wait_running_jobs(spec, proc, tmp_path / "tuner0.log", 2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) != 0
    study = open_study(spec)
    jobs = ray_cluster.client()
    by_number = {t.number: t for t in study.trials}
    for t in interrupted:
        after = by_number[t.number]
        assert after.state == TrialState.FAIL and "interrupted" in after.user_attrs[A.FAILURE]
        assert jobs.get_job_status(t.user_attrs[A.JOB_ID]).value in ("STOPPED", "FAILED")

    proc = _tuner_process(path, tmp_path / "tuner.log")
    try:
        running = _wait_running_jobs(spec, proc, tmp_path / "tuner.log", 2)
    finally:
        proc.send_signal(signal.SIGKILL)  # no cleanup of any kind
        proc.wait()
    left = {t.number: (t.user_attrs[A.RUN_ID], t.user_attrs[A.JOB_ID]) for t in running}

    study = open_study(spec)
    # a trial of the dead tuner whose job never reached the cluster
    ghost = study.ask()
    ghost.set_user_attr(A.OWNER, {"host": socket.gethostname(), "pid": proc.pid, "token": "x"})
    ghost.set_user_attr(A.JOB_ID, "gppo-no-such-job")
    # one that died after creating its run, before submitting the job or recording the run
    unrecorded = study.ask()
    unrecorded.set_user_attr(A.OWNER, ghost.user_attrs[A.OWNER])
    tracking = Tracking(f"sqlite:///{tmp_path}/mlflow.db")
    exp = tracking.experiment_id("tp", create=False)
    cell, _ = trial_cell(spec, corner_configs(spec.tune.space)[0], unrecorded.number)
    tags = {M.TAG_TRIAL_NUMBER: str(unrecorded.number), M.TAG_STUDY_NAME: "tp"}
    unrecorded_run = tracking.create_cell_run(
        exp, tracking.sweep_run(exp, "tp-tune"), "tp-tune", cell, attempt=unrecorded.number,
        submission_id="gppo-never-submitted", role=M.ROLE_TRIAL, extra_tags=tags,
    )  # fmt: skip
    assert {t.number for t in study.get_trials(states=(TrialState.RUNNING,))} >= {
        *left,
        ghost.number,
        unrecorded.number,
    }

    study = run_tuning(spec)  # the same call resumes

    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    assert all(t.state != TrialState.RUNNING for t in trials.values())
    assert sum(t.state == TrialState.COMPLETE for t in trials.values()) == 3
    assert {t.number for t in interrupted} < {
        n for n, t in trials.items() if t.state == TrialState.FAIL
    }
    assert trials[ghost.number].state == TrialState.FAIL
    assert "tuner died" in trials[ghost.number].user_attrs[A.FAILURE]
    found = trials[unrecorded.number]  # its run found by its tags, recorded, ended
    assert found.state == TrialState.FAIL and found.user_attrs[A.RUN_ID] == unrecorded_run
    for number, (run_id, job_id) in left.items():  # re-attached, not rerun
        t = trials[number]
        assert t.state == TrialState.COMPLETE, t.user_attrs
        assert (t.user_attrs[A.RUN_ID], t.user_attrs[A.JOB_ID]) == (run_id, job_id)
        assert t.value is not None and sorted(t.intermediate_values) == list(range(1, 6))
    runs = tracking.search(exp, f"tags.`{M.TAG_ROLE}` = '{M.ROLE_TRIAL}'")
    by_number = {int(r.data.tags[M.TAG_TRIAL_NUMBER]): r for r in runs}
    assert len(by_number) == len(runs)  # one run per trial (the ghost never had one)
    assert all(r.info.status != "RUNNING" for r in runs)
    for number in (*(t.number for t in interrupted), unrecorded.number):
        assert by_number[number].info.status == "FAILED"
    for number, t in trials.items():
        if t.state == TrialState.COMPLETE:
            assert by_number[number].info.status == "FINISHED"
    assert optuna.load_study(study_name="tp", storage=f"sqlite:///{tmp_path}/optuna.db")
