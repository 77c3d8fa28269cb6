"""A cluster that stops answering mid-sweep: the launcher gives up after
``ray.unreachable_timeout_s`` with one line and exit 1, and leaves the runs for a relaunch."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.grid import load_plan
from gppo.sweep.cluster.connect import read_cluster, start_local_head, stop_local_head
from gppo.sweep.cluster.owner import pid_alive
from gppo.sweep.launch import Launcher

from .conftest import (
    env_without_ray,
    launcher_cmd,
    relaunch_finishes_each_cell_once,
    wait_for,
    write_spec,
)

pytestmark = pytest.mark.slow  # every test here starts Ray or a launcher

BOUND_S = 4.0


def test_launcher_gives_up_on_a_cluster_that_stopped_answering(tmp_path, ray_cluster):
    head_state = tmp_path / "head"
    head = start_local_head(head_state, num_cpus=2, num_gpus=0)  # this one gets killed
    try:
        spec = write_spec(
            tmp_path,
            head.address,  # any address given is a cluster of someone else's: remote
            name="gone",
            probe={"steps": 20, "sleep_s": 0.25},
            ray={"address": head.address, "unreachable_timeout_s": BOUND_S},
        )
        plan = load_plan(spec)
        out, err = tmp_path / "launch.out", tmp_path / "launch.err"
        with open(out, "w") as fo, open(err, "w") as fe:
            proc = subprocess.Popen(
                [*launcher_cmd(), "launch", str(spec)], stdout=fo, stderr=fe,
                env=env_without_ray(),
            )  # fmt: skip
        try:
            markers = [tmp_path / "m" / f"{c.id}.times" for c in plan.cells]
            wait_for(lambda: all(m.exists() for m in markers), 90, "both cells running")
            os.killpg(head.pid, signal.SIGKILL)  # the whole head, at once: no answer any more
            killed = time.monotonic()
            rc = proc.wait(timeout=BOUND_S + 60)
            took = time.monotonic() - killed
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        stop_local_head(head_state)
        shutil.rmtree(head.temp_dir or "/nonexistent", ignore_errors=True)

    assert rc == 1, (out.read_text(), err.read_text())
    assert BOUND_S - 0.5 <= took <= BOUND_S + 20, took
    lines = [ln for ln in err.read_text().splitlines() if ln.strip()]
    # the outage is one stamped event line of the launch's own output; the first failed poll's
    # reason depends on timing (refused, reset, timed out): any is fine
    said = out.read_text().splitlines()
    warned = [ln for ln in said if f"the Ray cluster at {head.address} does not answer (" in ln]
    assert len(warned) == 1 and "waiting up to 4 s" in warned[0], said
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ  outage ", warned[0]), warned
    last = lines[-1]  # the one line the CLI ends with, no traceback
    assert last.startswith(f"{spec}: the Ray cluster at {head.address} has not answered"), lines
    assert "ray.unreachable_timeout_s = 4" in last and "Traceback" not in err.read_text()

    # the runs are left RUNNING (the jobs may still run on a cluster that only went quiet)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name(plan.spec.experiment).experiment_id
    runs = client.search_runs([exp])
    cells = [r for r in runs if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL]
    assert len(cells) == 2 and all(r.info.status == "RUNNING" for r in cells)

    # a relaunch (on a cluster that answers) settles them and finishes the sweep
    result = Launcher(load_plan(spec), address=ray_cluster.address, poll_s=0.3).run()
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
    runs = client.search_runs([exp])
    assert not [r for r in runs if r.info.status == "RUNNING"]
    for cell in plan.cells:
        mine = sorted(
            (r for r in runs if r.data.tags.get(M.TAG_CELL_ID) == cell.id),
            key=lambda r: int(r.data.tags[M.TAG_ATTEMPT]),
        )
        first, *rest = mine
        if first.info.status == "FINISHED":  # its process outlived the head and logged its end
            assert first.data.tags[M.TAG_FINISHED] == "true" and not rest, cell.id
        else:  # ended by the relaunch as interrupted, then run again
            assert first.info.status == "FAILED", cell.id
            assert "interrupted" in first.data.tags[M.TAG_FAILURE], cell.id
            assert [r.info.status for r in rest] == ["FINISHED"], cell.id
    # the cells' processes of the killed head (in sessions of their own) are gone too
    pids = [
        int(line.split()[2])
        for m in markers
        for line in m.read_text().splitlines()
        if line.startswith("start ")
    ]
    deadline = time.monotonic() + 30
    while [p for p in pids if _is_probe(p)] and time.monotonic() < deadline:
        time.sleep(0.3)
    for pid in pids:
        if _is_probe(pid):  # still there after 30 s: end it, it is ours
            os.kill(pid, signal.SIGKILL)
    assert not [p for p in pids if _is_probe(p)]


def _is_probe(pid: int) -> bool:
    """Process ``pid`` is alive and still a probe cell (not a reused pid)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return pid_alive(pid) and b"probe_job.py" in cmd


def test_the_local_head_dying_mid_sweep_ends_the_launch_and_a_relaunch_finishes(tmp_path):
    """No address: the launcher starts its own head. Killing that head mid-cell ends the launch
    at once (exit 1, one line; the unreachable timeout is not waited out), and a relaunch starts
    a new head and finishes every cell, none finished twice."""
    spec = write_spec(
        tmp_path, None, name="headdies", probe={"steps": 20, "sleep_s": 0.25},
        ray={"unreachable_timeout_s": 600},
    )  # fmt: skip
    plan = load_plan(spec)
    state = tmp_path / ".gppo" / plan.sweep_id
    out, err = tmp_path / "launch.out", tmp_path / "launch.err"
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen(
            [*launcher_cmd(), "launch", str(spec)], stdout=fo, stderr=fe, env=env_without_ray(),
            cwd=tmp_path,
        )  # fmt: skip
    try:
        markers = [tmp_path / "m" / f"{c.id}.times" for c in plan.cells]
        wait_for(lambda: any(m.exists() for m in markers), 120, "a cell running")
        head = read_cluster(state)
        assert head is not None and head.local
        os.killpg(head.pid, signal.SIGKILL)
        killed = time.monotonic()
        rc = proc.wait(timeout=60)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 1, (out.read_text(), err.read_text())
    assert took < 20, took  # seen at the next poll, not after ray.unreachable_timeout_s
    last = [ln for ln in err.read_text().splitlines() if ln.strip()][-1]
    assert last == (
        f"{spec}: the local Ray head this sweep started (pid {head.pid}) has exited, and its "
        "jobs with it; their runs are left for a relaunch, which starts a new head and reruns "
        "every unfinished cell"
    ), err.read_text()[-2000:]

    relaunch_finishes_each_cell_once(spec, plan, f"sqlite:///{tmp_path}/mlflow.db", tmp_path)
    assert read_cluster(state) is None  # the new head was stopped when the sweep ended
