"""The code base stays ruff-clean (format and lint, configured in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))


@pytest.mark.slow
@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_clean(args):
    proc = subprocess.run(
        [RUFF, *args, "gppo", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_process_started_outside_a_slow_test_fails_it(tmp_path):
    """The fast-tier rule (tests/conftest.py) can fail: a test without the marker that starts a
    process fails, with what to do; the same test marked slow passes."""
    for name in ("conftest.py", "suite_processes.py"):  # the suite's conftest and its import
        shutil.copy(Path(__file__).with_name(name), tmp_path / name)
    (tmp_path / "test_probe.py").write_text(
        "import subprocess, sys, pytest\n"
        "def test_unmarked():\n"
        "    subprocess.run([sys.executable, '-c', 'pass'])\n"
        "@pytest.mark.slow\n"
        "def test_marked():\n"
        "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
         "-o", "markers=slow", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout[-2000:]
    assert "test_unmarked starts a process (subprocess): mark it @pytest.mark.slow" in proc.stdout
