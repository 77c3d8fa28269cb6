"""Does the design space matter on the testbed? Between- vs within-cell variance, a one-way ANOVA
and a permutation test over cells, the rank stability of cells across seeds, and the estimator
ordering (MC vs Atomic vs Binary), from a multi-seed sweep.

The unit is one run (cell, seed) and its Avg. over the domain's benchmarks (percent). The base
model is left out (it is not trained), and so is a cell whose runs equal another cell's run for
run (e.g. chi2/mc = tv/mc at the calibrated δ): it is the same method, and counting it twice
would inflate the evidence.

    # analyse a finished sweep (its spec and its MLflow store):
    .venv/bin/python benchmarks/sensitivity.py --spec configs/quickstart.yaml \\
        --tracking-uri sqlite:///path/to/mlflow.db [--json out.json]
    # or launch the spec first (cells x seeds as in the spec), in DIR:
    .venv/bin/python benchmarks/sensitivity.py --spec configs/quickstart.yaml --launch --workdir DIR
    # or a tidy CSV (domain,cell,benchmark,seed,score):
    .venv/bin/python benchmarks/sensitivity.py --csv scores.csv
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from gppo.analysis.vocabulary import DIV_ORDER
from gppo.stats.inference import strata_mean_ci
from gppo.store.state import State


def run_avgs(tidy: pd.DataFrame, domain: str) -> pd.DataFrame:
    """(cell x seed) Avg. in percent over the domain's benchmarks, complete runs only."""
    rows = tidy[(tidy.domain == domain) & (tidy.status == State.DONE) & (tidy.cell != "base")]
    wide = rows.pivot_table(index=["cell", "seed"], columns="benchmark", values="score")
    return (wide.dropna().mean(axis=1) * 100).unstack("seed")


def drop_duplicates(avgs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """Leave out cells whose every run equals another (earlier) cell's run for the same seed."""
    same: dict[str, str] = {}
    keep: list[str] = []
    order = {d: i for i, d in enumerate(DIV_ORDER)}  # tv first: keep the reference's name
    for cell in sorted(avgs.index, key=lambda c: (order.get(c.split("/")[0], 99), c)):
        twin = next(
            (k for k in keep if np.allclose(avgs.loc[k], avgs.loc[cell], equal_nan=True)), None
        )
        if twin is None:
            keep.append(cell)
        else:
            same[cell] = twin
    return avgs.loc[keep], same


def _f_statistic(*groups: np.ndarray, axis: int = -1) -> np.ndarray:
    return stats.f_oneway(*groups, axis=axis).statistic


def variance_and_anova(avgs: pd.DataFrame, n_resamples: int) -> dict[str, float]:
    groups = [row.dropna().to_numpy() for _, row in avgs.iterrows()]
    groups = [g for g in groups if g.size >= 2]
    means = np.array([g.mean() for g in groups])
    within = float(np.mean([g.var(ddof=1) for g in groups]))
    anova = stats.f_oneway(*groups)
    perm = stats.permutation_test(
        groups,
        _f_statistic,
        permutation_type="independent",
        n_resamples=n_resamples,
        alternative="greater",
        vectorized=True,
        rng=np.random.default_rng(0),
    )
    kruskal = stats.kruskal(*groups)
    levene = stats.levene(*groups, center="median")  # equal seed variances (Table 1's pooled test)
    sds = [g.std(ddof=1) for g in groups]
    n_seeds = int(np.median([g.size for g in groups]))
    df = sum(g.size for g in groups) - len(groups)
    # smallest difference of two cells' means a Welch/t-test at alpha=0.05 (two-sided) detects
    # with 80% power at this seed count and the pooled within-cell sd (normal approximation of
    # the noncentral t: (t_{.975,df} + t_{.8,df}) sd sqrt(2/n))
    mdd = (stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * np.sqrt(within) * np.sqrt(2 / n_seeds)
    return {
        "cells": len(groups),
        "seeds_per_cell": n_seeds,
        "between_cell_var": float(means.var(ddof=1)),
        "between_cell_sd": float(means.std(ddof=1)),
        "within_cell_var": within,
        # the cells' own spread with the seed noise of their means taken out (ANOVA estimator)
        "between_cell_sd_net_of_noise": float(
            np.sqrt(max(0.0, means.var(ddof=1) - within / n_seeds))
        ),
        "pooled_seed_sd": float(np.sqrt(within)),
        "range_of_means": float(means.max() - means.min()),
        "anova_F": float(anova.statistic),
        "anova_p": float(anova.pvalue),
        "permutation_F_p": float(perm.pvalue),
        "kruskal_H": float(kruskal.statistic),
        "kruskal_p": float(kruskal.pvalue),
        "levene_equal_var_p": float(levene.pvalue),
        "cell_seed_sd_min_max": [float(min(sds)), float(max(sds))],
        "min_detectable_diff_80pct_power": float(mdd),
    }


def rank_stability(avgs: pd.DataFrame) -> dict[str, float]:
    """Kendall's W over seeds (from Friedman's chi²), mean Spearman between seeds' rankings."""
    full = avgs.dropna(axis=1, how="any")
    m, n = full.shape[1], full.shape[0]  # seeds (raters), cells (items)
    out: dict[str, float] = {"seeds": m}
    if m < 2 or n < 3:
        return out
    # treatments = cells, blocks = seeds
    chi2 = stats.friedmanchisquare(*[full.loc[c].to_numpy() for c in full.index]).statistic
    out["kendall_W"] = float(chi2 / (m * (n - 1)))
    rhos = [stats.spearmanr(full[a], full[b]).statistic for a, b in itertools.combinations(full, 2)]
    out["mean_spearman_between_seeds"] = float(np.mean(rhos))
    best = full.mean(axis=1).idxmax()
    ranks = full.rank(ascending=False)
    out["best_cell"] = best
    out["best_cell_top3_in_seeds"] = float((ranks.loc[best] <= 3).mean())
    out["best_cell_rank_per_seed"] = [int(r) for r in ranks.loc[best]]
    return out


def estimator_order(tidy: pd.DataFrame, domain: str, avgs: pd.DataFrame) -> dict[str, object]:
    """Per estimator: the mean over divergences of the cells' seed means, its t CI with the cells as
    independent strata (:func:`gppo.stats.inference.strata_mean_ci`)."""
    grid = [c for c in avgs.index if "/" in c]
    out: dict[str, object] = {}
    for est in ("mc", "atomic", "binary"):
        cells = [c for c in grid if c.endswith("/" + est)]
        if not cells:
            continue
        cols = [avgs.loc[c].dropna().to_numpy() for c in cells]
        ci = strata_mean_ci(cols)
        out[est] = {
            "cells": cells,
            "mean": float(np.mean([c.mean() for c in cols])),
            "ci95": ci,
            "per_divergence": {c: round(float(avgs.loc[c].mean()), 2) for c in cells},
        }
    return out


def _tidy(args: argparse.Namespace) -> pd.DataFrame:
    if args.csv:
        from gppo.analysis.data.tidy import read_scores_csv

        return read_scores_csv(args.csv)
    from gppo.analysis.data.collect import collect
    from gppo.grid import load_plan
    from gppo.store.records import find_sweep

    uri = args.tracking_uri
    if args.launch:
        workdir = Path(args.workdir or ".").resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        spec = str(Path(args.spec).resolve())
        exe = Path(sys.executable).with_name("gppo-sweep")
        subprocess.run([str(exe), "launch", spec], cwd=workdir, check=True)
        uri = uri or f"sqlite:///{workdir}/mlflow.db"
    plan = load_plan(args.spec)
    ref = find_sweep(plan.sweep_id, uri or plan.spec.tracking.uri, experiment=plan.spec.experiment)
    return collect(ref).tidy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--spec", help="grid spec of the sweep")
    src.add_argument("--csv", help="tidy CSV domain,cell,benchmark,seed,score")
    ap.add_argument("--tracking-uri", help="the sweep's MLflow store (default: the spec's)")
    ap.add_argument("--launch", action="store_true", help="launch the spec first (in --workdir)")
    ap.add_argument("--workdir", help="where --launch runs (its mlflow.db lands there)")
    ap.add_argument("--permutations", type=int, default=9999)
    ap.add_argument("--json", help="write the figures as JSON here")
    args = ap.parse_args()
    tidy = _tidy(args)
    if not (tidy.status == State.DONE).any():
        raise SystemExit("no finished runs to analyse (check --spec / --tracking-uri)")
    report: dict[str, object] = {"load1_at_analysis": os.getloadavg()[0]}
    for domain in dict.fromkeys(tidy.domain):
        avgs, twins = drop_duplicates(run_avgs(tidy, domain))
        res = {
            "runs": int(avgs.notna().sum().sum()),
            "left_out_as_duplicates": twins,
            "variance": variance_and_anova(avgs, args.permutations),
            "ranks": rank_stability(avgs),
            "estimators": estimator_order(tidy, domain, avgs),
            "cell_means": {c: round(float(v), 2) for c, v in avgs.mean(axis=1).items()},
        }
        report[domain] = res
        v, r = res["variance"], res["ranks"]
        print(f"## {domain}: {v['cells']} distinct cells x {v['seeds_per_cell']} seeds")
        if twins:
            print("   left out (same runs as): " + ", ".join(f"{a}={b}" for a, b in twins.items()))
        print(
            f"   between-cell sd of means {v['between_cell_sd']:.2f} pts; pooled seed sd"
            f" {v['pooled_seed_sd']:.2f} pts; range of means {v['range_of_means']:.2f} pts;"
            f" between-cell sd net of seed noise {v['between_cell_sd_net_of_noise']:.2f} pts"
        )
        print(
            f"   one-way ANOVA F = {v['anova_F']:.2f}, p = {v['anova_p']:.3g}; permutation p ="
            f" {v['permutation_F_p']:.3g} ({args.permutations} permutations); Kruskal-Wallis"
            f" p = {v['kruskal_p']:.3g}"
        )
        print(
            f"   equal seed variances (Brown-Forsythe/Levene): p = {v['levene_equal_var_p']:.3g};"
            f" per-cell seed sd {v['cell_seed_sd_min_max'][0]:.2f} to"
            f" {v['cell_seed_sd_min_max'][1]:.2f} pts"
        )
        print(
            f"   smallest difference detectable (80% power, α = 0.05, {v['seeds_per_cell']} seeds):"
            f" {v['min_detectable_diff_80pct_power']:.2f} pts"
        )
        if "kendall_W" in r:
            print(
                f"   rank stability over {r['seeds']} seeds: Kendall's W = {r['kendall_W']:.2f},"
                f" mean Spearman between seeds = {r['mean_spearman_between_seeds']:.2f}; best cell"
                f" {r['best_cell']} ranks {r['best_cell_rank_per_seed']} in the seeds"
            )
        for est, e in res["estimators"].items():
            lo, hi = e["ci95"] if e["ci95"] else (float("nan"), float("nan"))
            print(f"   {est:7s} mean {e['mean']:.2f} [{lo:.2f}, {hi:.2f}]  {e['per_divergence']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
