"""Ray's token auth (Ray 2.60): where the token comes from, and a local head with auth on
(``RAY_AUTH_MODE=token``; or the mode unset and a token in ``~/.ray/auth_token``, as a plain
``ray.init()`` leaves it) and off, each started, found reachable and running a sweep's job.

HOME is a temp dir in every test here, so Ray never reads or writes the real ``~/.ray``."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.grid import load_plan
from gppo.sweep.cluster import ray_http
from gppo.sweep.cluster.connect import (
    ensure_cluster,
    read_cluster,
    start_local_head,
    stop_local_head,
)
from gppo.sweep.launch import Launcher
from gppo.sweep.session import sweep_state_dir

from .conftest import write_spec

REAL_TOKEN = Path.home() / ".ray" / "auth_token"  # read before any test moves HOME


def _reset_ray_token_cache() -> None:
    """Ray's loader keeps a token it found for the life of the process."""
    from ray._raylet import AuthenticationTokenLoader

    AuthenticationTokenLoader.instance().reset_cache()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh HOME with no Ray token, and none in the environment either."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    real_before = REAL_TOKEN.exists()
    _reset_ray_token_cache()
    yield home
    _reset_ray_token_cache()
    assert REAL_TOKEN.exists() == real_before, "a test wrote the real ~/.ray/auth_token"


def test_the_token_comes_from_where_ray_looks(home, tmp_path, monkeypatch):
    assert ray_http.token_header() == {}
    assert ray_http.head_auth_mode() == "disabled"
    # ~/.ray/auth_token, what ray.init() writes: `ray start --head` then turns auth on
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("from-home")
    assert ray_http.token_header() == {"authorization": "Bearer from-home"}
    assert ray_http.head_auth_mode() == "token"
    # RAY_AUTH_TOKEN_PATH, then RAY_AUTH_TOKEN, take precedence
    (tmp_path / "tok").write_text("from-path")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
    _reset_ray_token_cache()
    assert ray_http.token_header() == {"authorization": "Bearer from-path"}
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    _reset_ray_token_cache()
    assert ray_http.token_header() == {"authorization": "Bearer from-env"}
    # an explicit mode wins
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert ray_http.head_auth_mode() == "disabled"


def test_a_cluster_that_accepts_but_never_answers_times_out(home):
    """A status GET gives up (Ray's own client would wait forever)."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)  # connections complete in the kernel; nothing ever answers
        address = f"http://127.0.0.1:{srv.getsockname()[1]}"
        t0 = time.monotonic()
        assert not ray_http.reachable(address, timeout=0.5)
        assert ray_http.cluster_auth_mode(address, timeout=0.5) is None
        with pytest.raises(OSError):
            ray_http.job_client(address, timeout_s=0.5)
        assert time.monotonic() - t0 < 10


def _bare_status(address: str) -> int:
    """The status of a request with no token (Ray's auth off: 200; on: 401)."""
    try:
        with urllib.request.urlopen(f"{address}/api/version", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.slow
@pytest.mark.parametrize("auth", ["token", "home-token", "off"])
def test_local_head_and_a_sweep_with_auth_on_and_off(auth, home, tmp_path, monkeypatch):
    if auth == "token":  # auth on explicitly, the token in a file of its own
        (tmp_path / "tok").write_text("explicit-token")
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
    elif auth == "home-token":  # the mode unset, ~/.ray/auth_token there (a ray.init() ran)
        (home / ".ray").mkdir()
        (home / ".ray" / "auth_token").write_text("home-token")
    on = auth != "off"
    spec = write_spec(
        tmp_path, None, name=f"auth-{auth}", grid={"divergences": ["tv"], "estimators": ["mc"]}
    )
    plan = load_plan(spec)
    state = sweep_state_dir(plan)  # the head the launch will find, as a relaunch does
    cluster = start_local_head(state, num_cpus=1, num_gpus=0)
    try:
        assert ray_http.cluster_auth_mode(cluster.address) == ("token" if on else "disabled")
        assert _bare_status(cluster.address) == (401 if on else 200)
        assert ray_http.reachable(cluster.address)
        assert ensure_cluster(None, state, start=False) == cluster  # found, and reachable
        # the Jobs API client: submit, status, logs (Ray's own client would be refused here
        # with auth on: this process has no RAY_AUTH_MODE=token in "home-token")
        jobs = cluster.client()
        sid = jobs.submit_job(entrypoint="echo authenticated", entrypoint_num_cpus=0.1)
        deadline = time.monotonic() + 60
        while jobs.get_job_status(sid).value in ("PENDING", "RUNNING"):
            assert time.monotonic() < deadline, "the job did not end"
            time.sleep(0.3)
        assert jobs.get_job_status(sid).value == "SUCCEEDED"
        assert "authenticated" in jobs.get_job_logs(sid)

        result = Launcher(plan, poll_s=0.3).run()  # submits, polls, reads logs
        assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
        client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
        exp = client.get_experiment_by_name(plan.spec.experiment)
        (run,) = [
            r
            for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL
        ]
        assert run.info.status == "FINISHED" and run.data.tags[M.TAG_FINISHED] == "true"
        assert read_cluster(state) is None  # the launch stopped the head it used
    finally:
        stop_local_head(state)
    assert not (home / ".ray").exists() or auth == "home-token"  # nothing written to HOME/.ray
