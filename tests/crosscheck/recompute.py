"""An independent recomputation of the reports' numbers from the raw MLflow runs (issue 57).

Deliberately simple and written from docs/statistics.md, not from the code: it imports nothing
from ``gppo.analysis`` (plain pandas and scipy; metric and tag names from ``gppo.metrics``). It
reads a sweep's cell runs and says what ``table1.csv``, ``scores.csv``, the report page's run
list and ``gppo-sweep status`` must show; :func:`disagreements` lists every number that differs.

What is checked (fixed seeds): per row (domain, cell, axis point) the mean over seeds and its 95%
Student t interval, n_seeds, Δ against the reference, its Welch CI, the Welch p-value, the
Benjamini-Hochberg p over the family (trained rows against the reference at one point and
domain, each comparison once, a row on the reference's own runs none), the mark; the base row
per point (its own step-0 scores); cost per row (CPU-h of the row's own runs, a copy costs 0) and
per point (the total row). Adaptive seeds: the mean over all of a row's seeds and their count
here; the Stopped column, Δ and its interval (the design's) in :mod:`crosscheck.adaptive_rule`.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
from mlflow.tracking import MlflowClient
from scipy import stats

from crosscheck.adaptive_rule import Adaptive, stop_disagreements
from gppo import metrics as M

ALPHA = 0.05
#: table1.csv rounds scores to 0.1 point
ROUND = 0.051


def runs_frame(uri: str, experiment: str) -> pd.DataFrame:
    """One row per cell run (``finished``: FINISHED; the others count for cost only): cell id, label, domain, seed, point (axes JSON, sorted),
    score and base (avg@k over benchmarks in points), run id, the lead's run id of a copy,
    CPU-hours, MLflow's status (FAILED attempts lose an adaptive seed)."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    rows = []
    for r in client.search_runs([exp.experiment_id], max_results=5000):
        t, m, p = r.data.tags, r.data.metrics, r.data.params
        if t.get(M.TAG_ROLE) != M.ROLE_CELL:
            continue
        finished = r.info.status == "FINISHED"
        k = int(p["eval_k"])
        benches = p["benchmarks"].split(",")
        method = t[M.TAG_METHOD]
        label = f"{t[M.TAG_DIVERGENCE]}/{t[M.TAG_ESTIMATOR]}" if method == "gppo" else method
        rows.append(
            {
                "cell_id": t[M.TAG_CELL_ID],
                "label": label,
                "domain": t[M.TAG_DOMAIN],
                "seed": int(t[M.TAG_SEED]),
                "point": json.dumps(json.loads(t.get(M.TAG_AXES, "{}")), sort_keys=True),
                "finished": finished,
                "status": r.info.status,
                "score": _avg(m, "eval", benches, k) if finished else math.nan,
                "base": _avg(m, "eval_base", benches, k) if finished else math.nan,
                "run_id": r.info.run_id,
                "same_runs": t.get(M.TAG_SAME_RUNS),
                "cpu_hours": 0.0 if t.get(M.TAG_SAME_RUNS) else m.get(M.COST_CPU_HOURS, 0.0),
                "has_cost": M.COST_CPU_HOURS in m,
            }
        )
    return pd.DataFrame(rows)


def _avg(metrics: dict, prefix: str, benches: list[str], k: int) -> float:
    """avg@k over the benchmarks, in points."""
    return 100 * float(np.mean([metrics[f"{prefix}/{b}/avg_at_{k}"] for b in benches]))


def _t_ci(x: np.ndarray) -> tuple[float, float, float]:
    mean = float(np.mean(x))
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(1 - ALPHA / 2, len(x) - 1) * np.std(x, ddof=1) / math.sqrt(len(x))
    return mean, mean - half, mean + half


def _welch(x: np.ndarray, ref: np.ndarray) -> tuple[float, float, float, float]:
    """Δ, its CI and the two-sided p of Welch's t on Welch-Satterthwaite df."""
    d = float(np.mean(x) - np.mean(ref))
    vx, vr = np.var(x, ddof=1) / len(x), np.var(ref, ddof=1) / len(ref)
    se = math.sqrt(vx + vr)
    if se == 0:
        return d, math.nan, math.nan, math.nan
    df = (vx + vr) ** 2 / (vx**2 / (len(x) - 1) + vr**2 / (len(ref) - 1))
    half = stats.t.ppf(1 - ALPHA / 2, df) * se
    return d, d - half, d + half, float(2 * stats.t.sf(abs(d) / se, df))


def _bh(p: dict[str, float]) -> dict[str, float]:
    """Benjamini-Hochberg adjusted p-values."""
    keys = sorted(p, key=p.get)
    n, out, running = len(keys), {}, 1.0
    for i in range(n - 1, -1, -1):
        running = min(running, p[keys[i]] * n / (i + 1))
        out[keys[i]] = running
    return out


def expected_table(runs: pd.DataFrame, reference: str = "tv/mc", adaptive: bool = False) -> dict:
    """(domain, point, label) -> the row's numbers, ``label`` 'base' and 'total' included."""
    out: dict = {}
    for (domain, point), every in runs.groupby(["domain", "point"]):
        here = every[every["finished"]]
        seeds = {lab: g.sort_values("seed") for lab, g in here.groupby("label")}
        spent = every.groupby("label")["cpu_hours"].sum()  # every attempt's cost
        ref = seeds.get(reference)
        rows = {}
        for lab, g in seeds.items():
            x = g["score"].to_numpy()
            mean, lo, hi = _t_ci(x)
            lead = {
                rid if pd.isna(s) else s for rid, s in zip(g["run_id"], g["same_runs"], strict=True)
            }
            rows[lab] = {"avg": mean, "lo": lo, "hi": hi, "n": len(x), "runs": frozenset(lead),
                         "cpu": float(spent[lab]), "x": x}  # fmt: skip
        # the base: per seed, the reference's run's step-0 score at this point
        if ref is not None:
            x = ref["base"].to_numpy()
            rows["base"] = {"avg": float(np.mean(x)), "n": len(x), "x": x, "runs": None}
        if ref is not None and not adaptive:
            r = rows[reference]
            family = {}
            for lab, row in rows.items():
                if lab == reference or row["n"] < 2 or r["n"] < 2:
                    continue
                d, dlo, dhi, p = _welch(row["x"], r["x"])
                row.update(delta=d, dlo=dlo, dhi=dhi, p=p)
                # untested: the base (on its own), the reference's own runs, and a comparison
                # where neither side has spread (Welch's p is then NaN: no variance at all)
                if lab == "base" or row["runs"] == r["runs"] or math.isnan(p):
                    continue
                family.setdefault(row["runs"], p)
            adjusted = _bh({k: v for k, v in family.items()})
            for lab, row in rows.items():
                if lab == "base" and "p" in row:
                    row["p_adj"] = row["p"]
                elif row.get("runs") in adjusted and lab != reference:
                    row["p_adj"] = adjusted[row["runs"]]
        rows["total"] = {"cpu": float(every["cpu_hours"].sum())}
        for lab, row in rows.items():
            out[domain, point, lab] = row
    return out


def _point_of(row: pd.Series, axes: list[str]) -> str:
    return json.dumps({a: row[a] for a in axes}, sort_keys=True)


def _close(a, b, tol: float) -> bool:
    a, b = (math.nan if v is None else float(v) for v in (a, b))
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


def disagreements(
    folder: Path,
    runs: pd.DataFrame,
    axes: list[str],
    adaptive: Adaptive | None = None,
    reference: str = "tv/mc",
) -> list[str]:
    """Every number of ``folder``'s table1.csv, scores.csv and report.html that differs from
    the recomputation (empty: all agree); ``adaptive``: the spec's adaptive seeds (the
    Stopped column, Δ and its interval then checked by :mod:`crosscheck.adaptive_rule`)."""
    want = expected_table(runs, reference, adaptive is not None)
    bad: list[str] = []
    table = pd.read_csv(folder / "table1.csv")
    seen = set()
    for _, row in table.iterrows():
        key = (row["domain"], _point_of(row, axes), row["cell"])
        if row["cell"] == "total":
            points = {k[1] for k in want if k[2] == "total"}
            point = _point_of(row, axes)
            if point in points:
                (dom,) = {k[0] for k in want if k[1] == point and k[2] == "total"}
                exp = want[dom, point, "total"]["cpu"]
                if not _close(row["cpu_hours"], exp, 1e-6):
                    bad.append(f"total at {point}: cpu_hours {row['cpu_hours']} != {exp}")
            continue
        if key not in want:
            if row.get("n_seeds", 0) and not pd.isna(row.get("avg")):
                bad.append(f"{key}: a row with numbers ({row['avg']}) and no finished run")
            continue
        seen.add(key)
        w = want[key]
        label = f"{key[2]} at {key[1]}"
        if not _close(row["avg"], w["avg"], ROUND):
            bad.append(f"{label}: avg {row['avg']} != {w['avg']:.3f}")
        if int(row["n_seeds"]) != w["n"]:
            bad.append(f"{label}: n_seeds {row['n_seeds']} != {w['n']}")
        if "lo" in w and adaptive is None and not _close(row["avg_ci95_lo"], w["lo"], ROUND):
            bad.append(f"{label}: avg_ci95_lo {row['avg_ci95_lo']} != {w['lo']:.3f}")
        if "lo" in w and adaptive is None and not _close(row["avg_ci95_hi"], w["hi"], ROUND):
            bad.append(f"{label}: avg_ci95_hi {row['avg_ci95_hi']} != {w['hi']:.3f}")
        if key[2] != "base" and not _close(row.get("cpu_hours"), w["cpu"], 1e-6):
            bad.append(f"{label}: cpu_hours {row.get('cpu_hours')} != {w['cpu']}")
        if adaptive is not None:
            continue
        if "delta" in w:
            for col, k in (("delta", "delta"), ("delta_ci95_lo", "dlo"), ("delta_ci95_hi", "dhi")):
                if not _close(row[col], w[k], ROUND):
                    bad.append(f"{label}: {col} {row[col]} != {w[k]:.3f}")
            if not _close(row["p_value"], w["p"], 1e-4):
                bad.append(f"{label}: p_value {row['p_value']} != {w['p']:.5f}")
        p_adj = w.get("p_adj", math.nan)
        if not _close(row["p_adjusted"], p_adj, 1e-4):
            bad.append(f"{label}: p_adjusted {row['p_adjusted']} != {p_adj}")
        mark = bool(p_adj <= ALPHA)
        if str(row["significant"]).lower() != str(mark).lower():
            bad.append(f"{label}: significant {row['significant']} != {mark}")
    missing = {k for k in want if k[2] != "total"} - seen
    bad += [f"{k}: no row in table1.csv" for k in sorted(missing)]
    if adaptive is not None:
        rows = table[table["cell"] != "total"]
        points = [_point_of(r, axes) for _, r in rows.iterrows()]
        bad += stop_disagreements(rows, runs, points, adaptive, reference)
    if axes or (folder / "scores.csv").exists():  # written for a sweep with axes
        bad += _scores_csv(folder, runs, axes)
    bad += _page(folder, runs)
    return bad


def _scores_csv(folder: Path, runs: pd.DataFrame, axes: list[str]) -> list[str]:
    scores = pd.read_csv(folder / "scores.csv")
    scores = scores[(scores["cell"] != "base") & (scores["status"] == "done")]
    bad = []
    mine = {(r.label, r.seed, r.point): r for r in runs[runs["finished"]].itertuples()}
    got = set()
    for _, s in scores.groupby(["cell", "seed", *axes], dropna=False):
        first = s.iloc[0]
        key = (first["cell"], int(first["seed"]), _point_of(first, axes))
        got.add(key)
        if key not in mine:
            bad.append(f"scores.csv {key}: no finished run")
            continue
        if not _close(100 * s["score"].mean(), mine[key].score, 1e-6):
            bad.append(f"scores.csv {key}: {100 * s['score'].mean()} != {mine[key].score}")
    bad += [f"scores.csv: no score of {k}" for k in sorted(set(mine) - got)]
    return bad


def _page(folder: Path, runs: pd.DataFrame) -> list[str]:
    """The page's run list: each finished run's own avg@k (one decimal)."""
    page = (folder / "report.html").read_text()
    bad = []
    rows = re.findall(r'<tr class="cell" data-cell="([^"]+)">(.*?)</tr>', page, re.S)
    shown = {}
    for cid, body in rows:
        cells = [html.unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<td.*?</td>", body)]
        shown[cid] = cells
    for r in runs[runs["finished"]].itertuples():
        if r.cell_id not in shown:
            bad.append(f"page: no row for {r.cell_id}")
            continue
        if f"{r.score:.1f}" not in shown[r.cell_id]:
            bad.append(f"page {r.cell_id}: {shown[r.cell_id]} lacks its own score {r.score:.1f}")
    return bad


def status_disagreements(out: str, runs: pd.DataFrame) -> list[str]:
    """``gppo-sweep status``: the spent total over the runs that trained."""
    m = re.search(r"spent so far: ([0-9.]+) CPU-h, .*?\((\d+) runs?\)", out)
    if not m:
        return [f"status: no 'spent so far' line in {out[-800:]}"]
    trained = runs[runs["same_runs"].isna()]
    done = int(trained["finished"].sum())
    bad = []
    if int(m.group(2)) < done:
        bad.append(f"status: {m.group(2)} runs spent < {done} finished runs that trained")
    if abs(float(m.group(1)) - trained["cpu_hours"].sum()) > 5e-5:
        bad.append(f"status: spent {m.group(1)} CPU-h != {trained['cpu_hours'].sum():.4f}")
    return bad
