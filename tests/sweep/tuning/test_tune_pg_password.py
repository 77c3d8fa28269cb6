"""``gppo-sweep tune`` on PostgreSQL storage with a wrong or missing ``PGPASSWORD`` (issue 46):
one line naming the database server and the account, never the password; exit 2; nothing
started (no Ray head, no study, no MLflow store)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from ..conftest import TESTS_DIR
from ..servers import _start_postgres
from .conftest import spec_dict, write

pytestmark = pytest.mark.slow

CLI = (
    f"import sys; sys.path.insert(0, {str(TESTS_DIR)!r}); import sweep.tuning.tune_probe; "
    "from gppo.cli import app; app()"
)


@pytest.fixture(scope="module")
def pg_with_password():
    root = Path(tempfile.mkdtemp(prefix="gppo-pgpw-", dir="/tmp"))
    root.chmod(0o755)  # the postgres user (PostgreSQL as root) must reach its data dir
    password = f"pg-{uuid.uuid4().hex}"
    pg_ctl: list[str] = []
    try:
        pg, pg_ctl = _start_postgres(root, password=password)
        yield pg, password
    finally:
        if pg_ctl:
            subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("given", ["wrong", "missing"])
def test_a_refused_storage_password_is_one_line_and_starts_nothing(
    tmp_path: Path, pg_with_password, given: str
) -> None:
    pg, password = pg_with_password
    storage = pg.url("optuna")
    path = write(tmp_path, spec_dict(tmp_path, None, tune={"storage": storage}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "RAY_", "MLFLOW_"))}
    if given == "wrong":
        env["PGPASSWORD"] = "not-" + password
    env["PGPASSFILE"] = str(tmp_path / "no-pgpass")
    got = subprocess.run(
        [sys.executable, "-c", CLI, "tune", str(path)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = got.stdout + got.stderr
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert got.returncode == 2 and len(lines) == 1, out[-3000:]
    assert f"database server at 127.0.0.1:{pg.port}/optuna" in lines[0]
    assert "user 'gppo'" in lines[0] and "PGPASSWORD" in lines[0]
    assert password not in out
    assert not list(tmp_path.glob("*.db")) and not list(tmp_path.glob(".gppo*"))
