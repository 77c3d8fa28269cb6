"""Nothing outlives its attempt (real Ray, real MLflow, real processes and signals).

1. An attempt that fails leaving a process behind (in a session of its own, ignoring SIGTERM:
   a vLLM engine whose driver died, a fork server's cell) has it SIGKILLed after
   ``retries.kill_grace_s``, confirmed gone before the retry starts: the retry sees no
   predecessor alive, the log and the run say what it took.
2. A launch SIGTERMed mid-cell, on its own local head, whose cell ignores SIGTERM and left such a
   process behind, leaves no process it started on this machine (counted by an environment
   variable only the launch's own processes inherit).
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest
from helpers import LAUNCH_TAG, alive, none_left, tagged_processes
from mlflow.tracking import MlflowClient

from gppo import metrics as M

from .conftest import env_without_ray, launcher_cmd, wait_for, write_spec

pytestmark = pytest.mark.slow


def _lines(tmp_path: Path, cell: str, kind: str) -> list[str]:
    path = tmp_path / "m" / f"{cell}.{kind}"
    return path.read_text().split("\n")[:-1] if path.exists() else []


def test_a_retry_starts_only_once_its_predecessors_processes_are_gone(tmp_path, ray_cluster):
    spec = write_spec(
        tmp_path, ray_cluster.address,
        probe={"steps": 2, "fail_times": 1, "orphan_times": 1, "marker_dir": str(tmp_path / "m")},
        grid={"divergences": ["tv"], "estimators": ["mc"]},
        retries={"max": 1, "backoff_s": 0.2, "kill_grace_s": 1},
    )  # fmt: skip
    out = subprocess.run(
        [*launcher_cmd(), "launch", str(spec)], env={**env_without_ray(), "COLUMNS": "200"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    (orphan,) = map(int, _lines(tmp_path, "tv-mc-s0", "orphans"))
    assert not alive(orphan)
    # the retry found its predecessor's process gone
    assert _lines(tmp_path, "tv-mc-s0", "overlap") == ["attempt 1 alive 0", "attempt 2 alive 0"]
    killed = [ln for ln in log.splitlines() if "killed" in ln and "tv-mc-s0" in ln]
    assert killed and f"SIGKILLed after 1 s grace: {orphan}" in killed[0], log[-3000:]
    assert log.index(killed[0]) < log.index("tv-mc-s0  attempt 2"), log[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (exp,) = [e for e in client.search_experiments() if e.name == "probe"]
    runs = {
        r.data.tags[M.TAG_ATTEMPT]: r
        for r in client.search_runs([exp.experiment_id])
        if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL
    }
    assert str(orphan) in runs["1"].data.tags[M.TAG_PROCESSES]
    assert "SIGKILLed" in runs["1"].data.tags[M.TAG_FAILURE]
    assert M.TAG_PROCESSES not in runs["2"].data.tags  # it left nothing


def test_a_sigtermed_launch_leaves_no_process_it_started(tmp_path):
    tag = uuid.uuid4().hex
    spec = write_spec(
        tmp_path, None, name="sigterm",
        probe={
            "steps": 2, "hang_times": 1, "orphan_times": 1, "ignore_sigterm": True,
            "marker_dir": str(tmp_path / "m"),
        },
        grid={"divergences": ["tv"], "estimators": ["mc"]},
        retries={"max": 1, "backoff_s": 0.2, "kill_grace_s": 1},
    )  # fmt: skip
    launcher = subprocess.Popen(
        [*launcher_cmd(), "launch", str(spec)], env={**env_without_ray(), LAUNCH_TAG: tag},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: _lines(tmp_path, "tv-mc-s0", "orphans"), 180, "the cell's orphan")
        wait_for(lambda: (tmp_path / "m" / "tv-mc-s0.times").exists(), 30, "the cell")
        assert tagged_processes(tag)  # the head, its workers, the cell, its orphan
        launcher.send_signal(signal.SIGTERM)
        out, _ = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0, out[-3000:]
    (orphan,) = map(int, _lines(tmp_path, "tv-mc-s0", "orphans"))
    assert not alive(orphan), out[-3000:]
    assert none_left(tag) == [], out[-3000:]


def test_a_cell_killed_by_a_signal_says_which_signal(tmp_path, ray_cluster):
    spec = write_spec(
        tmp_path, ray_cluster.address, name="signalled",
        probe={"steps": 2, "hang_times": 1, "marker_dir": str(tmp_path / "m")},
        grid={"divergences": ["tv"], "estimators": ["mc"]},
        retries={"max": 1, "backoff_s": 0.2, "stall_timeout_s": 0},
    )  # fmt: skip
    launcher = subprocess.Popen(
        [*launcher_cmd(), "launch", str(spec)], env={**env_without_ray(), "COLUMNS": "200"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        started = wait_for(lambda: _lines(tmp_path, "tv-mc-s0", "times"), 120, "the cell")
        pid = int(started[0].split()[2])
        wait_for(lambda: alive(pid) and _has_hung(tmp_path), 60, "the cell to hang")
        psutil.Process(pid).kill()
        out, _ = launcher.communicate(timeout=180)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, out[-3000:]
    (retry,) = [ln for ln in out.splitlines() if "retrying" in ln and "tv-mc-s0" in ln]
    assert retry.endswith("retry 1/1: job FAILED: killed by SIGKILL"), retry


def _has_hung(tmp_path: Path) -> bool:
    """The probe says "probe hanging on purpose" in its job log only; its run has step 1."""
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    try:
        (exp,) = [e for e in client.search_experiments() if e.name == "signalled"]
    except ValueError:
        return False
    return any(M.TRAIN_SCORE in r.data.metrics for r in client.search_runs([exp.experiment_id]))
