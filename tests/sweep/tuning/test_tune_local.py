"""``gppo-sweep tune`` of a ``backend: local`` spec with no address, as configs/tune-quickstart.yaml
runs: its own local Ray head, real testbed trials handed to the study's fork server, each
trial's avg@8 in its MLflow run, and no server left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
import yaml
from helpers import LAUNCH_TAG, fork_servers
from mlflow.tracking import MlflowClient

from gppo import metrics as M

pytestmark = pytest.mark.slow

SPEC = {
    "name": "tune-local",
    "backend": "local",
    "local": {"domain": "math", "steps": 2, "prompts_per_step": 8, "eval_prompts": 8},
    "eval": {"k": 8},
    "seeds": [0],
    "ray": {"address": None, "resources": {"num_cpus": 1, "num_gpus": 0}},
    "tune": {
        "n_trials": 2,
        "n_parallel": 2,
        "poll_s": 0.5,
        "sampler": {"kind": "random", "seed": 0},
        "space": {"divergence": ["tv"], "estimator": ["mc", "atomic"]},
    },
}


def test_a_local_study_runs_its_trials_through_the_fork_server(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    spec = tmp_path / "tune.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "tracking": {"uri": uri}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RAY_ADDRESS"))}
    env[LAUNCH_TAG] = tag = uuid.uuid4().hex  # marks this study's fork server (not another's)
    proc = subprocess.run(
        [sys.executable, "-m", "gppo.cli", "tune", str(spec)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    client = MlflowClient(uri)
    trials = [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id])
        if r.data.tags.get(M.TAG_ROLE) == M.ROLE_TRIAL
    ]
    assert len(trials) == 2, out[-4000:]
    for run in trials:
        assert run.info.status == "FINISHED"
        assert 0.0 <= run.data.metrics[M.eval_domain_metric(8)] <= 1.0
        assert run.data.metrics[M.PERF_FORKED] == 1.0  # imports done once, by the server
    assert not fork_servers(tag)  # the study's server ended with it
