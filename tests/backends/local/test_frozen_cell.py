"""A testbed cell frozen mid-training (SIGSTOP: it can act on no signal but SIGKILL), under
``launch`` and under ``tune``, each on its own local head with the fork server: stall detection
stops the attempt, the fork server's cell (forked outside the job's process group, found through
its registration) is SIGKILLed after ``retries.kill_grace_s`` and gone before the retry is
submitted, the cell (trial) finishes once, and when the command ends no process it started is
left on this machine (counted by an environment variable only its own processes inherit)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from helpers import alive, command_in_background, none_left
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.processes import registry_root

pytestmark = pytest.mark.slow

LOCAL = {"domain": "math", "steps": 40, "prompts_per_step": 8, "eval_prompts": 8}
RETRIES = {
    "max": 1, "backoff_s": 0.5, "stall_timeout_s": 8, "first_step_timeout_s": 300,
    "kill_grace_s": 1,
}  # fmt: skip
SPECS = {
    "launch": {
        "name": "frozen-launch", "backend": "local", "local": LOCAL,
        "grid": {"divergences": ["tv"], "estimators": ["mc"]}, "seeds": 1, "eval": {"k": 8},
        "ray": {"max_concurrent": 1, "resources": {"num_cpus": 1, "num_gpus": 0}},
        "retries": RETRIES,
    },
    "tune": {
        "name": "frozen-tune", "backend": "local", "local": LOCAL, "eval": {"k": 8},
        "seeds": [0], "ray": {"address": None, "resources": {"num_cpus": 1, "num_gpus": 0}},
        "retries": RETRIES,
        "tune": {
            "n_trials": 1, "n_parallel": 1, "poll_s": 0.5, "pruner": {"kind": "none"},
            "sampler": {"kind": "random", "seed": 0},
            "space": {"divergence": ["tv"], "estimator": ["mc"]},
        },
    },
}  # fmt: skip


def _first_attempts_cell(name: str, since: float) -> int | None:
    """The pid of the fork server's cell of the first attempt of sweep (study) ``name`` since
    ``since`` (its submission id: ``gppo-<name>-...``)."""
    for folder in registry_root().glob(f"gppo-{name}-*"):
        if folder.stat().st_mtime < since:
            continue
        for entry in folder.iterdir():
            return int(entry.name.split("-")[0])
    return None


def _steps(uri: str) -> int:
    client = MlflowClient(uri)
    best = 0
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id]):
            if M.TRAIN_SCORE in run.data.metrics:
                best = max(
                    best,
                    max(m.step for m in client.get_metric_history(run.info.run_id, M.TRAIN_SCORE)),
                )
    return best


@pytest.mark.timeout(900)
@pytest.mark.parametrize("command", ["launch", "tune"])
def test_a_frozen_cell_is_killed_and_gone_before_its_retry(tmp_path: Path, command: str) -> None:
    started = time.time()
    frozen = None
    try:
        with command_in_background(tmp_path, SPECS[command], command) as (proc, log, uri, tag):
            deadline = time.time() + 600
            while frozen is None:
                assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
                pid = _first_attempts_cell(SPECS[command]["name"], started)
                if pid is not None and _steps(uri) >= 2:
                    os.kill(pid, signal.SIGSTOP)
                    frozen = pid
                time.sleep(0.2)
            # the retry's submission (launch: attempt 2; tune: the trial's attempt 1000) is
            # logged only once the frozen cell is gone
            while not re.search(r"attempt (2|1000)\b", log.read_text()):
                assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            assert not alive(frozen), log.read_text()[-3000:]
            assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        if frozen is not None and alive(frozen):
            os.kill(frozen, signal.SIGKILL)
    text = log.read_text()
    assert "stalled" in text and f"SIGKILLed after 1 s grace: {frozen}" in text, text[-3000:]
    client = MlflowClient(uri)
    runs = [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id])
        if r.data.tags.get(M.TAG_ROLE) in (M.ROLE_CELL, M.ROLE_TRIAL)
    ]
    finished = [r for r in runs if r.info.status == "FINISHED"]
    assert len(finished) == 1, [(r.info.status, r.data.tags.get(M.TAG_ATTEMPT)) for r in runs]
    assert M.TAG_PROCESSES not in finished[0].data.tags  # the retry left nothing behind
    stalled = [r for r in runs if M.TAG_PROCESSES in r.data.tags]
    assert stalled and re.search(rf"\b{frozen}\b", stalled[0].data.tags[M.TAG_PROCESSES])
    assert none_left(tag) == [], text[-2000:]
