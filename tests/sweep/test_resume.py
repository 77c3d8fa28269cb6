"""Crash safety: kill -9 of the launcher mid-sweep, Ctrl-C, --detach, a local head and cancel."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from helpers import LAUNCH_TAG, none_left
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.grid import load_plan
from gppo.sweep.cluster.owner import pid_alive
from gppo.sweep.launch import Launcher
from gppo.sweep.monitor.commands import cell_logs, sweep_status

from .conftest import env_without_ray, launcher_cmd, wait_for, write_spec

pytestmark = pytest.mark.slow  # every test here starts Ray or a launcher


def all_runs(tmp_path: Path, experiment: str):
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], max_results=1000) if exp else []


def marker_lines(tmp_path: Path, cell: str, kind: str) -> list[str]:
    path = tmp_path / "m" / f"{cell}.{kind}"
    return path.read_text().splitlines() if path.exists() else []


def intervals(tmp_path: Path, cell: str) -> list[tuple[float, float]]:
    """(start, end) of each process of a cell (end = +inf if it never ended)."""
    starts, ends = {}, {}
    for line in marker_lines(tmp_path, cell, "times"):
        kind, t, pid = line.split()
        (starts if kind == "start" else ends)[pid] = float(t)
    return sorted((s, ends.get(pid, float("inf"))) for pid, s in starts.items())


def test_kill9_of_the_launcher_mid_sweep(tmp_path, ray_cluster):
    cells = ["tv-mc-s0", "kl-mc-s0", "chi2-mc-s0", "hellinger-mc-s0"]
    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="kill9",
        probe={"steps": 4, "sleep_s": 0.8, "marker_dir": str(tmp_path / "m")},
        grid={"divergences": ["tv", "kl", "chi2", "hellinger"], "estimators": ["mc"]},
    )
    proc = subprocess.Popen(
        [*launcher_cmd(), "launch", str(spec)], env=env_without_ray(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def mid_sweep():
        ended = [
            c
            for c in cells
            if any(line.startswith("end") for line in marker_lines(tmp_path, c, "times"))
        ]
        running = [
            c for c in cells
            if marker_lines(tmp_path, c, "times") and not any(
                line.startswith("end") for line in marker_lines(tmp_path, c, "times"))
        ]  # fmt: skip
        return (ended, running) if ended and running else None

    ended_before, running_at_kill = wait_for(mid_sweep, 150, "one cell done and one running")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert any(r.info.status == "RUNNING" for r in all_runs(tmp_path, "kill9"))

    result = Launcher(load_plan(spec), poll_s=0.5).run()
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
    runs = all_runs(tmp_path, "kill9")
    assert not [r for r in runs if r.info.status == "RUNNING"]  # nothing stuck
    for cell in cells:
        mine = [r for r in runs if r.data.tags.get(M.TAG_CELL_ID) == cell]
        assert [r.info.status for r in mine].count("FINISHED") == 1, cell
        # never two copies of one cell at once
        iv = intervals(tmp_path, cell)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(iv)), (cell, iv)
    for cell in ended_before:  # a finished cell never reruns
        assert len(marker_lines(tmp_path, cell, "attempts")) == 1, cell
    for cell in running_at_kill:  # the running job was re-attached, not restarted
        assert len(marker_lines(tmp_path, cell, "attempts")) == 1, cell


def test_ctrl_c_detach_then_ctrl_c_stop_then_resume(tmp_path, ray_cluster):
    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="ctrlc",
        probe={"steps": 40, "sleep_s": 0.5, "marker_dir": str(tmp_path / "m")},
    )
    plan = load_plan(spec)
    client = ray_cluster.client()
    sids = [f"gppo-{plan.sweep_id}-{c.id}-a1" for c in plan.cells]

    def jobs_running():
        try:
            return all(client.get_job_status(s).value == "RUNNING" for s in sids)
        except RuntimeError:
            return False

    # 1. Ctrl-C with --detach: the jobs keep running, their runs stay RUNNING
    proc = subprocess.Popen(
        [*launcher_cmd(), "launch", str(spec), "--detach"], env=env_without_ray(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    wait_for(jobs_running, 120, "both jobs running")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "jobs left running" in out
    assert jobs_running()
    assert {r.state for r in sweep_status(plan)} == {"running"}

    # 2. Ctrl-C without --detach: re-attaches, then stops the jobs; runs end KILLED
    proc = subprocess.Popen(
        [*launcher_cmd(), "launch", str(spec)], env=env_without_ray(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    marker = tmp_path / ".gppo" / plan.sweep_id / "launcher.json"
    wait_for(marker.exists, 120, "the launcher to re-attach")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 130, out
    assert {client.get_job_status(s).value for s in sids} == {"STOPPED"}
    runs = all_runs(tmp_path, "ctrlc")
    assert {r.info.status for r in runs if r.data.tags[M.TAG_ROLE] == M.ROLE_CELL} == {"KILLED"}
    assert not [r for r in runs if r.info.status == "RUNNING"]
    for c in plan.cells:  # attempt 1 was never restarted while it ran
        assert len(marker_lines(tmp_path, c.id, "attempts")) == 1


def test_local_head_outlives_a_detached_launcher_until_cancel(tmp_path):
    spec = write_spec(
        tmp_path,
        None,
        name="localhead",
        probe={
            "steps": 60, "sleep_s": 0.5, "orphan_times": 1, "marker_dir": str(tmp_path / "m"),
        },
        grid={"divergences": ["kl"], "estimators": ["mc"]},
        retries={"kill_grace_s": 1},
    )  # fmt: skip
    plan = load_plan(spec)
    state = tmp_path / ".gppo" / plan.sweep_id
    tag = uuid.uuid4().hex  # inherited by every process the launch starts (head, workers, cells)
    proc = subprocess.Popen(
        [*launcher_cmd(), "launch", str(spec), "--detach"], env={**env_without_ray(), LAUNCH_TAG: tag},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: marker_lines(tmp_path, "kl-mc-s0", "times"), 180, "the job to start")
        info = json.loads((state / "cluster.json").read_text())
        assert info["address"].startswith("http://127.0.0.1:") and info["local"]
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert pid_alive(info["pid"])  # the head outlived the launcher
        (row,) = sweep_status(plan)
        assert row.state == "running" and row.job_status == "RUNNING"
        text = "".join(cell_logs(plan, "kl-mc-s0"))
        assert "probe kl-mc-s0 attempt 1" in text
        out = subprocess.run(
            [*launcher_cmd(), "cancel", str(spec)], env=env_without_ray(),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0 and "stopped 1 cell(s): kl-mc-s0" in out.stdout
        wait_for(lambda: not pid_alive(info["pid"]), 30, "the head to stop")
        # the process the cell left in a session of its own, ignoring SIGTERM, went with it
        (orphan,) = map(int, marker_lines(tmp_path, "kl-mc-s0", "orphans"))
        assert not pid_alive(orphan)
        # nothing the detached launch started is left once cancel has ended (Ray's last
        # processes take a moment after `ray start --block` returns)
        assert none_left(tag, 15) == []
        assert not (state / "cluster.json").exists()
        runs = all_runs(tmp_path, "localhead")
        assert {r.info.status for r in runs} == {"KILLED"}
        (row,) = sweep_status(plan)
        assert row.state == "stopped"
        # the logs survive the head (read from its temp dir)
        assert "probe kl-mc-s0 attempt 1" in "".join(cell_logs(plan, "kl-mc-s0"))

        # a launch that runs to the end stops the head it started
        fast = write_spec(
            tmp_path, None, name="localhead",
            probe={"steps": 1, "marker_dir": str(tmp_path / "m")},
            grid={"divergences": ["kl"], "estimators": ["mc"]},
        )  # fmt: skip
        result = Launcher(load_plan(fast), poll_s=0.5).run()
        assert result.ok
        assert not (state / "cluster.json").exists()
        last = json.loads((state / "last_cluster.json").read_text())
        assert last["address"] != info["address"]
    finally:
        if proc.poll() is None:
            proc.kill()
        from gppo.sweep.cluster.connect import stop_local_head

        stop_local_head(state)
