"""The testbed's pre-flight timing, measured for real: ``plan`` of a testbed spec on a machine with
an empty cache times one cell in a process of its own (its kernels and threads), keeps the timing in
the cache root, and the next ``plan`` reads it without starting a process. The fast tests that plan
a testbed spec are given a timing instead (``timed_preflight`` in ``tests/conftest.py``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gppo.cli import app

ROOT = Path(__file__).resolve().parents[3]
ONE_SEED = ROOT / "configs" / "quickstart-1seed.yaml"


@pytest.mark.slow
def test_plan_times_the_pre_flight_once_then_reads_it(tmp_path, monkeypatch):
    cache = tmp_path / "empty-cache"
    monkeypatch.setenv("GPPO_CACHE_DIR", str(cache))
    monkeypatch.chdir(tmp_path)
    first = CliRunner().invoke(app, ["plan", str(ONE_SEED)], env={"COLUMNS": "200"})
    assert first.exit_code == 0, first.output
    assert "pre-flight" in first.stdout, first.stdout[-800:]
    timings = list((cache / "step-timing").glob("*.json"))
    assert timings, "the pre-flight's timing is kept in the cache root"

    def no_process(*args, **kwargs):
        raise AssertionError("the second plan timed the pre-flight again")

    monkeypatch.setattr(subprocess, "run", no_process)
    second = CliRunner().invoke(app, ["plan", str(ONE_SEED)], env={"COLUMNS": "200"})
    assert second.exit_code == 0, second.output
    forecast = [line for line in first.stdout.splitlines() if "CPU-h" in line]
    assert forecast and forecast == [line for line in second.stdout.splitlines() if "CPU-h" in line]
    assert not (tmp_path / "mlflow.db").exists()  # plan is a dry run
