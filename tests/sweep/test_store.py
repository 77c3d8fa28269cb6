"""The SQLite store under many writers: no metric lost to "database is locked"."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from gppo.store.tracking import Tracking

WRITER = r"""
import os, sys, time
from mlflow.tracking import MlflowClient
from gppo.store.tracking import log_metrics, retry_locked
uri, run_id, barrier, steps, me = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
client = MlflowClient(uri)
client.get_run(run_id)  # connect before the barrier
open(os.path.join(barrier, f"ready-{os.getpid()}"), "w").close()
while not os.path.exists(os.path.join(barrier, "go")):
    time.sleep(0.005)
for step in range(steps):
    log_metrics(client, run_id, {f"m{j}": me * 1000 + step * 10 + j for j in range(10)}, step=step)
    if step % 25 == 0:
        retry_locked(lambda: client.set_tag(run_id, "progress", str(step)))
print("ok")
"""


@pytest.mark.slow
def test_eight_concurrent_writers_lose_nothing(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracking = Tracking(uri)
    tracking.init_store()  # schema created once, before the writers start
    exp = tracking.experiment_id("writers")
    client = MlflowClient(uri)
    n_proc, steps = 8, 30
    # two writers per run for some runs: the same run written by several processes at once
    runs = [client.create_run(exp).info.run_id for _ in range(6)]
    targets = [runs[i % len(runs)] for i in range(n_proc)]
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, uri, run_id, str(barrier), str(steps), str(me)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me, run_id in enumerate(targets)
    ]
    deadline = time.monotonic() + 180
    while len(list(barrier.glob("ready-*"))) < n_proc and time.monotonic() < deadline:
        time.sleep(0.1)
    (barrier / "go").touch()  # all writers begin at the same moment
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0] * n_proc, [
        (p.returncode, [ln for ln in o[1].splitlines() if "Error" in ln][-6:])
        for p, o in zip(procs, outs, strict=True)
    ]
    for run_id in runs:
        writers = [me for me, target in enumerate(targets) if target == run_id]
        for j in range(10):
            hist = client.get_metric_history(run_id, f"m{j}")
            got = sorted((m.step, m.value) for m in hist)
            want = sorted(
                (st, float(me * 1000 + st * 10 + j)) for me in writers for st in range(steps)
            )
            assert got == want, (run_id, j, len(got), len(want))
