"""Test helpers shared across the suite (``tests/`` is on pytest's ``pythonpath``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gppo import metrics as M
from gppo.cell import Cell, cell_id


def cell_runs(store: Any) -> dict[str, Any]:
    """Every cell run of a tracking store (all its experiments), by cell id. ``store``: a tracking
    URI, or an ``MlflowClient`` already open on it."""
    if isinstance(store, str):
        from mlflow.tracking import MlflowClient

        store = MlflowClient(store)
    experiments = [e.experiment_id for e in store.search_experiments()]
    runs = store.search_runs(experiments, f"tags.`{M.TAG_ROLE}` = '{M.ROLE_CELL}'")
    return {r.data.tags[M.TAG_CELL_ID]: r for r in runs}


def make_cell(
    divergence: str | None = "kl",
    estimator: str | None = "atomic",
    *,
    method: str = "gppo",
    seed: int = 0,
    delta: float | None = None,
    **fields: Any,
) -> Cell:
    """A :class:`Cell` as ``grid.expand`` names it (``kl-atomic-s0``, ``gspo-s1``), with a grid
    cell's divergence, estimator and δ in its ``loss_params``; ``fields`` set the rest
    (``settings``, ``backend``, ``resources``, extra ``loss_params`` ...)."""
    grid = method == "gppo"
    cid = cell_id(str(divergence), estimator, seed) if grid else cell_id(method, seed=seed)
    params = {"divergence": divergence, "estimator": estimator} if grid else {}
    if grid and delta is not None:
        params["delta"] = delta
    params.update(fields.pop("loss_params", {}))
    return Cell(
        id=fields.pop("id", cid),
        method=method,
        seed=seed,
        loss_params=params,
        **fields,
    )


def launch_table1(gppo_sweep: str, spec: Any, cwd: Any, timeout: float = 1700) -> dict[str, dict]:
    """``gppo-sweep launch SPEC`` as a user runs it (a clean environment: no MLflow or Ray
    variables of the test's, its own ``GPPO_CACHE_DIR``), exit 0 asserted; its Table 1 rows by
    cell (``table1.csv``: ``{"base": {"avg": ...}, "tv/mc": {...}}``)."""
    import csv

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RAY_ADDRESS"))}
    env.update(GPPO_CACHE_DIR=str(Path(cwd) / "cache"), COLUMNS="200")
    code, out = run_command([str(gppo_sweep), "launch", str(spec)], cwd, env, timeout)
    assert code == 0, out[-5000:]
    (table,) = Path(cwd).glob("reports/*/table1.csv")
    return {row["cell"]: row for row in csv.DictReader(table.open())}


def gppo_cli(args: list[str], cwd: Any, timeout: float = 600) -> str:
    """``python -m gppo.cli ARGS`` in ``cwd`` without the caller's MLflow/Ray addresses; its
    output (stdout + stderr), asserted to have exited 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RAY_ADDRESS"))}
    env["COLUMNS"] = "200"
    code, out = run_command([sys.executable, "-m", "gppo.cli", *args], cwd, env, timeout)
    assert code == 0, out[-4000:]
    return out


def run_command(cmd: list[str], cwd: Any, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run ``cmd``; its exit code and output (stdout + stderr). Past ``timeout`` it gets SIGTERM
    (a launch stops its jobs and its own local Ray head), SIGKILL only 120 s later, and the test
    fails: ``subprocess.run``'s SIGKILL at once left a launch's head running."""
    with subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                out, _ = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            raise AssertionError(
                f"{' '.join(cmd[:4])} ran past {timeout} s: {out[-4000:]}"
            ) from None
    return proc.returncode, out


#: an environment variable a test gives the command it starts: every process that command starts
#: inherits it (its Ray head and workers, the fork server and its cells), so they can be counted
LAUNCH_TAG = "GPPO_TEST_LAUNCH_TAG"


def alive(pid: Any) -> bool:
    """Whether process ``pid`` (or a ``psutil.Process``) runs; a zombie is gone: it holds nothing
    (this machine's init may reap an orphan late)."""
    import psutil

    try:
        proc = pid if isinstance(pid, psutil.Process) else psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def tagged_processes(tag: str) -> list[str]:
    """The live processes (``pid cmdline``) whose start-up environment has ``LAUNCH_TAG=tag``."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(LAUNCH_TAG) == tag and alive(proc):
                found.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        except (psutil.Error, OSError):
            continue
    return found


def none_left(tag: str, timeout_s: float = 10.0) -> list[str]:
    """Wait up to ``timeout_s`` for no process tagged ``tag`` to be left (Ray's last processes
    take a moment after ``ray start --block`` returns); those still left."""
    import time

    deadline = time.monotonic() + timeout_s
    while (left := tagged_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@contextlib.contextmanager
def command_in_background(
    tmp_path: Path, spec: dict[str, Any], command: str = "launch"
) -> Iterator[tuple[subprocess.Popen[bytes], Path, str, str]]:
    """``gppo-sweep COMMAND spec.yaml`` started in ``tmp_path`` with ``spec`` on a SQLite store
    there, an environment of its own (no MLflow or Ray address of the test process, a private
    cache) and a fresh :data:`LAUNCH_TAG`. Yields ``(process, log file, tracking URI, tag)``; at
    the exit a command still running gets SIGTERM (it stops its jobs and its own local head),
    then SIGKILL after 120 s."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**spec, "tracking": {"uri": uri}}))
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RAY_ADDRESS"))}
    env.update({LAUNCH_TAG: tag, "COLUMNS": "200", "GPPO_CACHE_DIR": str(tmp_path / "cache")})
    log = tmp_path / "out.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gppo.cli", command, str(path)],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield proc, log, uri, tag
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()


def fork_servers(tag: str) -> list[Any]:
    """The local backend's fork servers alive on this machine that a launch started with
    ``LAUNCH_TAG=tag`` in its environment (psutil processes): another sweep's, or another test's
    on the other pytest-xdist worker, are never the test's own."""
    import psutil

    server = "gppo.backends.local.forkserver"
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if server in cmdline and proc.environ().get(LAUNCH_TAG) == tag and alive(proc):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found
