"""The remote-cluster guard, the spec fields it reads, and the launcher lease (real MLflow store).

No Ray cluster is needed: the guard stops before anything is contacted, and the lease lives in an
MLflow run (here in a SQLite store; test_team_setup.py runs it against an ``mlflow server``).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gppo.cli import app
from gppo.grid import SpecError, load_plan
from gppo.store.tracking import Tracking
from gppo.sweep.cluster.guard import StoreNotShared, check_store_reachable, is_loopback_address
from gppo.sweep.cluster.lock import (
    HEARTBEAT_TAG,
    LEASE_PARAM,
    RELEASED_TAG,
    STALE_S,
    LaunchBusy,
    Lease,
)

from .conftest import write_spec
from .tuning.conftest import spec_dict, write

REMOTE = "http://10.11.12.13:8265"


def nothing_written(tmp_path: Path) -> bool:
    names = {p.name for p in tmp_path.iterdir()}
    return not names & {"mlflow.db", "optuna.db", ".gppo", "m", "reports", "mlruns"}


@pytest.mark.parametrize("how", ["flag", "spec", "env"])
def test_launch_remote_address_with_sqlite_store_is_refused(tmp_path, monkeypatch, how):
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, REMOTE if how == "spec" else None)
    args = ["launch", str(spec)] + (["--address", REMOTE] if how == "flag" else [])
    if how == "env":
        monkeypatch.setenv("RAY_ADDRESS", "10.11.12.13:8265")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    line = lines[0]
    assert line.startswith(f"{spec}: tracking.uri: sqlite:///{tmp_path}/mlflow.db")
    assert "10.11.12.13:8265" in line and "tracking.shared_filesystem: true" in line
    assert "http://HOST:PORT" in line and "nothing was submitted" in line
    assert nothing_written(tmp_path), sorted(p.name for p in tmp_path.iterdir())


def test_tune_remote_address_with_sqlite_store_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, spec_dict(tmp_path))
    result = CliRunner().invoke(app, ["tune", str(path), "--address", REMOTE])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith(f"{path}: tracking.uri: sqlite:///"), result.output
    assert "tracking.shared_filesystem: true" in lines[-1]
    assert nothing_written(tmp_path), sorted(p.name for p in tmp_path.iterdir())


def test_guard_rules():
    sqlite = "sqlite:////shared/mlflow.db"
    for ok_address in (None, "http://127.0.0.1:8265", "localhost:8265", "http://[::1]:8265"):
        check_store_reachable(ok_address, sqlite, shared_filesystem=False)
    for uri in ("http://mlflow.team:5000", "https://x", "postgresql+psycopg://u@db/mlflow"):
        check_store_reachable(REMOTE, uri, shared_filesystem=False)
    check_store_reachable(REMOTE, sqlite, shared_filesystem=True)  # the user confirmed it
    for uri in (sqlite, "file:///shared/mlruns", "/shared/mlruns"):
        with pytest.raises(StoreNotShared, match=r"tracking\.uri"):
            check_store_reachable("ray-head:8265", uri, shared_filesystem=False)
    assert not is_loopback_address(f"http://{socket.gethostname()}:8265")


def test_spec_fields(tmp_path):
    def plan(**overrides):
        return load_plan(write_spec(tmp_path, None, **overrides))

    p = plan(tracking={"shared_filesystem": True}, ray={"resources": {"custom": {"gpu_node": 1}}})
    assert p.spec.tracking.shared_filesystem is True
    assert all(dict(c.resources.custom) == {"gpu_node": 1.0} for c in p.cells)
    assert plan().cells[0].config_hash != p.cells[0].config_hash
    assert "custom" not in plan().cells[0].to_dict()["resources"]  # old hashes are kept
    for bad, field in (
        ({"tracking": {"shared_filesystem": "maybe"}}, "tracking.shared_filesystem"),
        ({"ray": {"resources": {"custom": {"CPU": 1}}}}, "ray.resources.custom"),
        ({"ray": {"resources": {"custom": {"n": 0}}}}, "ray.resources.custom"),
    ):
        with pytest.raises(SpecError, match=field):
            plan(**bad)


# --- the lease -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tracking = Tracking(f"sqlite:///{tmp_path_factory.mktemp('lease')}/mlflow.db")
    tracking.init_store()  # once for the module: a new SQLite store costs seconds
    return tracking, tracking.experiment_id("lease")


@pytest.fixture
def parent(store, request):
    """A fresh parent run (a sweep of its own) for each test."""
    tracking, exp = store
    return tracking, tracking.sweep_run(exp, f"lease-{request.node.name[-40:]}")


def test_lease_one_holder_release_and_takeover(parent):
    tracking, run_id = parent
    first = Lease(tracking, run_id, "lease-0000")
    first.acquire()
    with pytest.raises(LaunchBusy, match=r"another launcher is running sweep lease-0000 \(pid"):
        Lease(tracking, run_id, "lease-0000").acquire()
    first.release()
    second = Lease(tracking, run_id, "lease-0000")
    second.acquire()  # released: taken at once
    assert second.generation == 2 and not second.lost()
    # a holder on another host: refused while its heartbeat is fresh, taken over once stale
    old = time.time() - STALE_S - 5
    foreign = {"host": "elsewhere", "pid": 1, "started": 1.0, "token": "x", "since": old}
    tracking.client.log_param(run_id, f"{LEASE_PARAM}3", json.dumps(foreign))
    assert second.lost()  # the previous holder learns it at its next heartbeat
    tracking.set_tags(run_id, {HEARTBEAT_TAG: f"3 {time.time()}"})
    with pytest.raises(LaunchBusy, match="on elsewhere, last heartbeat 0 s ago"):
        Lease(tracking, run_id, "lease-0000").acquire()
    tracking.set_tags(run_id, {HEARTBEAT_TAG: f"3 {old}"})
    third = Lease(tracking, run_id, "lease-0000")
    third.acquire()
    assert third.generation == 4


@pytest.mark.slow
def test_lease_dead_local_holder_is_taken_over_at_once(parent, tmp_path):
    import subprocess
    import sys

    tracking, run_id = parent
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a pid on this host that is gone (as after kill -9)
    holder = {"host": socket.gethostname(), "pid": proc.pid, "started": 1.0, "token": "y"}
    tracking.client.log_param(run_id, f"{LEASE_PARAM}1", json.dumps({**holder, "since": 0}))
    tracking.set_tags(run_id, {HEARTBEAT_TAG: f"1 {time.time()}"})  # a fresh heartbeat
    lease = Lease(tracking, run_id, "lease-0000")
    lease.acquire()
    assert lease.generation == 2
    lease.release()
    assert tracking.get_run(run_id).data.tags[RELEASED_TAG] == "2"


def test_two_racing_leases_one_wins(parent):
    """Both read generation 0; the write-once param lets exactly one take generation 1."""
    import threading

    tracking, run_id = parent
    leases = [Lease(tracking, run_id, "lease-0000") for _ in range(4)]
    barrier = threading.Barrier(len(leases))
    outcome: list[str] = []

    def go(lease: Lease) -> None:
        barrier.wait()
        try:
            lease.acquire()
            outcome.append("won")
        except LaunchBusy:
            outcome.append("busy")

    threads = [threading.Thread(target=go, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcome) == ["busy", "busy", "busy", "won"]
    params = tracking.get_run(run_id).data.params
    assert [k for k in params if k.startswith(LEASE_PARAM)] == [f"{LEASE_PARAM}1"]


def test_yaml_roundtrip_of_custom_resources(tmp_path):
    path = write_spec(tmp_path, None, ray={"resources": {"custom": {"a/b": 0.5}}})
    assert yaml.safe_load(path.read_text())["ray"]["resources"]["custom"] == {"a/b": 0.5}
    assert dict(load_plan(path).cells[0].resources.custom) == {"a/b": 0.5}
