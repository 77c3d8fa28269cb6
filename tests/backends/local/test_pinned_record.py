"""This machine gives the quick start's recorded pinned-mode numbers (docs/reproducibility.md).

``data/pinned_quickstart.json`` holds the quick start's final avg@8 per cell, seed and benchmark in
the pinned mode (:mod:`gppo.testbed.cpu_kernels`), with the CPU model, torch version and commit
it came from. The test reruns its fast cells (tv/mc, the learning test's GRPO, seeds 0 and 1:
the quick start's own cells from ``configs/quickstart.yaml``) through the real entry point and
asks for the recorded numbers to the last bit. A failure names both CPU models: the promise is the
same numbers on every x86-64 CPU with AVX2, so a difference on a new CPU kind is a finding to
record (docs/reproducibility.md, "Checking a machine"), not noise. On an ARM CPU the pin does not
apply and the test is skipped: there, compare Table 1 row by row with the recorded intervals.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gppo import metrics as M
from gppo.grid import load_plan
from gppo.testbed import cpu_kernels

ROOT = Path(__file__).resolve().parents[3]
RECORD = Path(__file__).with_name("data") / "pinned_quickstart.json"
FAST_CELLS = ("tv-mc-s0", "tv-mc-s1")


def _record() -> dict:
    return json.loads(RECORD.read_text())


def _rerun(cell_json: str, out: Path, cache: Path) -> dict[str, float]:
    """The cell's final avg@8 per benchmark, run here from an environment without kernel
    variables (the cell pins itself)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MLFLOW_") and k not in cpu_kernels.KERNEL_VARS
    }
    env.update(GPPO_CACHE_DIR=str(cache), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "gppo.backends.local", "--cell", cell_json]
    cmd += ["--no-mlflow", "--quiet", "--summary-json", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = json.loads(out.read_text())["evals"]
    final = evals[max(evals, key=int)]
    cell = json.loads(cell_json)
    return {b: final[M.eval_metric(b, cell["eval_k"])] for b in cell["benchmarks"]}


def test_the_record_is_of_todays_pin():
    rec = _record()
    assert rec["pinned_env"] == cpu_kernels.PINNED_ENV, (
        "the pin changed: record the quick start again"
    )
    plan = load_plan(ROOT / "configs" / "quickstart.yaml")
    assert sorted(rec["avg_at_8"]) == sorted(c.id for c in plan.cells)


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the pin is x86-64's")
def test_the_fast_cells_end_at_the_recorded_numbers(tmp_path):
    rec = _record()
    plan = load_plan(ROOT / "configs" / "quickstart.yaml")
    with ThreadPoolExecutor(len(FAST_CELLS)) as pool:
        futures = {
            c: pool.submit(_rerun, plan.cell(c).to_json(), tmp_path / f"{c}.json", tmp_path / "c")
            for c in FAST_CELLS
        }
        got = {c: f.result() for c, f in futures.items()}
    here = cpu_kernels.cpu_model()
    wrong = [
        f"{cell}: {got[cell]} here ({here}), {rec['avg_at_8'][cell]} recorded ({rec['cpu']})"
        for cell in FAST_CELLS
        if got[cell] != rec["avg_at_8"][cell]
    ]
    assert not wrong, (
        f"the pinned mode gives other numbers on {here} than on {rec['cpu']} "
        f"(torch {rec['torch']} there):\n" + "\n".join(wrong)
    )
