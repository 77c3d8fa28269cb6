"""A team's services, all authenticated, and no secret leaves the launcher (docs/cluster-guide.md,
section 3): a basic-auth ``mlflow server`` (``--app-name basic-auth``) on a PostgreSQL whose role
has a password, the Optuna study on that PostgreSQL, cells on a node of the two-node loopback Ray
cluster that has the tracking server's credentials in its own environment (``ray start``'s: its
jobs inherit it), each secret unique.

One sweep whose spec writes the tracking URI with ``user:password@`` (the launcher moves them into
MLflow's variables), one study with the credentials in the environment (MLflow's variables,
``PGPASSWORD``), then ``plan``, ``status``, ``report`` and ``ui``; then every place they leave
anything is searched for every secret: the MLflow database, the Optuna database, the artifact
store, the report files, the state directory, the launcher's output, each job's logs and Ray's
job info (runtime env, metadata, entrypoint). Expected: no hit. Also: a wrong password stops the
launch at once with one line and submits nothing; a cell on a node without the credentials fails
with that line as ``status``'s last failure; a user without permission on the experiment gets
the same kind of line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gppo.cli import app
from gppo.sweep.cluster.ray_http import job_client

from .conftest import TESTS_DIR, write_spec
from .secrets_scan import scan
from .servers import (
    WORKER_RESOURCE,
    _start_postgres,
    _stop_all,
    spawn_auth_mlflow,
    start_node,
    stop_node,
)

pytestmark = pytest.mark.slow

#: the custom resource of the node that has the tracking server's credentials
SECURE = "gppo_secure"
CLI = (
    f"import sys; sys.path.insert(0, {str(TESTS_DIR)!r}); import sweep.probe_backend; "
    "import sweep.tuning.tune_probe; from gppo.cli import app; app()"
)
CRED_VARS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


def _secret(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex}"  # >= 12 characters (MLflow's rule), found nowhere else


def _env(**extra: str) -> dict[str, str]:
    drop = ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "PGPASSWORD", *CRED_VARS)
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def _cli(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 240):
    return subprocess.run(
        [sys.executable, "-c", CLI, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def _start(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CLI, *args], cwd=cwd, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def secured(ray_two_nodes):
    """PostgreSQL with a password, the basic-auth mlflow server on it (admin, and user alice),
    and a node of the two-node cluster with alice's credentials in its environment."""
    root = Path(tempfile.mkdtemp(prefix="gppo-sec-", dir="/tmp"))
    root.chmod(0o755)  # the postgres user (PostgreSQL as root) must reach its data dir
    (root / "pg").mkdir()
    pg_pw, admin_pw, alice_pw = _secret("pg"), _secret("admin"), _secret("alice")
    procs: list[subprocess.Popen] = []
    pg_ctl: list[str] = []
    node = None
    try:
        pg, pg_ctl = _start_postgres(root / "pg", password=pg_pw)
        mlf_proc, mlf = spawn_auth_mlflow(
            root, pg.url("mlflow"), admin_pw, env={"PGPASSWORD": pg_pw}
        )
        procs.append(mlf_proc)
        from mlflow.server.auth.client import AuthServiceClient

        os.environ.update(MLFLOW_TRACKING_USERNAME="admin", MLFLOW_TRACKING_PASSWORD=admin_pw)
        try:
            AuthServiceClient(mlf.uri).create_user("alice", alice_pw)
        finally:
            for var in CRED_VARS:
                os.environ.pop(var, None)
        creds = {"MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": alice_pw}
        node = start_node(ray_two_nodes, root / "node.log", {SECURE: 8}, num_cpus=2, env=creds)
        yield {
            "pg": pg, "mlflow": mlf, "root": root, "node": node, "cluster": ray_two_nodes,
            "secrets": {"pg": pg_pw, "admin": admin_pw, "alice": alice_pw},
        }  # fmt: skip
    finally:
        if node is not None:
            stop_node(node)
        _stop_all(procs)
        if pg_ctl:
            subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _sweep_spec(folder: Path, uri: str, name: str, resource: str, **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return write_spec(
        folder, None, name=name, probe={"steps": 2},
        tracking={"uri": uri},
        ray={"max_concurrent": 2, "resources": {"num_cpus": 0.5, "custom": {resource: 1}}},
        **extra,
    )  # fmt: skip


def _tune_spec(folder: Path, uri: str, address: str, storage: str) -> Path:
    data = {
        "name": "sectune", "backend": "tuneprobe", "tuneprobe": {"steps": 2, "sleep_s": 0.1},
        "seeds": [1], "eval": {"k": 4}, "tracking": {"uri": uri},
        "ray": {"address": address, "resources": {"num_cpus": 0.5, "custom": {SECURE: 1}}},
        "tune": {
            "n_trials": 2, "n_parallel": 2, "poll_s": 0.2, "storage": storage,
            "sampler": {"kind": "random", "seed": 1}, "pruner": {"kind": "none"},
            "space": {"divergence": ["tv", "kl"], "lr": {"low": 1.0e-4, "high": 1.0e-2}},
        },
    }  # fmt: skip
    path = folder / "tune.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_no_secret_leaves_the_launcher(tmp_path: Path, secured, monkeypatch) -> None:
    """Over 120 s (about 3 min on 2 cores): a sweep and a study on the authenticated services,
    then plan, status, report and ui, then every store, file and log searched for every secret;
    the services (PostgreSQL, a basic-auth MLflow server, a two-node Ray cluster) start once for
    the module."""
    s, mlf, address = secured["secrets"], secured["mlflow"], secured["cluster"].address
    host = mlf.uri.removeprefix("http://")
    specs, work = tmp_path / "specs", tmp_path / "work"  # the user's own files; what runs left
    work.mkdir()
    outputs: dict[str, str] = {}

    # a sweep whose spec carries user:password@; the launcher's environment has no credentials
    spec = _sweep_spec(specs, f"http://alice:{s['alice']}@{host}", "sec", SECURE)
    # a study at the same time: MLflow's variables and PGPASSWORD in its environment, no
    # password in any URL
    tune = _tune_spec(specs, mlf.uri, address, secured["pg"].url("optuna"))
    creds = _env(
        MLFLOW_TRACKING_USERNAME="alice", MLFLOW_TRACKING_PASSWORD=s["alice"], PGPASSWORD=s["pg"]
    )
    launch = _start(["launch", str(spec), "--address", address], work, _env())
    study = _start(["tune", str(tune), "--out", str(work / "tune-report")], work, creds)
    outputs["launch"], outputs["tune"] = (
        launch.communicate(timeout=300)[0],
        study.communicate(timeout=300)[0],
    )
    assert launch.returncode == 0 and "2/2 done" in outputs["launch"], outputs["launch"][-3000:]
    assert study.returncode == 0, outputs["tune"][-3000:]
    assert (work / "tune-report" / "best.yaml").is_file(), outputs["tune"][-2000:]

    # plan, status, report and ui, in this process (as the launcher: no credential variables)
    monkeypatch.chdir(work)
    for var in CRED_VARS:  # what the URI's credentials are moved into is undone afterwards
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    for args in (["plan"], ["plan", "--json"], ["status"], ["report"], ["ui"]):
        got = CliRunner().invoke(app, [args[0], str(spec), *args[1:]])
        assert got.exit_code == 0, got.output[-2000:]
        outputs[" ".join(args)] = got.output
    assert "MLFLOW_TRACKING_URI=http://127.0.0.1" in outputs["plan"], outputs["plan"][-1500:]
    assert f"{mlf.uri}/#/experiments/" in outputs["ui"], outputs["ui"]  # a server: URLs only

    # Ray's job info and each job's logs, as any user of the cluster sees them
    jobs = job_client(address)
    ours = [
        j for j in jobs.list_jobs() if (j.metadata or {}).get("gppo_sweep", "").startswith("se")
    ]
    assert len(ours) >= 4, [j.submission_id for j in ours]  # 2 cells + 2 trials
    for j in ours:
        outputs[f"ray job {j.submission_id}"] = json.dumps(
            {"runtime_env": j.runtime_env, "metadata": j.metadata, "entrypoint": j.entrypoint},
            default=str,
        )
        outputs[f"logs of {j.submission_id}"] = jobs.get_job_logs(j.submission_id)
        assert j.driver_node_id == secured["node"].node_id  # on the node with the credentials
    reports = sorted(work.rglob("report.html"))
    assert reports, sorted(str(p) for p in work.rglob("*"))[:50]

    secrets = [("alice", s["alice"]), ("admin", s["admin"]), ("gppo", s["pg"])]
    os.environ["PGPASSWORD"] = s["pg"]
    try:
        hits = scan(
            secrets,
            # the servers' folder (artifacts, users' store, logs, PostgreSQL's files) and every
            # node's Ray session (the runtime env agent logs each job's environment)
            paths=[work, secured["root"], secured["node"].temp_dir, *secured["cluster"].temp_dirs],
            texts=outputs,
            postgres=[
                f"postgresql://gppo@127.0.0.1:{secured['pg'].port}/{db}"
                for db in ("mlflow", "optuna")
            ],
        )
    finally:
        os.environ.pop("PGPASSWORD", None)
    assert hits == [], "\n".join(hits)[:4000]


def test_bad_or_missing_credentials_fail_with_one_line(tmp_path: Path, secured) -> None:
    s, mlf, address = secured["secrets"], secured["mlflow"], secured["cluster"].address
    jobs = job_client(address)
    # a wrong password: one line naming the server, exit 2, at once, nothing submitted
    spec = _sweep_spec(tmp_path / "wrong", mlf.uri, "wrongpw", SECURE)
    env = _env(MLFLOW_TRACKING_USERNAME="alice", MLFLOW_TRACKING_PASSWORD="not-" + s["alice"])
    t0 = time.monotonic()
    got = _cli(["launch", str(spec), "--address", address], tmp_path, env)
    lines = [ln for ln in _out(got).splitlines() if ln.strip()]
    assert got.returncode == 2 and len(lines) == 1, _out(got)[-2000:]
    assert f"the tracking server at {mlf.uri} refused the credentials of user 'alice'" in lines[0]
    assert "HTTP 401" in lines[0] and s["alice"] not in lines[0]
    assert time.monotonic() - t0 < 60  # no retries burned
    assert not [
        j
        for j in jobs.list_jobs()
        if (j.metadata or {}).get("gppo_sweep", "").startswith("wrongpw")
    ]

    # a node without the credentials (the cluster's first worker): the cell fails with the line
    spec = _sweep_spec(
        tmp_path / "nocreds", mlf.uri, "nocreds", WORKER_RESOURCE, retries={"max": 0},
        grid={"divergences": ["tv"], "estimators": ["mc"]},
    )  # fmt: skip
    env = _env(MLFLOW_TRACKING_USERNAME="alice", MLFLOW_TRACKING_PASSWORD=s["alice"])
    got = _cli(["launch", str(spec), "--address", address], tmp_path, env)
    assert got.returncode == 1, _out(got)[-3000:]
    status = _cli(["status", str(spec)], tmp_path, {**env, "COLUMNS": "1000"})  # no wrapping
    text = _out(status)
    logs = "\n".join(  # what Ray kept of the jobs, for the message
        f"{j.message}\n{jobs.get_job_logs(j.submission_id)[-2000:]}"
        for j in jobs.list_jobs()
        if (j.metadata or {}).get("gppo_sweep", "").startswith("nocreds")
    )
    assert "cannot log to MLflow from this node: the tracking server at" in text, (
        text[-3000:] + _out(got)[-3000:] + logs
    )
    assert "refused a request without credentials (HTTP 401)" in text, text[-3000:]
    assert "Traceback" not in text

    # a user without permission on that experiment (alice's): the same kind of line, 403
    from mlflow.server.auth.client import AuthServiceClient

    bob_pw = _secret("bob")
    admin = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": s["admin"]}
    with pytest.MonkeyPatch.context() as mp:
        for var, value in admin.items():
            mp.setenv(var, value)
        AuthServiceClient(mlf.uri).create_user("bob", bob_pw)
    env = _env(MLFLOW_TRACKING_USERNAME="bob", MLFLOW_TRACKING_PASSWORD=bob_pw)
    got = _cli(["status", str(spec)], tmp_path, env)
    lines = [ln for ln in _out(got).splitlines() if ln.strip()]
    assert got.returncode == 2 and len(lines) == 1, _out(got)[-2000:]
    assert f"the tracking server at {mlf.uri} refused the request of user 'bob'" in lines[0]
    assert "HTTP 403" in lines[0] and bob_pw not in lines[0]
