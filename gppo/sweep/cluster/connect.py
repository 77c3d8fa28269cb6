"""Attach to a Ray cluster, or start (and later stop) a local head bound to loopback.

What outlives the launcher: a local head started by :func:`ensure_cluster` is a detached
``ray start --head --block`` process (its own session), so Ray jobs keep running when the launcher
is killed, and a relaunch re-attaches to them. Its address and pid are recorded in
``<state_dir>/cluster.json`` (``state_dir`` = ``.gppo/<sweep id>`` next to the tracking store);
``status``, ``logs``, ``cancel`` and a relaunch read that file. The head is stopped (SIGTERM to
that pid: ``ray start --block`` then tears down every Ray process it started, and nothing else)
when a launch ends with no cell running, or by ``gppo-sweep cancel SPEC``.

Ray's token auth: the head is started with ``RAY_AUTH_MODE`` set to what ``ray start --head``
would pick here (on when a token is found: :func:`gppo.sweep.cluster.ray_http.head_auth_mode`), and every
request to a cluster goes through :mod:`gppo.sweep.cluster.ray_http`, which sends the token when the
cluster asks for one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gppo.backends.base import get_backend
from gppo.cell import Cell
from gppo.grid.schema import GridSpec, LocalHead
from gppo.ports import free_ports
from gppo.sweep.cluster import ray_http
from gppo.sweep.cluster.owner import pid_alive

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

CLUSTER_FILE = "cluster.json"
#: the stopped local head's temp dir and address, where ``logs`` still finds the job logs
LAST_CLUSTER_FILE = "last_cluster.json"


@dataclass(frozen=True)
class Cluster:
    """A Ray cluster the dispatcher submits jobs to.

    Attributes:
        address: the Jobs API address (``http://127.0.0.1:PORT``).
        local: True when this package started the head (and may stop it).
        pid: pid of the ``ray start --block`` process of a local head.
        temp_dir: the local head's Ray temp dir.
    """

    address: str
    local: bool = False
    pid: int | None = None
    temp_dir: str | None = None

    def client(self) -> JobSubmissionClient:  # Ray is imported lazily
        """A Jobs API client that authenticates when the cluster has token auth on (imports Ray
        lazily; :func:`gppo.sweep.cluster.ray_http.job_client`). Raises ``OSError`` (``ConnectionError``,
        a timeout) when the cluster does not answer."""
        return ray_http.job_client(self.address)


def read_cluster(state_dir: Path) -> Cluster | None:
    """The local head recorded for a sweep, if its process is still alive."""
    path = Path(state_dir) / CLUSTER_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    cluster = Cluster(**data)
    return cluster if pid_alive(cluster.pid) else None


#: torch.distributed's rendezvous variables: a local head started from a process that has them
#: (inside torchrun, a SLURM step, a test session with a process group) would hand them to every
#: cell, and two single-process cells would then bind the same MASTER_PORT
TORCH_RENDEZVOUS = (
    "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID",
)  # fmt: skip


def start_local_head(
    state_dir: Path,
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    timeout: float = 90.0,
    stop_grace_s: float | None = None,
) -> Cluster:
    """Start a detached local Ray head on loopback with free ports and record it in state_dir.

    ``stop_grace_s``: the seconds Ray gives a stopped job's driver between SIGTERM and SIGKILL
    (``RAY_JOB_STOP_WAIT_TIME_S``, whole seconds; Ray's default, 3 s, when None)."""
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    # unix socket paths are limited to 107 bytes: keep Ray's temp dir short.
    temp_dir = tempfile.mkdtemp(prefix="gr", dir="/tmp")
    gcs, dash, client, agent_http, agent_grpc, runtime_env, metrics = free_ports(7)
    ray_bin = str(Path(sys.executable).with_name("ray"))
    cmd = [
        ray_bin, "start", "--head", "--block", "--disable-usage-stats",
        "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
        f"--port={gcs}", f"--dashboard-port={dash}",
        f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent_http}",
        f"--dashboard-agent-grpc-port={agent_grpc}", f"--runtime-env-agent-port={runtime_env}",
        f"--metrics-export-port={metrics}", f"--temp-dir={temp_dir}",
        "--include-dashboard=true",
    ]  # fmt: skip
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if num_gpus is not None:
        cmd.append(f"--num-gpus={num_gpus}")
    # the auth mode `ray start --head` would pick anyway, made explicit for the head and its jobs
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env[ray_http.ENV_AUTH_MODE] = ray_http.head_auth_mode()
    env.pop("RAY_ADDRESS", None)
    for key in TORCH_RENDEZVOUS:  # a launcher run inside torchrun or SLURM: not the cells' rank
        env.pop(key, None)
    if stop_grace_s is not None:
        env["RAY_JOB_STOP_WAIT_TIME_S"] = str(max(1, math.ceil(stop_grace_s)))
    with open(state_dir / "ray-head.log", "ab") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env,
        )  # fmt: skip
    address = f"http://127.0.0.1:{dash}"
    deadline = time.monotonic() + timeout
    try:
        while not ray_http.reachable(address):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (state_dir / "ray-head.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"local Ray head did not start: {tail}")
            time.sleep(0.25)
    except BaseException:  # failed, or Ctrl-C while starting: leave no orphan head behind
        _terminate(proc.pid)
        raise
    cluster = Cluster(address=address, local=True, pid=proc.pid, temp_dir=temp_dir)
    tmp = state_dir / (CLUSTER_FILE + ".tmp")
    tmp.write_text(json.dumps(asdict(cluster)))
    tmp.replace(state_dir / CLUSTER_FILE)
    return cluster


def _terminate(pid: int, timeout: float = 30.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):  # reap it if it is our child
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def stop_local_head(state_dir: Path) -> bool:
    """Stop the local head recorded in state_dir (if any); True when one was stopped.

    Its temp dir is kept in ``last_cluster.json`` (:func:`last_temp_dir`) for ``logs``."""
    path = Path(state_dir) / CLUSTER_FILE
    cluster = read_cluster(state_dir)
    stopped = False
    if cluster is not None and cluster.local and cluster.temp_dir:
        (Path(state_dir) / LAST_CLUSTER_FILE).write_text(
            json.dumps({"temp_dir": cluster.temp_dir, "address": cluster.address})
        )
    if cluster is not None and cluster.local and cluster.pid:
        _terminate(cluster.pid)
        stopped = True
    path.unlink(missing_ok=True)
    return stopped


def last_temp_dir(state_dir: Path) -> str | None:
    """The temp dir of the last local head :func:`stop_local_head` stopped, if recorded."""
    try:
        return json.loads((Path(state_dir) / LAST_CLUSTER_FILE).read_text()).get("temp_dir")
    except (OSError, ValueError):
        return None


def local_head_for(spec: GridSpec, cells: Iterable[Cell] = ()) -> LocalHead:
    """The resources of the local head a sweep of ``spec`` starts: ``ray.local_head`` as the spec
    writes it, each field it leaves out (None) filled from what the spec's backend needs of a head
    (:meth:`~gppo.backends.base.Backend.local_head_resources`: a verl CPU cell's Ray CPUs and
    fake GPUs), the most any one cell needs times the cells that may run at once
    (``ray.max_concurrent``, at most the number of cells). A field neither gives: what Ray
    detects. ``cells``: the sweep's cells (settings after per-cell overrides); none (a tuning
    study): the spec's own backend section."""
    backend = get_backend(spec.backend)
    cells = tuple(cells)
    distinct: dict[str, Any] = {}  # cells mostly share their settings: each once
    for s in [c.settings for c in cells] or [spec.settings]:
        distinct.setdefault(json.dumps(s, sort_keys=True, default=str), s)
    resources = (
        backend.local_head_resources(backend.validate_settings(s) if isinstance(s, dict) else s)
        for s in distinct.values()
    )
    needs = [n for n in resources if n is not None]
    head = spec.ray.local_head
    if not needs:
        return head
    at_once = min(spec.ray.max_concurrent, len(cells) or spec.ray.max_concurrent)
    derived = {
        "num_cpus": at_once * max(round(n.num_cpus) for n in needs),
        "num_gpus": at_once * max(round(n.num_gpus) for n in needs),
    }
    return head.model_copy(
        update={k: v for k, v in derived.items() if getattr(head, k) is None and v > 0}
    )


def ensure_cluster(
    address: str | None,
    state_dir: Path,
    *,
    start: bool = True,
    local_head: LocalHead | None = None,
    stop_grace_s: float | None = None,
) -> Cluster | None:
    """The cluster a sweep uses.

    ``address`` (or ``RAY_ADDRESS``) given: that cluster's Jobs API. Otherwise the local head
    recorded in ``state_dir`` if it is alive, else (when ``start``) a new local head with the
    resources of ``local_head`` (:func:`local_head_for` a spec); with ``start=False`` and no
    head, ``None``.
    """
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        if "://" not in address:
            address = f"http://{address}"
        return Cluster(address=address.rstrip("/"))
    existing = read_cluster(state_dir)
    if existing is not None and ray_http.reachable(existing.address):
        return existing
    if not start:
        return None
    head = local_head or LocalHead()
    return start_local_head(
        state_dir, num_cpus=head.num_cpus, num_gpus=head.num_gpus, stop_grace_s=stop_grace_s
    )
