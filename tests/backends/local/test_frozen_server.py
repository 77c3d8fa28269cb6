"""The testbed's fork server frozen mid-sweep (SIGSTOP, issue 46): a sweep with more cells than
slots still finishes every cell and exits 0. The launcher checks the server before it hands it
each job: the frozen one is SIGKILLed, the later cells import their own modules (or go to its
replacement), and when the launch ends no process it started is left, the frozen server
included (counted by an environment variable only its own processes inherit)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from helpers import LAUNCH_TAG, alive, command_in_background, none_left
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.processes import registry_root

pytestmark = pytest.mark.slow

NAME = "frozen-server"
SPEC = {
    "name": NAME, "backend": "local",
    "local": {"domain": "math", "steps": 6, "prompts_per_step": 4, "eval_prompts": 4},
    "grid": {"divergences": ["tv", "kl"], "estimators": ["mc"]}, "seeds": 2, "eval": {"k": 2},
    "ray": {"max_concurrent": 2, "resources": {"num_cpus": 1, "num_gpus": 0}},
    # without the check, a cell handed to the frozen server stalls, and so does every retry;
    # with it, a cell that imports its own modules on a loaded machine may stall once too
    "retries": {"max": 1, "backoff_s": 0.5, "stall_timeout_s": 25, "kill_grace_s": 1},
}  # fmt: skip


def _fork_server(tag: str) -> psutil.Process | None:
    """The launch's fork server: started with its tag, running the server's module."""
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if "gppo.backends.local.forkserver" in cmd and proc.environ().get(LAUNCH_TAG) == tag:
                return proc
        except (psutil.Error, OSError):
            continue
    return None


def _forked_attempts(since: float) -> int:
    """Attempts of this sweep whose cell the fork server has forked (registered) since ``since``."""
    return sum(
        1
        for folder in registry_root().glob(f"gppo-{NAME}-*")
        if folder.stat().st_mtime >= since and any(folder.iterdir())
    )


@pytest.mark.timeout(900)
def test_a_fork_server_frozen_mid_sweep_costs_no_cell(tmp_path: Path) -> None:
    started = time.time()
    frozen = None
    try:
        with command_in_background(tmp_path, SPEC) as (proc, log, uri, tag):
            deadline = time.time() + 600
            while frozen is None:  # the first two cells are forked: freeze the server
                assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
                server = _fork_server(tag)
                if server is not None and _forked_attempts(started) >= 2:
                    server.send_signal(signal.SIGSTOP)
                    frozen = server.pid
                time.sleep(0.1)
            assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        if frozen is not None and alive(frozen):
            os.kill(frozen, signal.SIGKILL)
            os.kill(frozen, signal.SIGCONT)
    text = log.read_text()
    assert f"fork server (pid {frozen}) is stopped" in text, text[-3000:]
    client = MlflowClient(uri)
    runs = [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id])
        if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL
    ]
    finished = {r.data.tags[M.TAG_CELL_ID] for r in runs if r.info.status == "FINISHED"}
    assert len(finished) == 4, text[-3000:]  # every cell (a retry may be what finished it)
    assert not alive(frozen)
    assert none_left(tag) == [], text[-2000:]
