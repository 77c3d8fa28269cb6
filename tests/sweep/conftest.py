"""Shared fixtures: one real local Ray head for the whole session, specs on the probe backend."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from gppo.sweep.cluster.connect import start_local_head, stop_local_head

from . import probe_backend  # noqa: F401  (registers the "probe" backend)
from .servers import SHARED_TEAM, mlflow_server, postgres, ray_two_nodes, team  # noqa: F401

TESTS_DIR = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def local_head(num_cpus: int = 4, num_gpus: int = 0):
    """A local Ray head on loopback with free ports (~5-10 s to start); ``num_gpus`` are logical
    (Ray schedules on them, nothing uses one). Stopped, its folders removed, at the exit."""
    state = Path(tempfile.mkdtemp(prefix="gppo-ray-"))
    cluster = start_local_head(state, num_cpus=num_cpus, num_gpus=num_gpus)
    try:
        yield cluster
    finally:
        stop_local_head(state)
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(cluster.temp_dir or "/nonexistent", ignore_errors=True)


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray head on loopback with free ports (started once)."""
    with local_head() as cluster:
        yield cluster


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """After a test's fixtures are torn down: stop the team if no test next needs it."""
    yield
    SHARED_TEAM.after(item, nextitem)


def pytest_sessionfinish(session: pytest.Session) -> None:
    SHARED_TEAM.stop()


@pytest.fixture(autouse=True)
def _no_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)


def write_spec(tmp_path: Path, address: str | None, name: str = "probe", **overrides) -> Path:
    """A probe spec whose store is tmp_path/mlflow.db and whose markers go to tmp_path/m."""
    spec = {
        "name": name,
        "backend": "probe",
        "probe": {"steps": 2, "marker_dir": str(tmp_path / "m")},
        "grid": {"divergences": ["tv", "kl"], "estimators": ["mc"]},
        "seeds": 1,
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db"},
        "ray": {
            "address": address,
            "max_concurrent": 2,
            "resources": {"num_cpus": 0.5},
        },
        "retries": {"max": 1, "backoff_s": 0.2},
        # the tables and the page only: these tests check the sweep, not its figures (tests/
        # analysis draws them, test_quickstart_path checks a launch's), about 3 s of CPU a report
        "analysis": {"figures": False},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    if spec["backend"] != "probe":
        spec.pop("probe")
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def launcher_cmd() -> list[str]:
    """argv of a CLI process that knows the probe backend."""
    import sys

    code = (
        f"import sys; sys.path.insert(0, {str(TESTS_DIR)!r}); import sweep.probe_backend; "
        "from gppo.cli import app; app()"
    )
    return [sys.executable, "-c", code]


def env_without_ray() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID"):
        env.pop(key, None)
    return env


def wait_for(cond, timeout: float, what: str):
    """Poll ``cond`` every 0.3 s until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def relaunch_finishes_each_cell_once(spec: Path, plan, store_uri: str, cwd: Path) -> None:
    """``launch`` the spec again in a CLI process: exit 0, no run left RUNNING in the store, and
    every cell of ``plan`` FINISHED exactly once."""
    import subprocess

    from mlflow.tracking import MlflowClient

    from gppo import metrics as M

    relaunch = subprocess.run(
        [*launcher_cmd(), "launch", str(spec)], capture_output=True, text=True,
        env=env_without_ray(), cwd=cwd, timeout=300,
    )  # fmt: skip
    assert relaunch.returncode == 0, relaunch.stdout[-3000:] + relaunch.stderr[-3000:]
    client = MlflowClient(store_uri)
    exp = client.get_experiment_by_name(plan.spec.experiment).experiment_id
    runs = [r for r in client.search_runs([exp]) if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL]
    assert not [r for r in runs if r.info.status == "RUNNING"]
    for cell in plan.cells:
        finished = [
            r for r in runs if r.data.tags[M.TAG_CELL_ID] == cell.id and r.info.status == "FINISHED"
        ]
        assert len(finished) == 1, cell.id  # finished exactly once
