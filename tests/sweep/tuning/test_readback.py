"""Objective and intermediate values read back from a real MLflow store; trial ownership."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gppo import metrics as M
from gppo.store.tracking import Tracking, log_metrics
from gppo.sweep.tuning.attrs import HEARTBEAT, OWNER, Owner, owner_alive
from gppo.sweep.tuning.readback import intermediate_values, objective_value


def test_objective_and_intermediate_values(tmp_path: Path) -> None:
    tracking = Tracking(f"sqlite:///{tmp_path}/mlflow.db")
    client = tracking.client
    exp = client.create_experiment("x")
    run = client.create_run(exp).info.run_id
    assert objective_value(tracking, run, metric=None, k=8) is None
    for step in (1, 2, 3):
        log_metrics(client, run, {M.TRAIN_SCORE: step / 10}, step=step)
    log_metrics(
        client, run, {M.TRAIN_SCORE: 0.25}, step=2, timestamp_ms=int(time.time() * 1000) + 5
    )
    assert intermediate_values(tracking, run, M.TRAIN_SCORE) == [(1, 0.1), (2, 0.25), (3, 0.3)]
    # per-benchmark only: the mean over benchmarks at the last step where all were evaluated
    log_metrics(client, run, {M.eval_metric("a", 8): 0.2, M.eval_metric("b", 8): 0.4}, step=0)
    log_metrics(client, run, {M.eval_metric("a", 8): 0.6, M.eval_metric("b", 8): 0.8}, step=3)
    log_metrics(client, run, {M.eval_metric("a", 4): 0.0}, step=3)  # another k: ignored
    assert abs(objective_value(tracking, run, metric=None, k=8) - 0.7) < 1e-9
    log_metrics(client, run, {M.eval_domain_metric(8): 0.65}, step=3)  # the backend's own mean
    assert objective_value(tracking, run, metric=None, k=8) == 0.65
    assert objective_value(tracking, run, metric=M.TRAIN_SCORE, k=8) == 0.3
    assert objective_value(tracking, run, metric="train/nothing", k=8) is None


@pytest.mark.slow
def test_owner_alive() -> None:
    me = Owner.me()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now = time.time()
    host = socket.gethostname()
    assert owner_alive({OWNER: me.as_attr()}, me=me, stale_after_s=60, started_at=now)
    # an earlier tuner of this same process is over; a dead pid on this host is over
    old = {**me.as_attr(), "token": "old"}
    assert not owner_alive({OWNER: old}, me=me, stale_after_s=60, started_at=now)
    gone = {"host": host, "pid": dead.pid, "started": None, "token": "t"}
    assert not owner_alive({OWNER: gone}, me=me, stale_after_s=60, started_at=now)
    parent = {"host": host, "pid": os.getppid(), "started": None, "token": "p"}
    assert owner_alive({OWNER: parent}, me=me, stale_after_s=60, started_at=now)
    # another host: only the heartbeat tells
    far = {"host": host + "-other", "pid": 1, "started": None, "token": "f"}
    assert owner_alive({OWNER: far, HEARTBEAT: now - 5}, me=me, stale_after_s=60, started_at=now)
    assert not owner_alive(
        {OWNER: far, HEARTBEAT: now - 90}, me=me, stale_after_s=60, started_at=now
    )
    assert not owner_alive({}, me=me, stale_after_s=60, started_at=now - 90)
