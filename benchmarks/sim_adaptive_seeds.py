"""Adaptive seeds by simulation (issue 48): the A/A error of the rule in
``gppo/stats/sequential.py`` and its runs and power against a fixed sweep at ``max`` seeds.

(a) **A/A**: every cell of a table the same distribution; the share of sweeps with any row
separated from the reference (a wrong separation) and its Clopper-Pearson 95% interval, for
synthetic normals with the testbed's seed sd (2 points; Table 1's pooled sd is 1.91), for the
exploration study's recorded runs resampled (``docs/data/exploration-runs.csv``, the 10 MC runs at
one level: every cell draws from the same 10 scores), and for a lone comparison (one row, df = 2
at the first look: the t approximation's worst case).

(b) **Effects**: the quick start's Table 1 (``docs/testbed.md``, 2026-12-05: its Δs taken as the
true ones; chi2/mc runs on tv/mc's runs; the base model's row, -18 points, is in the correction's
family and separated outside the rule) and a table of clearer effects (5 baselines 5-15 points
below, 10 grid rows within ±2 points): runs used, per-row decisions and power (share of sweeps
where the row is separated) of the adaptive sweep, against the fixed sweep at ``max`` seeds with
the table's pooled t-test and Holm (the same family-wise error) or Benjamini-Hochberg (the table's
default, false discovery rate only). Seed noise normal (sd 2) or the exploration study's learning
cells' per-seed deviations resampled (levels 0.25 and 0.1, 60 runs, centred per cell).

    .venv/bin/python benchmarks/sim_adaptive_seeds.py [--sweeps 4000] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats
from sequential_sim import (  # benchmarks/, beside this script
    normal_noise,
    resampled_noise,
    simulate,
)
from tabulate import tabulate

from gppo.stats.sequential import EQUIVALENT, FUTILE, SEPARATED, Design

RUNS_CSV = Path(__file__).resolve().parents[1] / "docs" / "data" / "exploration-runs.csv"
SEED_SD = 2.0
#: the quick start's Table 1 (docs/testbed.md): Δ vs tv/mc in points, chi2/mc on tv/mc's runs
QUICKSTART = {
    "tv/binary": -1.7,
    "tv/atomic": -3.0,
    "hellinger/mc": -2.1,
    "hellinger/binary": -1.7,
    "hellinger/atomic": -1.9,
    "chi2/mc": 0.0,
    "chi2/binary": -1.4,
    "chi2/atomic": -1.8,
    "kl/mc": -1.1,
    "kl/binary": -3.9,
    "kl/atomic": -5.2,
    "gspo": -3.0,
    "gmpo": -2.3,
    "sapo": -5.6,
    "cispo": -6.1,
    "clip-cov": -5.9,
}
SAME_RUNS = {"chi2/mc"}
CLEARER = {
    **{f"baseline {i + 1}": -d for i, d in enumerate((5.0, 7.5, 10.0, 12.5, 15.0))},
    "chi2/mc": 0.0,
    **{f"grid {i + 1}": d for i, d in enumerate((-2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0))},
}
#: the pooled test, as issue 48's study measured (docs/studies/adaptive-seeds.md); Welch's test,
#: the default since issue 58, is in benchmarks/error_rate.py
DESIGNS = {
    "2-8, +1": Design(2, 8, 1, test="pooled"),
    "2-6, +1": Design(2, 6, 1, test="pooled"),
    "2-10, +2": Design(2, 10, 2, test="pooled"),
    "2-8, +1, Bonferroni": Design(2, 8, 1, correction="bonferroni", test="pooled"),
    "2-8, +1, O'Brien-Fleming 5%": Design(2, 8, 1, futility=0.05, spending="obf", test="pooled"),
}


def recorded(point: float) -> np.ndarray:
    """The exploration study's 10 MC runs (TV and KL) at level ``point``: final avg@8, %."""
    runs = pd.read_csv(RUNS_CSV)
    return runs[(runs.point == point) & (runs.estimator == "mc")]["final"].to_numpy()


def residuals() -> np.ndarray:
    """Per-seed deviations from their cell's mean, the learning levels (0.25, 0.1), 60 runs."""
    runs = pd.read_csv(RUNS_CSV)
    runs = runs[runs.point.isin([0.25, 0.1])]
    return (
        runs.final - runs.groupby(["point", "divergence", "estimator"]).final.transform("mean")
    ).to_numpy()


def _ci(k: int, n: int) -> str:
    lo, hi = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    return f"{k / n:.4f} [{lo:.4f}, {hi:.4f}]"


def aa(sweeps: int, seed: int) -> list[dict]:
    """(a): the A/A error of each design and noise, 17 rows (and a lone comparison)."""
    noises = {
        "normal, sd 2": normal_noise(SEED_SD),
        "recorded: exploration MC at 0.25 (10 runs)": resampled_noise(recorded(0.25)),
        "recorded: exploration MC at 0.1 (10 runs)": resampled_noise(recorded(0.1)),
    }
    cases = [(d, nz, 17) for d in DESIGNS for nz in noises]
    cases += [
        ("2-8, +1", "normal, sd 2", 1),
        ("2-8, +1", "recorded: exploration MC at 0.25 (10 runs)", 1),
    ]
    out = []
    for i, (dname, nname, rows) in enumerate(cases):
        design = DESIGNS[dname]
        r = simulate(np.zeros(rows), design, sweeps, np.random.default_rng(seed + i), noises[nname])
        wrong = int((r.status == SEPARATED).any(axis=1).sum())
        out.append(
            {
                "design": dname,
                "noise": nname,
                "rows": rows,
                "sweeps": sweeps,
                "any wrong separation (95% CI)": _ci(wrong, sweeps),
                "fixed at max, Holm": _ci(int(r.fixed_holm.any(axis=1).sum()), sweeps),
                "runs / fixed": f"{r.runs.mean() / r.fixed_runs:.3f}",
            }
        )
    return out


def effects(table: dict[str, float], design: Design, sweeps: int, seed: int, noise) -> dict:
    """(b): runs and per-row decisions of the adaptive sweep and the fixed one at max."""
    names = list(table)
    same = [k in SAME_RUNS for k in names]
    r = simulate(list(table.values()), design, sweeps, np.random.default_rng(seed), noise, same, 1)
    sep, futile, at_max = r.status == SEPARATED, r.status == FUTILE, r.n >= design.max_seeds
    rows = []
    for j, k in enumerate(names):
        rows.append(
            {
                "row": k,
                "true Δ": table[k],
                "seeds (mean)": "same runs" if same[j] else f"{r.n[:, j].mean():.2f}",
                "separated": f"{sep[:, j].mean():.3f}",
                "equivalent": f"{(r.status[:, j] == EQUIVALENT).mean():.3f}",
                "futile (bound / max)": f"{(futile[:, j] & ~at_max[:, j]).mean():.3f}"
                f" / {(futile[:, j] & at_max[:, j]).mean():.3f}",
                "fixed Holm": f"{r.fixed_holm[:, j].mean():.3f}",
                "power diff": f"{sep[:, j].mean() - r.fixed_holm[:, j].mean():+.3f}",
                "fixed BH": f"{r.fixed_bh[:, j].mean():.3f}",
                "only adaptive / only fixed": f"{(sep[:, j] & ~r.fixed_holm[:, j]).mean():.3f} / "
                f"{(~sep[:, j] & r.fixed_holm[:, j]).mean():.3f}",
            }
        )
    loss = max(r.fixed_holm[:, j].mean() - sep[:, j].mean() for j in range(len(names)))
    return {
        "rows": rows,
        "runs": float(r.runs.mean()),
        "runs_p5_p95": [float(np.percentile(r.runs, 5)), float(np.percentile(r.runs, 95))],
        "fixed_runs": r.fixed_runs,
        "ratio": float(r.runs.mean() / r.fixed_runs),
        "max_power_loss": float(loss),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=4000, help="simulated sweeps per case (>= 2000)")
    ap.add_argument("--seed", type=int, default=0, help="generator seed")
    ap.add_argument("--json", type=Path, help="write every table here too")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    result: dict = {"aa": aa(args.sweeps, args.seed)}
    print(
        "(a) A/A: every cell the same distribution, alpha = 0.05; Holm, alpha t^4 spending and "
        "3% futility unless named\n"
    )
    print(tabulate(result["aa"], headers="keys", tablefmt="github"))
    noises = {
        "normal, sd 2": normal_noise(SEED_SD),
        "recorded deviations": resampled_noise(residuals()),
    }
    for tname, table in (("quick start Table 1", QUICKSTART), ("clearer effects", CLEARER)):
        for nname, noise in noises.items():
            for dname in ("2-8, +1", "2-6, +1", "2-8, +1, O'Brien-Fleming 5%"):
                res = effects(table, DESIGNS[dname], args.sweeps, args.seed + 100, noise)
                result[f"{tname} | {nname} | {dname}"] = res
                print(
                    f"\n(b) {tname}, noise {nname}, seeds {dname}: runs {res['runs']:.1f} "
                    f"(5-95%: {res['runs_p5_p95'][0]:.0f}-{res['runs_p5_p95'][1]:.0f}) against "
                    f"{res['fixed_runs']} at a fixed {DESIGNS[dname].max_seeds} = "
                    f"{res['ratio']:.1%}; largest power loss against fixed Holm "
                    f"{res['max_power_loss']:+.3f}\n"
                )
                print(tabulate(res["rows"], headers="keys", tablefmt="github"))
    print(f"\n{args.sweeps} sweeps per case, {time.perf_counter() - start:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
