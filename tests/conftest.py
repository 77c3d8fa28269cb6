"""The suite's machine and its tiers.

* **A fresh machine.** The suite never sees the user's HOME or caches: before anything is collected
  it moves HOME, the XDG folders and ``GPPO_CACHE_DIR`` to a folder of its own (removed at the end),
  so a test that passes only on a used machine (a step timing, a built base, Ray's
  ``~/.ray/auth_token``, MLflow's or pip's per-user files) fails here as it would for a newcomer.
  What the suite's tests share (the shipped bases built once, the warm-start cache) lives in that
  folder for the run; a test that needs an empty cache sets its own ``GPPO_CACHE_DIR``.
* **The fast tier**: ``pytest -m "not slow" -n auto`` runs every test that starts no process (Ray,
  a server, a training run, a Python), one pytest-xdist worker per core. A test that starts one must
  be marked ``slow``; this file enforces it.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing.process
import os
import platform
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from suite_processes import TEAM_FIXTURES, TEST_WORKER_ENV, reap_orphans, started_here

from gppo.backends.checkresult import StepTiming

# platform caches uname, and its first call runs `uname -p` (MLflow's first import calls it):
# made here, at collection, so no fast test that happens to import MLflow first starts a process
platform.uname().processor  # noqa: B018 (the call fills the cache)

#: set to the suite's own machine folder by the first process (xdist workers inherit it)
SUITE_HOME_ENV = "GPPO_TEST_SUITE_HOME"
#: the user's settings a fresh machine would not have; dropped for the run
USER_STATE_VARS = (
    "GPPO_CACHE_DIR",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "MPLCONFIGDIR",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "RAY_ADDRESS",
    "RAY_AUTH_MODE",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
    "HF_HOME",
    "TORCH_HOME",
)


#: the folder this process made (and so removes); absent in xdist workers
_OWNED_HOME = pytest.StashKey[Path]()
#: the verl CPU environment's background build this process started (None: none needed)
_VERL_ENV_BUILD = pytest.StashKey["subprocess.Popen | None"]()


def fresh_machine_env(root: Path, worker: str | None = None) -> dict[str, str]:
    """HOME, the XDG folders and the gppo cache under ``root``: what a new user's machine has.
    Each pytest-xdist ``worker`` has a HOME of its own (what Ray and MLflow write there, such as
    ``~/.ray/auth_token``, is one worker's); the caches are the run's (built once)."""
    env = {
        "HOME": str(root / (f"home-{worker}" if worker else "home")),
        "XDG_CACHE_HOME": str(root / "home" / ".cache"),
        "XDG_CONFIG_HOME": str(root / "home" / ".config"),
        "XDG_DATA_HOME": str(root / "home" / ".local" / "share"),
        "XDG_STATE_HOME": str(root / "home" / ".local" / "state"),
        "GPPO_CACHE_DIR": str(root / "gppo-cache"),
    }
    for path in env.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    return env


def pytest_configure(config: pytest.Config) -> None:
    """Give the run a fresh machine's HOME and caches (once: xdist workers inherit it)."""
    root = os.environ.get(SUITE_HOME_ENV)
    if root is None:
        root = tempfile.mkdtemp(prefix="gppo-suite-")
        config.stash[_OWNED_HOME] = Path(root)
        os.environ[SUITE_HOME_ENV] = root
    for var in USER_STATE_VARS:
        os.environ.pop(var, None)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    os.environ.update(fresh_machine_env(Path(root), worker))
    os.environ[TEST_WORKER_ENV] = f"{root}:{worker or 'main'}"
    if _OWNED_HOME in config.stash:
        # a fresh machine has no matplotlib font cache, and building it runs `fc-list`: built
        # here, once for the run (xdist workers share the folder), not inside a fast test
        from matplotlib import font_manager

        font_manager.findfont("DejaVu Sans")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """After a slow test (its teardown included), end the orphans it left and say so."""
    if item.get_closest_marker("slow") is None:
        return (yield)
    before = set(started_here())
    try:
        return (yield)
    finally:
        reaped = reap_orphans(before)
        if reaped:
            item.warn(pytest.PytestWarning(f"ended processes the test left: {', '.join(reaped)}"))


#: where the suite writes its timeline when set: one JSON line per test phase (``nodeid``, ``when``,
#: ``worker``, ``start``, ``stop``, ``outcome``), read by ``python tests/timeline.py FILE``
TIMELINE_ENV = "GPPO_TEST_TIMELINE"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With :data:`TIMELINE_ENV` set, the pytest process that reports (xdist's controller, or the
    only process) appends each phase's times and worker: which worker was the suite's long pole."""
    path = os.environ.get(TIMELINE_ENV)
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    line = {
        "nodeid": report.nodeid,
        "when": report.when,
        "worker": getattr(gateway, "id", "main"),
        "start": report.start,
        "stop": report.stop,
        "outcome": report.outcome,
    }
    with open(path, "a") as out:
        out.write(json.dumps(line) + "\n")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The process that made the suite's machine folder removes it; every pytest process first
    ends the orphans it left (a session fixture's processes whose stop failed) and a verl CPU
    environment build still under way (a run that never reached the verl tests)."""
    build = config.stash.get(_VERL_ENV_BUILD, None)
    if build is not None and build.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(build.pid, signal.SIGKILL)
        build.wait()
    reap_orphans(daemons=True)
    owned = config.stash.get(_OWNED_HOME, None)
    if owned is not None:
        shutil.rmtree(owned, ignore_errors=True)
        os.environ.pop(SUITE_HOME_ENV, None)


#: Fixtures that start processes (Ray heads, servers, the verl CPU environment).
PROCESS_FIXTURES = frozenset({"ray_cluster", "verl_cpu_venv", *TEAM_FIXTURES})


def unmarked_process_use(item: pytest.Item) -> str | None:
    """Why ``item`` needs the slow marker it lacks, from its fixtures (else None)."""
    if item.get_closest_marker("slow") is not None:
        return None
    used = sorted(PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())))
    return f"uses {', '.join(used)}" if used else None


#: Where the tests that train real models live (the testbed's loop, TRL, verl and vLLM): each keeps
#: both cores busy for tens of seconds to minutes, so the suite runs them one at a time, on one
#: pytest-xdist worker, while the other worker takes the tests that mostly wait (Ray heads, MLflow
#: servers, the probe backend's cells, the reports). Node-id prefixes (paths from the rootdir).
TRAINING_TESTS = (
    "tests/backends/local/",
    "tests/backends/trl/",
    "tests/backends/verl/",
    "tests/sweep/test_quickstart_path.py",
    "tests/sweep/tuning/test_tune_local.py",
    "tests/testbed/test_warmstart_cache.py",
)
#: the one work unit they form (pyproject's addopts: ``-n 2``)
TRAINING_GROUP = "training"
#: The tests on the team's services (tests/sweep/servers.py: a two-node Ray cluster, an MLflow
#: server, PostgreSQL): one work unit, so one worker starts the team once, runs them one after
#: another and stops it after the last (``SharedTeam``), rather than each worker holding its own
#: team, idle, to the session's end.
TEAM_TESTS = (
    "tests/sweep/test_secrets_scan.py",
    "tests/sweep/test_team_setup.py",
    "tests/sweep/tuning/test_tune_postgres.py",
)
TEAM_GROUP = "team"


def work_unit(nodeid: str) -> str:
    """The unit of work pytest-xdist hands one worker: :data:`TRAINING_GROUP` for a test among
    :data:`TRAINING_TESTS` (so they run one at a time), :data:`TEAM_GROUP` for one among
    :data:`TEAM_TESTS`, else the test alone."""
    if nodeid.startswith(TRAINING_TESTS):
        return TRAINING_GROUP
    return TEAM_GROUP if nodeid.startswith(TEAM_TESTS) else nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """The workers' schedule: :func:`work_unit`'s units, each on one worker. (``--dist loadgroup``
    would do this from ``xdist_group`` marks, but pytest-xdist 3.8 marks a group by rewriting a
    node's id in a way pytest 9 no longer reads, so its groups are silently ignored.)"""
    from xdist.scheduler import LoadScopeScheduling

    class TrainingApart(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return TrainingApart(config, log)


def unlisted_team_use(item: pytest.Item) -> bool:
    """Whether ``item`` stands on the team's services outside :data:`TEAM_TESTS` (its worker
    would start a team of its own)."""
    uses = TEAM_FIXTURES & set(getattr(item, "fixturenames", ()))
    return bool(uses) and not item.nodeid.startswith(TEAM_TESTS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    bad = [f"{item.nodeid} {why}" for item in items if (why := unmarked_process_use(item))]
    if bad:
        raise pytest.UsageError(
            "mark these @pytest.mark.slow (they start processes):\n" + "\n".join(bad)
        )
    unlisted = [item.nodeid for item in items if unlisted_team_use(item)]
    if unlisted:
        raise pytest.UsageError(
            "add these to TEAM_TESTS in tests/conftest.py (they use the team's services):\n"
            + "\n".join(unlisted)
        )
    # the verl CPU tests run last: their environment (scripts/verl-cpu-env.sh, minutes to build)
    # is built in the background while the rest runs, started by one pytest process (the only
    # one, or xdist's first worker: each worker collects every test)
    needs_env = [item for item in items if "verl_cpu_venv" in getattr(item, "fixturenames", ())]
    if needs_env:
        items[:] = [item for item in items if item not in needs_env] + needs_env
        if os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":
            from backends.verl.conftest import start_building

            home = Path(os.environ[SUITE_HOME_ENV])
            config.stash[_VERL_ENV_BUILD] = start_building(home / "verl-cpu-env.log")


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


#: what :func:`timed_preflight` says the testbed's pre-flight measured: 5 s of start-up, 0.5 s a step
PREFLIGHT_TIMING = StepTiming(startup_s=5.0, step_s=0.5, steps=10)


@pytest.fixture
def timed_preflight(monkeypatch) -> StepTiming:
    """The testbed's pre-flight timing given, not measured: ``plan`` of a testbed spec times one
    cell in a process of its own unless the cache root holds that timing, and a fast test may start
    no process (nor lean on a cache the user's machine happens to hold). The forecast's arithmetic
    over it is the code under test; the timing itself is measured in ``tests/sweep/test_cost.py``'s
    slow tests and ``benchmarks/bench_forecast.py``."""
    from gppo.backends.local.backend import LocalBackend

    monkeypatch.setattr(LocalBackend, "step_timing", lambda self, cell: PREFLIGHT_TIMING)
    return PREFLIGHT_TIMING
