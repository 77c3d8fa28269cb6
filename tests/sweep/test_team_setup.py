"""Beyond one machine, on the real engines (docs/cluster-guide.md, "Team setup"): a two-node Ray
cluster on loopback (cells pinned to the worker node by a custom resource), a real ``mlflow
server`` backed by PostgreSQL, the launcher killed with -9 and relaunched, two launchers of one
sweep from two working directories, and the ``max_concurrent`` gate.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from ray.job_submission import JobSubmissionClient

from gppo import metrics as M
from gppo.grid import load_plan
from gppo.sweep.control import sweep_status

from .conftest import env_without_ray, launcher_cmd, write_spec
from .servers import WORKER_RESOURCE

pytestmark = pytest.mark.slow


def team_spec(tmp_path: Path, server, name: str, cells: int = 4, **probe) -> Path:
    divs = ["tv", "kl", "chi2", "hellinger", "alpha:0.5", "alpha:2"][:cells]
    return write_spec(
        tmp_path,
        None,  # the cluster comes from --address or RAY_ADDRESS
        name=name,
        probe={"steps": 3, "sleep_s": 0.5, **probe},
        grid={"divergences": divs, "estimators": ["mc"]},
        tracking={"uri": server.uri},
        ray={"resources": {"num_cpus": 0.5, "custom": {WORKER_RESOURCE: 1}}},
    )


def cli(args: list[str], cwd: Path, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [*launcher_cmd(), *args], cwd=cwd, env=env or env_without_ray(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw,
    )  # fmt: skip


def cell_runs(server, experiment: str) -> list:
    client = MlflowClient(server.uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    flt = f"tags.`{M.TAG_ROLE}` = '{M.ROLE_CELL}'"
    return client.search_runs([exp.experiment_id], flt, max_results=1000)


def wait_for(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """Most intervals open at one instant (an interval is [start, end))."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def test_multinode_launch_kill9_relaunch_status_report(
    tmp_path, monkeypatch, ray_two_nodes, mlflow_server
):
    """--address, kill -9 mid-sweep, relaunch through RAY_ADDRESS from another directory: every
    cell finished exactly once, every job's driver on the worker node, in the server's store;
    status; the report's files in the server's artifact destination."""
    spec = team_spec(tmp_path, mlflow_server, "team", sleep_s=1.0)
    plan = load_plan(spec)
    first = tmp_path / "a"
    first.mkdir()
    proc = cli(["launch", str(spec), "--address", ray_two_nodes.address], first)

    def mid_sweep():
        runs = cell_runs(mlflow_server, "team")
        done = [r for r in runs if r.data.tags.get(M.TAG_FINISHED) == "true"]
        going = [r for r in runs if "probe.start" in r.data.tags and "probe.end" not in r.data.tags]
        return done and going

    wait_for(mid_sweep, 180, "one cell finished and one running")
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert any(r.info.status == "RUNNING" for r in cell_runs(mlflow_server, "team"))

    second = tmp_path / "b"  # another working directory: nothing local is shared
    second.mkdir()
    env = {**env_without_ray(), "RAY_ADDRESS": ray_two_nodes.address}
    out, _ = cli(["launch", str(spec)], second, env).communicate(timeout=300)
    assert "4/4 done" in out, out
    assert "report (tables and figures)" in out, out  # the table was printed above it

    runs = cell_runs(mlflow_server, "team")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    jobs = JobSubmissionClient(ray_two_nodes.address)
    for cell in plan.cells:
        mine = [r for r in runs if r.data.tags[M.TAG_CELL_ID] == cell.id]
        finished = [r for r in mine if r.data.tags.get(M.TAG_FINISHED) == "true"]
        assert len(finished) == 1 and finished[0].info.status == "FINISHED", cell.id
        for run in mine:  # every attempt's driver ran on the worker node
            sid = run.data.tags[M.TAG_RAY_JOB_ID]
            info = jobs.get_job_info(sid)
            assert info.driver_node_id == ray_two_nodes.worker_node_id, (sid, info)

    monkeypatch.setenv("RAY_ADDRESS", ray_two_nodes.address)
    rows = sweep_status(plan)
    assert {r.state for r in rows} == {"done"} and len(rows) == 4

    # the report's files went to the parent run's artifacts: where the server stores them
    client = MlflowClient(mlflow_server.uri)
    exp = client.get_experiment_by_name("team").experiment_id
    parent = client.search_runs([exp], f"tags.`{M.TAG_ROLE}` = '{M.ROLE_SWEEP}'")[0]
    listed = [f.path for f in client.list_artifacts(parent.info.run_id, "report")]
    assert listed, "no report artifacts"
    on_disk = list(mlflow_server.artifacts.rglob(Path(listed[0]).name))
    assert any(parent.info.run_id in str(p) for p in on_disk), on_disk


def test_two_launchers_from_two_directories_one_refuses(tmp_path, ray_two_nodes, mlflow_server):
    """The one-launcher lock holds per sweep with a server store (a lease in its parent run)."""
    spec = team_spec(tmp_path, mlflow_server, "lease", cells=2, sleep_s=1.5)
    dirs = [tmp_path / "x", tmp_path / "y"]
    for d in dirs:
        d.mkdir()
    first = cli(["launch", str(spec), "--address", ray_two_nodes.address], dirs[0])
    wait_for(lambda: cell_runs(mlflow_server, "lease"), 120, "the first launcher's runs")
    second = cli(["launch", str(spec), "--address", ray_two_nodes.address], dirs[1])
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 1, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and "another launcher is running sweep" in lines[0], out
    assert f"pid {first.pid}" in lines[0], out
    out, _ = first.communicate(timeout=240)
    assert first.returncode == 0 and "2/2 done" in out, out
    runs = cell_runs(mlflow_server, "lease")
    assert len(runs) == 2  # the refused launcher started nothing
    # released on exit: a relaunch proceeds at once (and finds everything done)
    out, _ = cli(["launch", str(spec), "--address", ray_two_nodes.address], dirs[1]).communicate(
        timeout=180
    )
    assert "2/2 done" in out, out
    assert len(cell_runs(mlflow_server, "lease")) == 2


def test_max_concurrent_gate_over_six_slow_cells(tmp_path, ray_two_nodes, mlflow_server):
    """max_concurrent: 2 while the worker node could run 4: never more than 2 at once."""
    spec = team_spec(tmp_path, mlflow_server, "gate", cells=6, steps=2, sleep_s=0.8)
    proc = cli(["launch", str(spec), "--address", ray_two_nodes.address], tmp_path)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "6/6 done" in out, out
    runs = cell_runs(mlflow_server, "gate")
    assert len(runs) == 6
    # the cell processes' own spans, recorded in their runs
    spans = [(float(r.data.tags["probe.start"]), float(r.data.tags["probe.end"])) for r in runs]
    assert max_overlap(spans) == 2, spans
    # and the Ray jobs' spans as Ray recorded them
    jobs = JobSubmissionClient(ray_two_nodes.address)
    infos = [jobs.get_job_info(r.data.tags[M.TAG_RAY_JOB_ID]) for r in runs]
    assert max_overlap([(i.start_time, i.end_time) for i in infos]) <= 2
    assert {i.driver_node_id for i in infos} == {ray_two_nodes.worker_node_id}
