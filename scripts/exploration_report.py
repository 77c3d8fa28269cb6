"""The exploration study's tables and dose-response figure, from its sweep in MLflow.

    gppo-sweep launch configs/exploration.yaml
    python scripts/exploration_report.py configs/exploration.yaml --out docs/img
    python scripts/exploration_report.py configs/exploration-trl.yaml --level 0.1
    python scripts/exploration_report.py configs/rare-learnable.yaml --runs docs/data/rare-learnable-runs.csv
    python scripts/exploration_report.py SPEC --axis local.ppo_epochs --axis local.base_temperature --out DIR

``--axis`` (default ``local.warmstart_target``) names the study's axis; given several times, a
level is one combination of the axes' values (the per-run CSV gets a column per axis, named by
its path's last component, and the tables' ``level`` reads ``ppo_epochs 2, base_temperature 2.6``,
in the axes' numeric order; ``--runs`` wants the same ``--axis`` options).

Prints, as markdown (docs/studies/exploration.md): the gain over the base
per level, divergence and estimator; Atomic - MC and Binary - MC per level (stratified by
divergence, Welch t CI, Holm over the table); the mechanism per level and estimator (high-side
clip fraction by μ bucket, the early rise of the correct answers' probability); the manipulation
check per level (MC's high-side clip fraction at μ 0.1-0.5 and MC's gain; a level passes with a
clip of at least ``--check-clip`` percent and a gain whose CI is above 0; the strongest passing
level: the one MC clips most at); the low-side
clip fraction by μ bucket per level and estimator; how far an update moves the policy per level
and estimator (``abs_log_ratio``: the run's mean over every training step it logged, 1..last, of
``train/abs_log_ratio``, an update's mean |log π − log μ| over its tokens;
``abs_log_ratio_early``: over steps 1..10). The last three tables pool the divergences, each
with its mean and 95 % t interval over runs. Writes ``exploration-dose-response.png`` (with two
axes: the gain against the first axis's value, a panel per value of the second) and
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
from matplotlib.figure import Figure
from mlflow import MlflowClient

from gppo.analysis.tables import exploration_contrasts as C
from gppo.analysis.vocabulary import EST_NAMES
from gppo.grid import load_plan
from gppo.objectives.buckets import MU_BUCKETS
from gppo.store.records import find_sweep

DEFAULT_AXIS = "local.warmstart_target"


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


def manipulation_markdown(check: pd.DataFrame, clip_percent: float) -> str:
    """The manipulation check (``check``: :func:`~C.manipulation_check`), a row per level, then
    which passing level is the strongest (or that none passes)."""
    if check.empty:
        return f"no {EST_NAMES[C.REFERENCE_ESTIMATOR]} run"
    bucket = _bucket_text(C.CHECK_BUCKET)
    lines = [
        f"| level | {EST_NAMES[C.REFERENCE_ESTIMATOR]} runs | clip high, μ {bucket} (%) | "
        f"gain over the base (points) | passes |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in check.to_dict("records"):
        clip = _ci(r["clip"], r["clip_lo"], r["clip_hi"], 2)
        gain = _ci(r["gain"], r["gain_lo"], r["gain_hi"], signed=True)
        lines.append(
            f"| {r['point']} | {r['n']} | {clip} | {gain} | {'yes' if r['passes'] else 'no'} |"
        )
    strongest = C.strongest_level(check)
    rule = f"clip ≥ {clip_percent:g} % and the gain's CI above 0"
    if strongest is None:
        lines.append(f"\nNo level passes ({rule}).")
    else:
        clip = check.set_index("point").at[strongest, "clip"]
        lines.append(f"\nStrongest passing level ({rule}): {strongest} (clip {clip:.2f} %).")
    return "\n".join(lines)


def _by_level_table(
    runs: pd.DataFrame, columns: list[str], markdown: Callable[[pd.DataFrame], str], source: str
) -> str:
    """``markdown`` of :func:`~C.by_level` over ``columns``, or that ``source`` (the CSV, the
    runs) has none of them (an older CSV; runs from before the metric was logged)."""
    if not set(columns) <= set(runs.columns) or runs[columns].isna().all().all():
        return f"not recorded in {source}"
    return markdown(C.by_level(runs, columns))


def _axes_problem(runs: pd.DataFrame, axes: list[str]) -> str | None:
    """Why a per-run CSV cannot be reported with these ``--axis`` options (None when it can):
    one axis wants numeric levels; several want their columns (another study's CSV)."""
    if len(axes) == 1:
        numeric = pd.api.types.is_numeric_dtype(runs["point"])
        return None if numeric else "its levels are of several axes: give each with --axis"
    missing = sorted(set(C.axis_columns(axes)) - set(runs.columns))
    return f"no column {missing} of the axes {axes}" if missing else None


def _dose_response(
    g: pd.DataFrame, runs: pd.DataFrame, axes: list[str], bases: dict[float, float]
) -> Figure | None:
    """One axis: :func:`~C.dose_response_figure` of the gain table ``g``; two:
    :func:`~C.dose_response_panels` of the runs; more: none."""
    if len(axes) == 1:
        return C.dose_response_figure(g, axes[0], bases)
    return C.dose_response_panels(runs, axes) if len(axes) == 2 else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "specs",
        type=Path,
        nargs="+",
        metavar="SPEC",
        help="the study's spec; several: their runs together (a study's extra cells at one level)",
    )
    p.add_argument("--out", type=Path, default=Path("exploration-report"))
    p.add_argument(
        "--axis",
        action="append",
        dest="axes",
        metavar="AXIS",
        help=f"the study's axis (default {DEFAULT_AXIS}); several times: a level per combination",
    )
    p.add_argument("--level", type=float, help="the level of a sweep without the axis (TRL's)")
    p.add_argument(
        "--check-clip",
        type=float,
        default=3.0,
        help="the manipulation check: the least MC high-side clip (%%) at μ 0.1-0.5 that passes",
    )
    p.add_argument(
        "--runs",
        type=Path,
        help="the per-run CSV an earlier report wrote (docs/data/*-runs.csv): the tables and "
        "figure from it, without the store",
    )
    a = p.parse_args(argv)
    axes = a.axes or [DEFAULT_AXIS]
    if a.runs is not None:
        runs = pd.read_csv(a.runs)
        if problem := _axes_problem(runs, axes):
            print(f"{a.runs}: {problem}", file=sys.stderr)
            return 2
    else:
        frames = []
        for spec in a.specs:
            plan = load_plan(spec)
            ref = find_sweep(plan.sweep_id, plan.spec.tracking.uri, experiment=plan.spec.experiment)
            frame = C.runs_frame(
                MlflowClient(ref.tracking_uri), ref.sweep_id, axes, ref.experiment_id, a.level
            )
            if frame.empty:
                print(f"{spec}: no finished run in sweep {ref.sweep_id} yet", file=sys.stderr)
                return 1
            frames.append(frame)
        runs = C.sort_runs(pd.concat(frames, ignore_index=True), axes)
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
    print(
        f"\n## Manipulation check ({EST_NAMES[C.REFERENCE_ESTIMATOR]}'s runs, divergences pooled, "
        "mean [95% t CI])\n"
    )
    print(manipulation_markdown(C.manipulation_check(runs, a.check_clip), a.check_clip))
    source = "this CSV" if a.runs is not None else "these runs"
    print("\n## Low-side clip fraction by μ bucket (%, divergences pooled)\n")
    print(_by_level_table(runs, C.clip_columns("low"), clip_low_markdown, source))
    print("\n## How far an update moves the policy: mean abs(log π − log μ) (divergences pooled)\n")
    print(_by_level_table(runs, list(C.ABS_LOG_RATIO_COLUMNS), abs_log_ratio_markdown, source))
    wrote = [] if a.runs is not None else [a.out / "exploration-runs.csv"]
    fig = _dose_response(g, runs, axes, bases)
    if fig is None:
        print("\nno dose-response figure of more than two axes")
    else:
        fig.savefig(a.out / "exploration-dose-response.png", dpi=120)
        wrote.insert(0, a.out / "exploration-dose-response.png")
    if wrote:
        print(f"\nwrote {' and '.join(map(str, wrote))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
