"""The exploration study's separated effect still holds (docs/studies/exploration.md):
at the family's level 0.1 (base avg@8 12.2 %), the testbed's loop gives MC a higher
final avg@8 than Atomic (study: Atomic - MC = -2.3 points, 95 % CI [-3.7, -0.8], Holm p 0.047,
5 seeds x TV and KL).

Seeds 0-1 of both divergences, 8 cells through the real entry point (``python -m
gppo.backends.local``), from the shipped level-0.1 base with an empty cache (nothing is built).
The guard: Atomic's mean final avg@8 does not exceed MC's by more than ``TOL`` points. The
study's per-pair differences (Atomic - MC, same divergence and seed) have an sd of about 2.1
points, so the mean of these 4 pairs has an sd of about 1.05 around the study's -2.3: a value above
+1 is about 3 sds away from what was measured, while a change that made Atomic the better
estimator here (the paper's direction) would cross it. It also checks that both estimators
learn from this base (the level is one where RL has a signal).

The study's numbers are natural-mode figures of one CPU kind (an Intel Xeon with AVX-512, before
CPU cells were pinned: docs/reproducibility.md); the test's cells run pinned, and the guard's
bounds (TOL, MIN_GAIN) were not re-measured in the pinned mode: a failure right after the pin
says to rerun the study's level 0.1 pinned before reading it as a regression.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from gppo import metrics as M

LEVEL = 0.1
SEEDS = (0, 1)
DIVERGENCES = ("tv", "kl")
TOL = 1.0  # points
MIN_GAIN = 5.0  # points: the study's smallest gain at this level is +10.9 (kl/atomic)


def _cell(div: str, est: str, seed: int, tmp_path) -> float:
    """(final - base) avg@8 in points, and the final, of one cell."""
    out = tmp_path / f"{div}-{est}-s{seed}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["GPPO_CACHE_DIR"] = str(tmp_path / "empty-cache")
    cmd = [sys.executable, "-m", "gppo.backends.local", "--method", div, "--estimator", est]
    cmd += ["--seed", str(seed), "--domain", "math", "--set", f"warmstart_target={LEVEL}"]
    cmd += ["--no-mlflow", "--quiet", "--summary-json", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads(out.read_text())
    assert run["base_source"] == "shipped", run["base_source"]
    key = M.eval_domain_metric(8)
    steps = sorted(run["evals"], key=int)
    return 100 * run["evals"][steps[0]][key], 100 * run["evals"][steps[-1]][key]


@pytest.mark.slow
def test_mc_stays_at_or_above_atomic_at_level_0_1(tmp_path) -> None:
    jobs = [(d, e, s) for d in DIVERGENCES for e in ("mc", "atomic") for s in SEEDS]
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(jobs, pool.map(lambda j: _cell(*j, tmp_path), jobs), strict=True))
    finals = {
        e: [results[(d, e, s)][1] for d in DIVERGENCES for s in SEEDS] for e in ("mc", "atomic")
    }
    gains = [final - base for base, final in results.values()]
    assert min(gains) >= MIN_GAIN, results
    diff = sum(finals["atomic"]) / len(finals["atomic"]) - sum(finals["mc"]) / len(finals["mc"])
    assert diff <= TOL, (diff, finals)
