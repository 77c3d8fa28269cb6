"""Test helpers shared across the suite (``tests/`` is on pytest's ``pythonpath``)."""

from __future__ import annotations

from typing import Any

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
    import os
    import subprocess
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RAY_ADDRESS"))}
    env.update(GPPO_CACHE_DIR=str(Path(cwd) / "cache"), COLUMNS="200")
    proc = subprocess.run(
        [str(gppo_sweep), "launch", str(spec)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    (table,) = Path(cwd).glob("reports/*/table1.csv")
    return {row["cell"]: row for row in csv.DictReader(table.open())}


def gppo_cli(args: list[str], cwd: Any, timeout: float = 600) -> str:
    """``python -m gppo.cli ARGS`` in ``cwd`` without the caller's MLflow/Ray addresses; its
    output (stdout + stderr), asserted to have exited 0."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RAY_ADDRESS"))}
    env["COLUMNS"] = "200"
    proc = subprocess.run(
        [sys.executable, "-m", "gppo.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


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
