"""The typer app: plan (table and --json), help speed (no Ray/MLflow import), status (ui: in
test_cli_ui.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gppo.cli import app

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
import sweep.probe_backend  # noqa: E402, F401

SPEC = """\
name: clitest
backend: probe
probe: {steps: 1}
grid: {divergences: [tv, kl], estimators: [mc, atomic]}
baselines: [gspo]
seeds: 2
tracking: {uri: "sqlite:///TMP/mlflow.db"}
"""


def write(tmp_path: Path) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(SPEC.replace("TMP", str(tmp_path)))
    return path


def test_plan_json(tmp_path):
    result = CliRunner().invoke(app, ["plan", str(write(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["cell"] for r in rows] == [
        "tv-mc-s0", "tv-mc-s1", "tv-atomic-s0", "tv-atomic-s1",
        "kl-mc-s0", "kl-mc-s1", "kl-atomic-s0", "kl-atomic-s1", "gspo-s0", "gspo-s1",
    ]  # fmt: skip
    r = rows[0]
    assert {"cell", "method", "divergence", "estimator", "delta", "seed", "entrypoint"} <= set(r)
    assert r["method"] == "gppo" and abs(r["delta"] - 0.2) < 1e-12 and r["seed"] == 0
    assert r["entrypoint"][0] == sys.executable and r["entrypoint"][1].endswith("probe_job.py")
    assert json.loads(r["entrypoint"][2])["id"] == "tv-mc-s0"
    # tv-mc at δ = 0.2 is PPO's clip [0.8, 1.2] at every μ
    assert all(abs(lo - 0.8) < 1e-9 and abs(hi - 1.2) < 1e-9 for lo, hi in r["region"])
    assert rows[-1]["method"] == "gspo" and rows[-1]["region"] is None
    assert not (tmp_path / "mlflow.db").exists()


def test_plan_table(tmp_path):
    result = CliRunner().invoke(app, ["plan", str(write(tmp_path))], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "clitest-" in out and "10 cells" in out
    assert "kl-atomic-s1" in out and "μ=0.01" in out and "[0.8, 1.2]" in out
    assert "job commands" in out and "probe_job.py" in out


@pytest.mark.slow
def test_help_and_plan_do_not_import_ray_or_mlflow(tmp_path):
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import sweep.probe_backend\n"
        "from typer.testing import CliRunner\nfrom gppo.cli import app\n"
        "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output\n"
        f"r = CliRunner().invoke(app, ['plan', {str(write(tmp_path))!r}]); assert r.exit_code == 0\n"
        "bad = [m for m in ('ray', 'mlflow') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_status_before_launch_writes_nothing(tmp_path):
    result = CliRunner().invoke(app, ["status", str(write(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 10 and {r["state"] for r in rows} == {"pending"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.yaml"]


def test_unknown_cell_for_logs_and_cancel(tmp_path):
    spec = str(write(tmp_path))
    for cmd in (["logs", spec, "kl-mc-s9"], ["cancel", spec, "nope; rm -rf /"]):
        result = CliRunner().invoke(app, cmd)
        assert result.exit_code == 2
        assert result.stderr.startswith(f"{spec}: no cell ")
        assert len(result.stderr.splitlines()) == 1
