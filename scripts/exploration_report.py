"""The exploration study's tables and dose-response figure, from its sweep in MLflow.

    gppo-sweep launch configs/exploration.yaml
    python scripts/exploration_report.py configs/exploration.yaml --out docs/img
    python scripts/exploration_report.py configs/exploration-trl.yaml --level 0.1
    python scripts/exploration_report.py configs/rare-learnable.yaml --runs docs/data/rare-learnable-runs.csv

Prints, as markdown (docs/studies/exploration.md): the gain over the base
per level, divergence and estimator; Atomic - MC and Binary - MC per level (stratified by
divergence, Welch t CI, Holm over the table); the mechanism per level and estimator (high-side
clip fraction by μ bucket, the early rise of the correct answers' probability); the low-side
clip fraction by μ bucket per level and estimator; how far an update moves the policy per level
and estimator (``abs_log_ratio``: the run's mean over every training step it logged, 1..last, of
``train/abs_log_ratio``, an update's mean |log π − log μ| over its tokens;
``abs_log_ratio_early``: over steps 1..10). The last three tables pool the divergences, each
with its mean and 95 % t interval over runs. Writes ``exploration-dose-response.png`` and
``exploration-runs.csv`` (one row per run; columns in
:mod:`gppo.analysis.tables.exploration_contrasts`) into ``--out``. With ``--runs`` an older
CSV without the low side's or abs_log_ratio's columns still reports: those tables say so.
A reduced study (fewer seeds or levels: edit the spec's ``seeds`` or axis) reports the same way.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from mlflow import MlflowClient

from gppo.analysis.tables import exploration_contrasts as C
from gppo.analysis.vocabulary import EST_NAMES
from gppo.grid import load_plan
from gppo.objectives.buckets import MU_BUCKETS
from gppo.store.records import find_sweep


def _ci(mean: float, lo: float, hi: float, digits: int = 1, signed: bool = False) -> str:
    if math.isnan(mean):
        return "-"  # not measured (TRL's runs have no answer probe)
    f = f"{{:{'+' if signed else ''}.{digits}f}}"
    return f"{f.format(mean)} [{f.format(lo)}, {f.format(hi)}]"


def gain_markdown(g: pd.DataFrame, bases: dict[float, float]) -> str:
    """The gain table: a row per level and divergence, a column per estimator. The header and
    every row's cells come from one list of estimators (:data:`EST_ORDER`, then any other the
    runs have), so a column's name is always its numbers' estimator."""
    estimators = [*C.EST_ORDER, *sorted(set(g["estimator"]) - set(C.EST_ORDER))]
    names = [EST_NAMES.get(e, e) for e in estimators]
    lines = [
        "| level | base avg@8 | divergence | " + " | ".join(names) + " |",
        "| --- | --- | --- |" + " --- |" * len(estimators),
    ]
    for (point, div), part in g.groupby(["point", "divergence"], sort=False):
        by = part.set_index("estimator")
        cells = [
            _ci(by.at[e, "mean"], by.at[e, "lo"], by.at[e, "hi"], signed=True)
            if e in by.index
            else "-"
            for e in estimators
        ]
        lines.append(f"| {point} | {bases[point]:.1f} | {div} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def contrast_markdown(c: pd.DataFrame, unit: str = "points") -> str:
    lines = [
        f"| level | contrast | difference ({unit}) | 95% CI | p | Holm p | runs |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in c.itertuples():
        lines.append(
            f"| {r.point} | {r.contrast} | {r.diff:+.2f} | [{r.lo:+.2f}, {r.hi:+.2f}] | "
            f"{r.p:.3f} | {r.p_holm:.3f} | {r.n} |"
        )
    return "\n".join(lines)


def _bucket_text(name: str) -> str:
    """``mu_lt_0.01`` -> ``< 0.01``; ``mu_0.01_0.1`` -> ``0.01-0.1``; ``mu_ge_0.5`` -> ``≥ 0.5``."""
    bits = name.removeprefix("mu_").split("_")
    return {"lt": f"< {bits[-1]}", "ge": f"≥ {bits[-1]}"}.get(bits[0], "-".join(bits))


def _clip_head(side: str) -> str:
    return " | ".join(f"clip {side}, μ {_bucket_text(b[0])} (%)" for b in MU_BUCKETS)


def _ci_cells(r: dict, columns: list[str], scale: float = 1.0, digits: int = 2) -> str:
    """The cells ``mean [lo, hi]`` of a :func:`~C.by_level` row's ``columns``, times ``scale``."""
    return " | ".join(
        _ci(scale * r[c], scale * r[f"{c}_lo"], scale * r[f"{c}_hi"], digits) for c in columns
    )


def mechanism_markdown(m: pd.DataFrame) -> str:
    lines = [
        f"| level | estimator | {_clip_head('high')} | P(correct) at step 0 | rise by step {C.RISE_STEP} (x) |",
        "| --- | --- |" + " --- |" * (len(MU_BUCKETS) + 2),
    ]
    for r in m.to_dict("records"):
        clips = _ci_cells(r, C.clip_columns("high"), scale=100)
        lines.append(
            f"| {r['point']} | {r['estimator']} | {clips} | {'-' if math.isnan(r['p_answer_0']) else format(r['p_answer_0'], '.3f')} | "
            f"{_ci(r['rise'], r['rise_lo'], r['rise_hi'], 2)} |"
        )
    return "\n".join(lines)


def clip_low_markdown(m: pd.DataFrame) -> str:
    """The low side's clip fraction by μ bucket (percent), a row per level and estimator
    (``m``: :func:`~C.by_level` of :func:`~C.clip_columns` ``("low")``)."""
    lines = [
        f"| level | estimator | {_clip_head('low')} | runs |",
        "| --- | --- |" + " --- |" * (len(MU_BUCKETS) + 1),
    ]
    for r in m.to_dict("records"):
        clips = _ci_cells(r, C.clip_columns("low"), scale=100)
        lines.append(f"| {r['point']} | {r['estimator']} | {clips} | {r['n']} |")
    return "\n".join(lines)


def abs_log_ratio_markdown(m: pd.DataFrame) -> str:
    """Mean abs(log π − log μ) per update, over the run and over its first steps, a row per level
    and estimator (``m``: :func:`~C.by_level` of :data:`~C.ABS_LOG_RATIO_COLUMNS`)."""
    lines = [
        "| level | estimator | mean abs(log π − log μ), all steps | "
        f"steps 1-{C.EARLY_STEPS} | runs |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in m.to_dict("records"):
        cells = _ci_cells(r, list(C.ABS_LOG_RATIO_COLUMNS), digits=4)
        lines.append(f"| {r['point']} | {r['estimator']} | {cells} | {r['n']} |")
    return "\n".join(lines)


def _by_level_table(
    runs: pd.DataFrame, columns: list[str], markdown: Callable[[pd.DataFrame], str], source: str
) -> str:
    """``markdown`` of :func:`~C.by_level` over ``columns``, or that ``source`` (the CSV, the
    runs) has none of them (an older CSV; runs from before the metric was logged)."""
    if not set(columns) <= set(runs.columns) or runs[columns].isna().all().all():
        return f"not recorded in {source}"
    return markdown(C.by_level(runs, columns))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("spec", type=Path)
    p.add_argument("--out", type=Path, default=Path("exploration-report"))
    p.add_argument("--axis", default="local.warmstart_target")
    p.add_argument("--level", type=float, help="the level of a sweep without the axis (TRL's)")
    p.add_argument(
        "--runs",
        type=Path,
        help="the per-run CSV an earlier report wrote (docs/data/*-runs.csv): the tables and "
        "figure from it, without the store",
    )
    a = p.parse_args(argv)
    if a.runs is not None:
        runs = pd.read_csv(a.runs)
    else:
        plan = load_plan(a.spec)
        ref = find_sweep(plan.sweep_id, plan.spec.tracking.uri, experiment=plan.spec.experiment)
        runs = C.runs_frame(
            MlflowClient(ref.tracking_uri), ref.sweep_id, a.axis, ref.experiment_id, a.level
        )
        if runs.empty:
            print(f"{a.spec}: no finished run in sweep {ref.sweep_id} yet", file=sys.stderr)
            return 1
    a.out.mkdir(parents=True, exist_ok=True)
    if a.runs is None:
        runs.to_csv(a.out / "exploration-runs.csv", index=False)
    bases = runs.groupby("point")["base"].first().to_dict()
    g = C.gains(runs)
    print(f"## Gain over the base (points, mean [95% t CI], {g['n'].min()}-{g['n'].max()} seeds)\n")
    print(gain_markdown(g, bases))
    print("\n## Estimator contrasts (final avg@8, points; stratified by divergence)\n")
    print(contrast_markdown(C.contrasts(runs)))
    print(
        f"\n## Early rise: P(correct) at step {C.RISE_STEP} / at step 0, contrasts (stratified)\n"
    )
    print(contrast_markdown(C.contrasts(runs, column="rise"), unit="x"))
    print("\n## Mechanism (divergences pooled)\n")
    print(mechanism_markdown(C.mechanism(runs)))
    source = "this CSV" if a.runs is not None else "these runs"
    print("\n## Low-side clip fraction by μ bucket (%, divergences pooled)\n")
    print(_by_level_table(runs, C.clip_columns("low"), clip_low_markdown, source))
    print("\n## How far an update moves the policy: mean abs(log π − log μ) (divergences pooled)\n")
    print(_by_level_table(runs, list(C.ABS_LOG_RATIO_COLUMNS), abs_log_ratio_markdown, source))
    fig = C.dose_response_figure(g, a.axis, bases)
    fig.savefig(a.out / "exploration-dose-response.png", dpi=120)
    wrote = "" if a.runs is not None else f" and {a.out / 'exploration-runs.csv'}"
    print(f"\nwrote {a.out / 'exploration-dose-response.png'}{wrote}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
