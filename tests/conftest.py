"""The fast tier: ``pytest -m "not slow" -n auto`` runs every test that starts no process (Ray, a
server, a training run, a Python), one pytest-xdist worker per core. A test that starts one must be
marked ``slow``; this file enforces it.
"""

from __future__ import annotations

import multiprocessing.process
import os
import platform
import subprocess

import pytest

# platform caches uname, and its first call runs `uname -p` (MLflow's first import calls it):
# made here, at collection, so no fast test that happens to import MLflow first starts a process
platform.uname().processor  # noqa: B018 (the call fills the cache)

#: Fixtures that start processes (Ray heads, servers, the verl CPU environment).
PROCESS_FIXTURES = frozenset(
    {"ray_cluster", "ray_two_nodes", "mlflow_server", "postgres", "team", "verl_cpu_venv"}
)


def unmarked_process_use(item: pytest.Item) -> str | None:
    """Why ``item`` needs the slow marker it lacks, from its fixtures (else None)."""
    if item.get_closest_marker("slow") is not None:
        return None
    used = sorted(PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())))
    return f"uses {', '.join(used)}" if used else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    bad = [f"{item.nodeid} {why}" for item in items if (why := unmarked_process_use(item))]
    if bad:
        raise pytest.UsageError(
            "mark these @pytest.mark.slow (they start processes):\n" + "\n".join(bad)
        )
    # the verl CPU tests run last: their environment (scripts/verl-cpu-env.sh, minutes to build)
    # can then be built in the background while the rest runs, as .ci/run does
    needs_env = [item for item in items if "verl_cpu_venv" in getattr(item, "fixturenames", ())]
    if needs_env:
        items[:] = [item for item in items if item not in needs_env] + needs_env


@pytest.fixture(autouse=True)
def _processes_need_the_slow_marker(request: pytest.FixtureRequest, monkeypatch) -> None:
    """Outside ``slow`` tests, starting a process fails the test with what to do."""
    if request.node.get_closest_marker("slow") is not None:
        return
    nodeid = request.node.nodeid

    def refuse(what: str):
        def start(*args, **kwargs):
            raise AssertionError(f"{nodeid} starts a process ({what}): mark it @pytest.mark.slow")

        return start

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("subprocess"))
    # every context's processes (fork, spawn, forkserver, pools) start through BaseProcess.start
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse("multiprocessing"))
    monkeypatch.setattr(os, "fork", refuse("os.fork"))
