"""Two TRL cells under ``gppo-sweep launch`` on this CPU, one of them frozen mid-training
(SIGSTOP: it can act on no signal but SIGKILL): stall detection stops the attempt, its process is
gone before the retry is submitted, the retry resumes TRL's checkpoint in the same MLflow run,
every training step is in the run once, and both cells finish with the base and final
evaluations (the backend protocol). Nothing is mocked: a real Ray head, TRL, a SQLite MLflow
store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from helpers import alive, cell_runs

from gppo import metrics as M
from gppo.backends.cell_run import protocol_violations
from gppo.metrics import PERF_RESUMED_FROM as RESUMED_FROM
from gppo.store.tracking import Tracking

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
PRESET = REPO / "configs" / "trl-cpu-testbed.yaml"
STEPS = 8
SAVE_EVERY = 2


def _cell_runs(uri: str) -> dict[str, object]:
    return cell_runs(Tracking(uri).client)


def _logged_step(uri: str, cell_id: str) -> int:
    run = _cell_runs(uri).get(cell_id)
    if run is None:
        return 0
    history = Tracking(uri).client.get_metric_history(run.info.run_id, M.TRAIN_SCORE)
    return max((int(m.step) for m in history), default=0)


def _cell_process(cell_id: str) -> psutil.Process | None:
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "gppo.backends.trl" in cmd and f'"id":"{cell_id}"' in cmd and "python" in cmd:
            return proc
    return None


@pytest.mark.timeout(2400)
def test_a_frozen_trl_attempt_is_ended_then_resumes_its_checkpoint_in_the_same_run(tmp_path):
    """Over 120 s (about 2.5 min on 2 cores): two TRL cells, one frozen until stall detection
    ends its attempt, then the retry's TRL start and the rest of its steps from the checkpoint."""
    spec = yaml.safe_load(PRESET.read_text())
    spec["seeds"] = [0]  # tv/mc and tv/atomic
    spec["trl"].update(steps=STEPS, save_every=SAVE_EVERY, checkpoint_dir=str(tmp_path / "ckpt"))
    spec["tracking"] = {"uri": f"sqlite:///{tmp_path}/mlflow.db"}
    # a stall limit well past a step on two busy cores (1-3 s), well short of the test's budget
    spec["retries"] = {
        "max": 2, "backoff_s": 1.0, "stall_timeout_s": 45, "first_step_timeout_s": 900,
        "kill_grace_s": 2,
    }  # fmt: skip
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RAY_ADDRESS"))}
    env.update(GPPO_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")
    log = tmp_path / "launch.log"
    gppo_sweep = Path(sys.executable).parent / "gppo-sweep"
    with log.open("wb") as out:
        launcher = subprocess.Popen(
            [str(gppo_sweep), "launch", str(path)], cwd=tmp_path, env=env, stdout=out, stderr=out
        )
    proc = None
    try:
        deadline = time.time() + 1200
        # a checkpoint is saved at step SAVE_EVERY; freeze once a later step is in the run
        while _logged_step(uri, "tv-mc-s0") <= SAVE_EVERY:
            assert launcher.poll() is None and time.time() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
        proc = _cell_process("tv-mc-s0")
        assert proc is not None, "the tv-mc-s0 cell process"
        proc.send_signal(signal.SIGSTOP)
        # the retry is submitted only once the frozen process is gone
        while "tv-mc-s0  attempt 2" not in log.read_text():
            assert launcher.poll() is None and time.time() < deadline, log.read_text()[-4000:]
            time.sleep(0.2)
        assert not alive(proc), log.read_text()[-4000:]
        assert launcher.wait(timeout=1500) == 0, log.read_text()[-5000:]
    finally:
        if launcher.poll() is None:
            launcher.kill()
        if proc is not None and alive(proc):
            proc.kill()
    runs = _cell_runs(uri)
    client = Tracking(uri).client
    killed = runs["tv-mc-s0"]
    assert killed.data.tags[M.TAG_ATTEMPT] == "2", log.read_text()[-3000:]
    assert "stalled     tv-mc-s0  attempt 1" in log.read_text()
    assert killed.data.metrics[RESUMED_FROM] >= SAVE_EVERY
    for cell_id, run in runs.items():
        steps = [int(m.step) for m in client.get_metric_history(run.info.run_id, M.TRAIN_SCORE)]
        assert sorted(steps) == list(range(1, STEPS + 1)), (cell_id, sorted(steps))  # each once
        problems = protocol_violations(
            client, run.info.run_id, eval_k=8, benchmarks=("add-small", "add", "sub", "add3"),
            final_step=STEPS,
        )  # fmt: skip
        assert problems == [], (cell_id, problems)
        assert run.info.status == "FINISHED"
    assert (tmp_path / "reports").is_dir()
