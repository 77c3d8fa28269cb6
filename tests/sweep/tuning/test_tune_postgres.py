"""The team setup for tuning: the Optuna study on PostgreSQL, trials logged to the ``mlflow
server``, trial jobs on the two-node Ray cluster's worker node. Two tuner processes share the
study (no trial run twice); one is killed with -9 and the other settles its trials (re-attached to
their running jobs), leaving none RUNNING."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from gppo import metrics as M
from gppo.store.tracking import Tracking
from gppo.sweep.cluster.ray_http import job_client
from gppo.sweep.tuning import attrs as A
from gppo.sweep.tuning import load_tune_spec
from gppo.sweep.tuning.study import storage_url

from ..servers import WORKER_RESOURCE
from .conftest import spec_dict, write
from .test_tune_resume import _tuner_process

pytestmark = pytest.mark.slow


def test_two_tuners_share_a_postgres_study_and_one_is_killed(
    tmp_path: Path, ray_two_nodes, mlflow_server, postgres
) -> None:
    data = spec_dict(
        tmp_path,
        ray_two_nodes.address,
        tuneprobe={"steps": 3, "sleep_s": 0.5},
        ray={"resources": {"num_cpus": 0.5, "custom": {WORKER_RESOURCE: 1}}},
        tracking={"uri": mlflow_server.uri},
        tune={
            "n_trials": 4,
            "n_parallel": 2,
            "poll_s": 0.3,
            "stale_after_s": 6,
            "pruner": {"kind": "none"},
            "storage": postgres.url("optuna"),
        },
    )
    path = write(tmp_path, data)
    spec = load_tune_spec(path)
    assert storage_url(spec).startswith("postgresql+psycopg://")
    tuners = [_tuner_process(path, tmp_path / f"tuner{i}.log") for i in range(2)]
    pids = {p.pid for p in tuners}
    storage = optuna.storages.RDBStorage(postgres.url("optuna"))

    def owners_running() -> set[int]:
        try:
            study = optuna.load_study(study_name=spec.study_name, storage=storage)
        except KeyError:
            return set()
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        return {int(t.user_attrs[A.OWNER]["pid"]) for t in running if A.JOB_ID in t.user_attrs}

    deadline = time.monotonic() + 180
    while owners_running() != pids:  # both tuners drive trials of the one study
        logs = "\n".join(p.name + (p.read_text()[-1500:]) for p in tmp_path.glob("tuner*.log"))
        assert time.monotonic() < deadline and all(t.poll() is None for t in tuners), logs
        time.sleep(0.3)
    killed, survivor = tuners
    orphans = {
        t.number: t.user_attrs[A.RUN_ID]
        for t in optuna.load_study(study_name=spec.study_name, storage=storage).get_trials(
            deepcopy=False, states=(TrialState.RUNNING,)
        )
        # a trial just asked for has no owner yet: read the owner of recorded trials only
        if A.RUN_ID in t.user_attrs and t.user_attrs.get(A.OWNER, {}).get("pid") == killed.pid
    }
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert survivor.wait(timeout=300) == 0, (tmp_path / "tuner1.log").read_text()[-3000:]

    study = optuna.load_study(study_name=spec.study_name, storage=storage)
    trials = study.get_trials(deepcopy=False)
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert sum(t.state == TrialState.COMPLETE for t in trials) >= 4
    assert orphans
    for t in trials:  # the killed tuner's trials: settled by the survivor, never rerun
        if t.number in orphans:
            assert t.state in (TrialState.COMPLETE, TrialState.FAIL), t.state
            assert t.user_attrs[A.RUN_ID] == orphans[t.number]
            if t.state == TrialState.COMPLETE:  # re-attached to its still-running job
                assert t.user_attrs[A.OWNER]["pid"] == survivor.pid

    # one MLflow run and one Ray job per trial: no trial ran twice; every job on the worker
    tracking = Tracking(mlflow_server.uri)
    exp = tracking.experiment_id("tp", create=False)
    runs = tracking.search(exp, f"tags.`{M.TAG_ROLE}` = '{M.ROLE_TRIAL}'")
    numbers = [int(r.data.tags[M.TAG_TRIAL_NUMBER]) for r in runs]
    assert sorted(numbers) == sorted({t.number for t in trials if A.RUN_ID in t.user_attrs})
    assert all(r.info.status != "RUNNING" for r in runs)
    jobs = job_client(ray_two_nodes.address)
    for r in runs:
        try:
            info = jobs.get_job_info(r.data.tags[M.TAG_RAY_JOB_ID])
        except RuntimeError:  # killed between creating the run and submitting its job
            assert r.info.status == "FAILED" and "tuner died" in r.data.tags[M.TAG_FAILURE]
            continue
        assert info.driver_node_id == ray_two_nodes.worker_node_id
