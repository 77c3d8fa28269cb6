"""A fourth trainer from outside the repository: docs/backends.md's example package
(``examples/testbed-backend``) installed the way a user installs it, named by a spec, trains the
testbed's base through ``gppo.testbed`` in a real sweep (real Ray, a SQLite MLflow store).

It checks what the docs promise: the entry point alone makes ``backend: example`` known; the run
follows the backend protocol (:func:`gppo.backends.cell_run.protocol_violations`); the base it
trains is the shipped one (its evaluation matches the record, the same evaluator); it learns
(GRPO's gain at 15 iterations, as the local backend's learning test requires); and the package
imports no backend of this repository.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.backends.cell_run import protocol_violations
from gppo.testbed.shipped import shipped_record

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "testbed-backend"
STEPS = 15
MIN_GAIN = 0.04  # avg@8 (fraction): tests/backends/local/test_learning.py's bar at this budget
RECORD_TOL = 0.02


def test_the_example_imports_no_backend_of_this_repository() -> None:
    for path in sorted(EXAMPLE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                parts = name.split(".")
                sibling = parts[:2] == ["gppo", "backends"] and len(parts) > 2
                assert not (sibling and parts[2] in {"local", "verl", "trl"}), f"{path}: {name}"


def test_an_installed_example_backend_trains_the_testbed_in_a_sweep(tmp_path) -> None:
    site = tmp_path / "site"
    pkg = shutil.copytree(EXAMPLE, tmp_path / "testbed-backend")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    proc = subprocess.run([*pip, "--target", str(site), str(pkg)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    spec = tmp_path / "example.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "example-backend",
                "backend": "example",
                "example": {"steps": STEPS},
                "grid": {"divergences": ["tv"], "estimators": ["mc"]},
                "seeds": 1,
                "eval": {"k": 8},
                "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
                "ray": {"max_concurrent": 1, "resources": {"num_cpus": 1}},
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_RUN_ID")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env["GPPO_CACHE_DIR"] = str(tmp_path / "empty-cache")  # the shipped base, nothing built
    gppo_sweep = [sys.executable, "-c", "from gppo.cli import app; app()"]
    proc = subprocess.run(
        [*gppo_sweep, "launch", str(spec)], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        f"tags.`{M.TAG_ROLE}` = '{M.ROLE_CELL}'",
    )
    assert len(runs) == 1 and runs[0].data.tags[M.TAG_BACKEND] == "example"
    run = runs[0]
    record = shipped_record("math")["avg_at_8"]
    problems = protocol_violations(
        client, run.info.run_id, eval_k=8, benchmarks=list(record), final_step=STEPS
    )
    assert problems == []
    base = {b: client.get_metric_history(run.info.run_id, M.eval_metric(b, 8)) for b in record}
    for name, want in record.items():
        at_0 = [m.value for m in base[name] if m.step == 0]
        assert at_0 and abs(at_0[0] - want) <= RECORD_TOL, (name, at_0, want)
    history = client.get_metric_history(run.info.run_id, M.eval_domain_metric(8))
    by_step = {m.step: m.value for m in history}
    gain = by_step[STEPS] - by_step[0]
    assert gain >= MIN_GAIN, json.dumps(by_step)
