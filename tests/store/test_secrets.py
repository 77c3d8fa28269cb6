"""No secret in what is shown or stored: the one redaction (:func:`gppo.store.uri.redact`), what a
job is given (:func:`without_password`), an HTTP tracking URI's credentials moved into MLflow's
variables, the one line of a server's refusal, and the secrets scan of the end-to-end test finding
a leak planted in each kind of place it searches."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import PERMISSION_DENIED, UNAUTHENTICATED
from sweep.secrets_scan import scan

from gppo.errors import CredentialsRefused
from gppo.store.health import auth_refusal, failure_line, named_refusals
from gppo.store.uri import (
    ENV_PASSWORD,
    ENV_USERNAME,
    redact,
    resolve_tracking_uri,
    split_userinfo,
    without_password,
)

PW = "S3CRETpw-f00d"


@pytest.mark.parametrize(
    ("uri", "shown", "given"),
    [
        (f"http://alice:{PW}@127.0.0.1:5999", "http://alice:***@127.0.0.1:5999",
         "http://alice@127.0.0.1:5999"),
        (f"postgresql+psycopg://gppo:{PW}@db:5432/optuna", "postgresql+psycopg://gppo:***@db:5432/optuna",
         "postgresql+psycopg://gppo@db:5432/optuna"),
        (f"postgresql://gppo@db/o?sslmode=require&password={PW}",
         "postgresql://gppo@db/o?sslmode=require&password=***", "postgresql://gppo@db/o?sslmode=require"),
        ("http://127.0.0.1:5000/x", "http://127.0.0.1:5000/x", "http://127.0.0.1:5000/x"),
        ("sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db"),
    ],
)  # fmt: skip
def test_redact_and_without_password(uri: str, shown: str, given: str) -> None:
    assert redact(uri) == shown and redact(shown) == shown
    assert without_password(uri) == given
    assert PW not in redact(uri) + without_password(uri)


def test_redact_finds_every_uri_in_a_message() -> None:
    msg = (
        f"(psycopg.OperationalError) connection to postgresql+psycopg://gppo:{PW}@db:5432/optuna "
        f"failed; tracking 'http://alice:{PW}x@h:1' refused"
    )
    out = redact(msg)
    assert PW not in out and out.count(":***@") == 2 and "gppo:***@db:5432/optuna" in out


def test_http_uri_credentials_go_to_mlflow_variables(monkeypatch) -> None:
    for var in (ENV_USERNAME, ENV_PASSWORD):
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    assert split_userinfo("http://al%40ice:p%3Aw@h:1/p") == ("http://h:1/p", "al@ice", "p:w")
    assert resolve_tracking_uri(f"http://alice:{PW}@127.0.0.1:5999") == "http://127.0.0.1:5999"
    import os

    assert (os.environ[ENV_USERNAME], os.environ[ENV_PASSWORD]) == ("alice", PW)
    # the same credentials again: fine; other ones: one line, no password in it
    assert resolve_tracking_uri(f"http://alice:{PW}@127.0.0.1:5999") == "http://127.0.0.1:5999"
    with pytest.raises(CredentialsRefused) as err:
        resolve_tracking_uri("http://alice:other-pass@127.0.0.1:5999")
    assert "MLFLOW_TRACKING_PASSWORD is set to another one" in str(err.value)
    assert "other-pass" not in str(err.value) and PW not in str(err.value)


def test_a_refusal_is_one_line_naming_the_server(monkeypatch) -> None:
    monkeypatch.setenv(ENV_USERNAME, "alice")
    e401 = MlflowException("failed with error code 401 != 200", error_code=UNAUTHENTICATED)
    e403 = MlflowException("failed with error code 403 != 200", error_code=PERMISSION_DENIED)
    assert (auth_refusal(e401), auth_refusal(e403), auth_refusal(ValueError("x"))) == (
        401,
        403,
        None,
    )
    for exc, says in ((e401, "refused the credentials of user 'alice' (HTTP 401)"),
                      (e403, "refused the request of user 'alice' (HTTP 403")):  # fmt: skip
        with pytest.raises(CredentialsRefused) as err, named_refusals(f"http://u:{PW}@srv:5000"):
            raise exc
        line = str(err.value)
        assert "\n" not in line and says in line and "http://u:***@srv:5000" in line, line
    with pytest.raises(ValueError), named_refusals("http://srv"):  # other errors pass through
        raise ValueError("not a refusal")
    tag = (
        "job FAILED\nprobe x\ncannot log to MLflow from this node: the tracking server at h refused"
    )
    assert failure_line(tag) == "job FAILED: " + tag.split("\n")[-1]
    assert failure_line("job FAILED\nTraceback (most recent call last):") == "job FAILED"


def test_the_scan_finds_a_planted_leak(tmp_path: Path) -> None:
    """Each kind of place the end-to-end scan searches, clean and then with the secret planted:
    a file, a SQLite database (the MLflow store, the basic-auth user store), a nested artifact,
    a text (launcher output, Ray job info, job logs), as written and as a basic-auth header."""
    clean = tmp_path / "run"
    (clean / "artifacts" / "report").mkdir(parents=True)
    (clean / "artifacts" / "report" / "report.html").write_text("<p>http://alice:***@h</p>")
    db = clean / "mlflow.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE tags (key TEXT, value TEXT)")
        c.execute("INSERT INTO tags VALUES ('uri', 'http://alice@h:5000')")
    texts = {"launch": "submitted tv-mc-s0", "ray job": '{"env_vars": {"X": "http://h"}}'}
    assert scan([("alice", PW)], paths=[clean], texts=texts) == []

    with sqlite3.connect(db) as c:  # a password stored in a run's tag
        c.execute("INSERT INTO tags VALUES ('uri', ?)", (f"http://alice:{PW}@h:5000",))
    (clean / "artifacts" / "report" / "spec.yaml").write_text(f"uri: http://alice:{PW}@h")
    import base64

    header = base64.b64encode(f"alice:{PW}".encode()).decode()
    texts = {**texts, "logs": f"Authorization: Basic {header}", "plan": f"URI=http://a:{PW}@h"}
    hits = scan([("alice", PW)], paths=[clean], texts=texts)
    where = {h.split(": ...")[0] for h in hits}
    spec = str(clean / "artifacts" / "report" / "spec.yaml")
    assert where == {"logs", "plan", spec, str(db)}, hits
    assert all(PW not in h and "<SECRET>" in h for h in hits)  # a failing test never prints it
