"""What the pinned CPU kernels cost (:mod:`gppo.testbed.cpu_kernels`): the quick start's cell, the
same seed, in the pinned and the natural mode, measured in one run on this CPU.

    .venv/bin/python benchmarks/bench_cpu_kernels.py [--method tv --estimator mc --seed 2] [--reps 2]

Each repetition runs one pinned and one natural cell at the same time (one per core, so that both
see the same load on a shared machine), through the real entry point from an environment without
the kernel variables. Prints a table per repetition and the medians with the ratio pinned /
natural: training seconds (the RL loop: sampling and updates), the process's CPU seconds
(imports included) and the final avg@8, which must be the same number in every pinned run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from _cells import run_many

from gppo import metrics as M
from gppo.testbed import cpu_kernels

COLUMNS = (("train s", M.PERF_TRAIN_S), ("CPU s", M.PERF_CPU_S), ("update s", M.PERF_UPDATE_S))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", default="tv")
    ap.add_argument("--estimator", default="mc")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--domain", default="math")
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    for name in cpu_kernels.KERNEL_VARS:  # the natural mode: this machine's own kernels
        os.environ.pop(name, None)
    cell = ["--method", a.method, "--estimator", a.estimator, "--seed", str(a.seed)]
    cell += ["--domain", a.domain, "--no-mlflow"]
    modes = (cpu_kernels.PINNED, cpu_kernels.NATURAL)
    jobs = [[*cell, "--set", f"cpu_kernels={m}"] for _ in range(a.reps) for m in modes]
    with tempfile.TemporaryDirectory() as tmp:
        results = run_many(jobs, 2, tmp)
    key = M.eval_domain_metric(8)
    print(f"CPU: {cpu_kernels.cpu_model()}; {a.method}/{a.estimator} seed {a.seed}, {a.domain}")
    print("| rep | mode | " + " | ".join(c for c, _ in COLUMNS) + " | avg@8 |")
    print("| --- | --- | " + " | ".join("---" for _ in COLUMNS) + " | --- |")
    by_mode: dict[str, list[dict]] = {m: [] for m in modes}
    for i, (job, res) in enumerate(zip(jobs, results, strict=True)):
        mode = job[-1].split("=", 1)[1]
        perf = res.summary["perf"]
        final = res.summary["evals"][max(res.summary["evals"], key=int)][key]
        by_mode[mode].append({**perf, "avg": final})
        cols = " | ".join(f"{perf[k]:.1f}" for _, k in COLUMNS)
        print(f"| {i // 2 + 1} | {mode} | {cols} | {final:.5f} |")
    print()
    print("| median | " + " | ".join(c for c, _ in COLUMNS) + " |")
    print("| --- | " + " | ".join("---" for _ in COLUMNS) + " |")
    med = {
        m: {k: statistics.median(r[k] for r in rows) for _, k in COLUMNS}
        for m, rows in by_mode.items()
    }
    for m in modes:
        print(f"| {m} | " + " | ".join(f"{med[m][k]:.1f}" for _, k in COLUMNS) + " |")
    ratios = " | ".join(f"{med['pinned'][k] / med['natural'][k]:.2f}x" for _, k in COLUMNS)
    print(f"| pinned / natural | {ratios} |")
    pinned = {r["avg"] for r in by_mode[cpu_kernels.PINNED]}
    print(f"\npinned avg@8: {sorted(pinned)} ({'one number' if len(pinned) == 1 else 'DIFFER'})")


if __name__ == "__main__":
    main()
