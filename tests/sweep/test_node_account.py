"""docs/cluster-guide.md's "A node account" recipe, run as written there against MLflow's
basic-auth server (default permission NO_PERMISSIONS): the node account logs into runs of
experiments another user (the launcher's account) created before it and after it (the launcher
creates experiments on the fly); a node account without the role is refused (HTTP 403), which
is what a refused cell's one line names (issue 46)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import types
import uuid
from pathlib import Path

import pytest

from gppo.store.health import auth_refusal

from .servers import _stop_all, spawn_auth_mlflow

pytestmark = pytest.mark.slow

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "cluster-guide.md"


def _recipe() -> str:
    """The guide's Python block under "A node account"."""
    text = GUIDE.read_text()
    section = text[text.index("**A node account.**") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _as(user: str, password: str) -> None:
    os.environ.update(MLFLOW_TRACKING_USERNAME=user, MLFLOW_TRACKING_PASSWORD=password)


def test_the_guides_node_account_recipe_lets_the_nodes_log_to_every_experiment(monkeypatch):
    from mlflow import MlflowClient
    from mlflow.server.auth.client import AuthServiceClient

    for var in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    root = Path(tempfile.mkdtemp(prefix="gppo-node-acct-", dir="/tmp"))
    admin_pw, alice_pw, node_pw = (f"{w}-{uuid.uuid4().hex}" for w in ("adm", "alice", "node"))
    proc, server = spawn_auth_mlflow(root, f"sqlite:///{root}/mlflow.db", admin_pw)
    try:
        _as("admin", admin_pw)
        AuthServiceClient(server.uri).create_user("alice", alice_pw)
        _as("alice", alice_pw)  # the launcher's account: it creates the sweep's experiments
        first = MlflowClient(server.uri)
        run1 = first.create_run(first.create_experiment("sweep-a")).info.run_id

        # the recipe, as the guide writes it (its password prompt answered here)
        _as("admin", admin_pw)
        prompt = types.SimpleNamespace(getpass=lambda _prompt="": node_pw)
        code = _recipe().replace("http://TRACKING_HOST:5000", server.uri)
        code = code.replace("import getpass\n", "")
        exec(compile(code, str(GUIDE), "exec"), {"getpass": prompt})

        _as("alice", alice_pw)
        run2 = first.create_run(first.create_experiment("sweep-b")).info.run_id  # created after
        _as("gppo-nodes", node_pw)
        node = MlflowClient(server.uri)
        for run, value in ((run1, 1.0), (run2, 2.0)):
            node.log_metric(run, "train/score", value)
            node.set_tag(run, "gppo.node", "ok")
            assert node.get_run(run).data.metrics["train/score"] == value

        # without the role (another node account): 403, the refusal the cell's line names
        _as("admin", admin_pw)
        AuthServiceClient(server.uri).create_user("other-node", node_pw)
        _as("other-node", node_pw)
        with pytest.raises(Exception) as refused:
            MlflowClient(server.uri).log_metric(run2, "train/score", 3.0)
        assert auth_refusal(refused.value) == 403
    finally:
        for var in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            os.environ.pop(var, None)
        _stop_all([proc])
        shutil.rmtree(root, ignore_errors=True)
