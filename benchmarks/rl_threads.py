"""Is the RL stage robust to float rounding? GRPO (tv/mc) from the shipped base, several seeds, at
``num_threads`` 1 and 2 (another reduction order in every matmul), through the real entry point.

    .venv/bin/python benchmarks/rl_threads.py [--domain math] [--seeds 3] [--parallel 2]

Prints the final avg@8 per run, each thread count's mean with a 95% t-interval over seeds, and
the gain over the base (the step-0 evaluation of the same runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from scipy import stats

sys.path.insert(0, os.path.dirname(__file__))
from _cells import run_many

from gppo import metrics as M


def t_interval(xs: list[float]) -> tuple[float, float]:
    m, sd, n = statistics.mean(xs), statistics.stdev(xs), len(xs)
    h = stats.t.ppf(0.975, n - 1) * sd / n**0.5
    return m - h, m + h


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domain", default="math")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--parallel", type=int, default=2)
    a = ap.parse_args()
    key = M.eval_domain_metric(8)
    jobs = [
        [
            *("--method", "grpo", "--seed", str(s), "--domain", a.domain, "--no-mlflow"),
            *("--set", f"num_threads={t}"),
        ]
        for t in a.threads
        for s in range(a.seeds)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        results = run_many(jobs, a.parallel, tmp)
    print("| threads | seed | base | final | gain |\n| --- | --- | --- | --- | --- |")
    by_threads: dict[int, list[float]] = {}
    base = None
    for job, res in zip(jobs, results, strict=True):
        ev = res.summary["evals"]
        steps = sorted(ev, key=int)
        base, final = 100 * ev[steps[0]][key], 100 * ev[steps[-1]][key]
        t, s = int(job[-1].split("=")[1]), int(job[3])
        by_threads.setdefault(t, []).append(final)
        print(f"| {t} | {s} | {base:.1f} | {final:.1f} | {final - base:+.1f} |")
    print()
    for t, finals in by_threads.items():
        lo, hi = t_interval(finals)
        print(
            f"threads {t}: mean {statistics.mean(finals):.1f} [95% CI {lo:.1f}, {hi:.1f}], "
            f"gain over the base {statistics.mean(finals) - base:+.1f} points"
        )


if __name__ == "__main__":
    main()
