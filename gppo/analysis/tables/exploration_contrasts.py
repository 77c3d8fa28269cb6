"""Estimator contrasts along an axis: the exploration study's tables and dose-response figure.

docs/studies/exploration.md: at each point of one axis (the base's
accuracy, ``local.warmstart_target``), how much does each estimator gain over the base, how do
Atomic and Binary differ from MC, and what does the mechanism look like (the high-side clip
fraction by μ bucket; the rise of the correct answers' probability in the first iterations).

The unit is a run (one cell, seed and axis point). :func:`runs_frame` reads one row per finished
run from MLflow: ``point`` (the level: the axis value; with several axes a column per axis,
named by its path's last component, and ``point`` the label :func:`level_label`, e.g.
``ppo_epochs 2, base_temperature 2.6``), ``divergence``, ``estimator``, ``seed``, ``base`` and
``final`` (avg@k over the benchmarks, percent), ``gain`` (final - base, points), the mean over
steps of ``train/clip_frac_high/<bucket>`` per μ bucket (``clip_high/<bucket>``), the probe's
``p_answer`` at step 0 and at :data:`RISE_STEP` (``rise``: the ratio, how many times the correct
answers' probability grew), the mean over steps of ``train/clip_frac_low/<bucket>``
(``clip_low/<bucket>``), and how far the updates moved the policy: ``train/abs_log_ratio`` (an
update's mean |log π − log μ|) averaged over every training step the run logged
(``abs_log_ratio``) and over the early rise's steps 1..:data:`EARLY_STEPS`
(``abs_log_ratio_early``). A run without a metric (logged before it existed) has NaN there.
The tables are plain functions of that frame:

- :func:`gains`: per point, divergence and estimator, the mean gain with its 95 % t interval;
- :func:`contrasts`: per point, each estimator against ``mc``: the difference of mean final
  avg@k taken within each divergence and averaged over divergences (strata), with its Welch-
  Satterthwaite t interval and p-value, Holm-corrected over the whole table;
- :func:`mechanism`: per point and estimator, the clip fractions by bucket and the early rise, each
  with its t interval over runs (divergences pooled); :func:`by_level` the same for any columns
  (the low side's clip fractions, :data:`ABS_LOG_RATIO_COLUMNS`);
- :func:`manipulation_check`: per point, MC's high-side clip fraction at μ 0.1-0.5 and MC's gain,
  and whether the level passes (:func:`strongest_level`: the passing level that clips most).

Every table lists the levels in :func:`level_order`: one axis's values highest first, several
axes' levels by their values in the axes' order, ascending.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import cast

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from gppo import metrics as M
from gppo.analysis.vocabulary import EST_COLORS, EST_ORDER
from gppo.cell import DEFAULT_EVAL_K
from gppo.objectives.buckets import MU_BUCKETS
from gppo.stats.inference import CONFIDENCE, adjust, mean_ci
from gppo.store.records import StoreClient, fetch_records, latest_attempts
from gppo.store.run_score import base_score, run_score
from gppo.store.tracking import metric_steps
from gppo.testbed.settings import NEUTRAL_SETTINGS

#: the early-rise window: p_answer(RISE_STEP) / p_answer(0) (the probe runs at every step to 10)
RISE_STEP = M.PROBE_DENSE_STEPS
#: the early window of ``abs_log_ratio_early``: training steps 1..EARLY_STEPS (the rise's window)
EARLY_STEPS = RISE_STEP
#: how far the updates moved the policy: over the whole run, over its first EARLY_STEPS steps
ABS_LOG_RATIO_COLUMNS = ("abs_log_ratio", "abs_log_ratio_early")
REFERENCE_ESTIMATOR = "mc"
#: the manipulation check's μ bucket (the high side's clip fraction there, MC's runs)
CHECK_BUCKET = next(name for name, lo, hi in MU_BUCKETS if (lo, hi) == (0.1, 0.5))
#: the frame's columns an axis may not be named as (its path's last component)
_RESERVED = {"point", "divergence", "estimator", "seed", "base", "final", "gain", "rise"}


def clip_columns(side: str) -> list[str]:
    """The frame's clip-fraction columns of one side (``"high"``, ``"low"``), one per μ bucket."""
    return [f"clip_{side}/{name}" for name, _lo, _hi in MU_BUCKETS]


def _step_mean(history: list[tuple[int, float]], last_step: int | None = None) -> float:
    """The mean of a metric's ``(step, value)`` history over its steps (to ``last_step``
    inclusive); NaN when none was logged."""
    values = [v for step, v in history if last_step is None or step <= last_step]
    return float(np.mean(values)) if values else math.nan


def _clip_means(client: StoreClient, run_id: str, side: str) -> dict[str, float]:
    """``clip_<side>/<bucket>`` -> the mean over the run's steps of that bucket's clip fraction."""
    return {
        column: _step_mean(metric_steps(client, run_id, M.clip_frac_bucket(name, side)))
        for column, (name, _lo, _hi) in zip(clip_columns(side), MU_BUCKETS, strict=True)
    }


def axis_columns(axes: Sequence[str]) -> list[str]:
    """The frame's column of each axis: its path's last component (``local.ppo_epochs`` ->
    ``ppo_epochs``); ValueError when two axes share one or one is a column the frame has."""
    names = [axis.rsplit(".", 1)[-1] for axis in axes]
    clash = sorted({n for n in names if names.count(n) > 1 or n in _RESERVED})
    if clash:
        raise ValueError(f"axes {list(axes)}: column names {clash} taken")
    return names


def level_label(values: dict[str, object]) -> str:
    """A level of several axes, readable: ``{"ppo_epochs": 2, "base_temperature": 2.6}`` ->
    ``ppo_epochs 2, base_temperature 2.6`` (the axes in the order given)."""
    return ", ".join(f"{name} {value}" for name, value in values.items())


def _level_key(point: object) -> tuple[tuple[int, float | str], ...]:
    """The sort key of a level: one axis's value negated (highest first); a :func:`level_label`'s
    values in its axes' order (numbers by value, before any other text)."""
    if not isinstance(point, str):
        return ((0, -float(cast(float, point))),)  # a number: the axis value
    key: list[tuple[int, float | str]] = []
    for part in point.split(", "):
        text = part.rsplit(" ", 1)[-1]
        try:
            key.append((0, float(text)))
        except ValueError:
            key.append((1, text))
    return tuple(key)


def level_order(points: Iterable[object]) -> list[object]:
    """The distinct levels in the tables' order: one axis's values highest first (the exploration
    pages' order); several axes' labels ascending by the first axis's value, then the second's..."""
    return sorted(set(points), key=_level_key)


def _level_rank(column: pd.Series) -> pd.Series:
    """``sort_values``' key: the ``point`` column as each level's place in :func:`level_order`
    (NaN, a run without a level, last); any other column as it is."""
    if column.name != "point":
        return column
    rank = {p: i for i, p in enumerate(level_order(column.dropna()))}
    return column.map(rank)


def _setting_value(text: str) -> object:
    """A logged param's value: a number where it reads as one (``"4"`` -> 4), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _run_level(
    client: StoreClient, run_id: str, tags: dict[str, str], axes: dict[str, str], default: object
) -> dict[str, object]:
    """One run's value of each axis (``axes``: column -> axis path): the run's axes tag; else the
    resolved setting the run logged as a param (a sweep that fixes the level in its spec, such as
    a study's extra estimator at one level); else the setting's neutral value, which a cell leaves
    out (:data:`~gppo.testbed.settings.NEUTRAL_SETTINGS`: ``base_temperature`` 1); else
    ``default`` (the script's ``--level``)."""
    tagged = json.loads(tags.get(M.TAG_AXES) or "{}")
    if all(axis in tagged for axis in axes.values()):
        return {name: tagged[axis] for name, axis in axes.items()}
    params = client.get_run(run_id).data.params
    level: dict[str, object] = {}
    for name, axis in axes.items():
        if axis in tagged:
            level[name] = tagged[axis]
        elif params.get(axis) not in (None, ""):
            level[name] = _setting_value(params[axis])
        else:
            level[name] = NEUTRAL_SETTINGS.get(axis.split(".", 1)[-1], default)
    return level


def runs_frame(
    client: StoreClient,
    sweep_id: str,
    axes: str | Sequence[str],
    experiment_id: str | None = None,
    point: float | None = None,
) -> pd.DataFrame:
    """One row per finished grid run of the sweep (see the module docstring for the columns);
    ``axes``: one axis (``point`` its value, as before) or several (a column per axis, see
    :func:`axis_columns`, ``point`` their :func:`level_label`, the rows in the axes' numeric
    order); ``point``: the level of runs without the axis (a sweep of one level, e.g. the TRL
    check)."""
    axes = [axes] if isinstance(axes, str) else list(axes)
    several = len(axes) > 1
    names = axis_columns(axes) if several else ["point"]
    rows = []
    chosen = latest_attempts(fetch_records(client, sweep_id, experiment_id=experiment_id))
    for run in chosen.values():
        tags = run.tags
        if tags.get(M.TAG_FINISHED) != "true" or not tags.get(M.TAG_ESTIMATOR):
            continue
        final, base = run_score(run.metrics), base_score(run.metrics)  # at the k it logged
        if final is None or base is None:
            continue
        level = _run_level(client, run.run_id, tags, dict(zip(names, axes, strict=True)), point)
        row = {
            "point": level_label(level) if several else level["point"],
            **level,  # several axes: a column each (one: ``point`` again)
            "divergence": tags[M.TAG_DIVERGENCE],
            "estimator": tags[M.TAG_ESTIMATOR],
            "seed": int(tags[M.TAG_SEED]),
            "base": base,
            "final": final,
            "gain": final - base,
        }
        row.update(_clip_means(client, run.run_id, "high"))
        probe = dict(metric_steps(client, run.run_id, M.PROBE_P_ANSWER))
        p0, p_rise = probe.get(0, math.nan), probe.get(RISE_STEP, math.nan)
        row["p_answer_0"], row[f"p_answer_{RISE_STEP}"], row["rise"] = p0, p_rise, p_rise / p0
        row.update(_clip_means(client, run.run_id, "low"))  # new columns after the old ones
        moves = metric_steps(client, run.run_id, M.ABS_LOG_RATIO)
        row["abs_log_ratio"] = _step_mean(moves)
        row["abs_log_ratio_early"] = _step_mean(moves, last_step=EARLY_STEPS)
        rows.append(row)
    return sort_runs(pd.DataFrame(rows), axes)


def sort_runs(runs: pd.DataFrame, axes: Sequence[str]) -> pd.DataFrame:
    """``runs`` (a :func:`runs_frame`, or several sweeps' together) in the frame's order: by the
    level (one axis: ``point``; several: each axis's column in the axes' order), then divergence,
    estimator and seed."""
    names = axis_columns(axes) if len(axes) > 1 else ["point"]
    return runs.sort_values([*names, "divergence", "estimator", "seed"])


def _ci_row(values: Sequence[float] | pd.Series) -> dict[str, float]:
    """Mean, 95 % t CI and count; NaNs (a run without that measurement: TRL has no probe)
    left out, all NaN with none left."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return {"mean": math.nan, "lo": math.nan, "hi": math.nan, "n": 0}
    lo, hi = mean_ci(v) or (math.nan, math.nan)
    return {"mean": float(v.mean()), "lo": lo, "hi": hi, "n": int(v.size)}


def gains(runs: pd.DataFrame) -> pd.DataFrame:
    """Per point (:func:`level_order`), divergence and estimator: the mean gain over the base
    (points), 95 % t CI."""
    out = [
        {"point": p, "divergence": d, "estimator": e, **_ci_row(part["gain"])}
        for (p, d, e), part in runs.groupby(["point", "divergence", "estimator"], sort=True)
    ]
    frame = pd.DataFrame(out)
    return frame.sort_values(
        ["point", "divergence"], ascending=[True, False], key=_level_rank, ignore_index=True
    )


def stratified_difference(
    a: Sequence[Sequence[float] | pd.Series],
    b: Sequence[Sequence[float] | pd.Series],
    confidence: float = CONFIDENCE,
) -> tuple[float, float, float, float]:
    """``(diff, lo, hi, p)``: ``(1/K) Σ_k (mean(a_k) - mean(b_k))`` over K strata (a_k, b_k:
    shapes ``(n_k,)``, ``(m_k,)``), its t interval and two-sided p-value with
    ``se² = Σ_k (s²_ak/n_k + s²_bk/m_k) / K²`` and Welch-Satterthwaite's df over the 2K terms."""
    cols = [np.asarray(x, dtype=float) for pair in zip(a, b, strict=True) for x in pair]
    k = len(a)
    diff = float(np.mean([x.mean() - y.mean() for x, y in zip(cols[::2], cols[1::2], strict=True)]))
    v = np.array([c.var(ddof=1) / c.size for c in cols])
    se = math.sqrt(v.sum()) / k
    if se == 0:
        return diff, diff, diff, 1.0 if diff == 0 else 0.0
    df = v.sum() ** 2 / sum(vi**2 / (c.size - 1) for vi, c in zip(v, cols, strict=True))
    lo, hi = stats.t.interval(confidence, df, loc=diff, scale=se)
    p = 2 * stats.t.sf(abs(diff) / se, df)
    return diff, float(lo), float(hi), float(p)


def contrasts(
    runs: pd.DataFrame, against: str = REFERENCE_ESTIMATOR, column: str = "final"
) -> pd.DataFrame:
    """Per point (:func:`level_order`) and estimator other than ``against``: the stratified
    difference of the mean of ``column`` (default the final avg@k, points; the base is the same
    within a point, so also of gains; ``rise`` for the early rise), its CI, p and Holm's
    adjusted p over every row."""
    out = []
    for point, at in sorted(runs.groupby("point"), key=lambda kv: _level_key(kv[0])):
        divs = sorted(at["divergence"].unique())
        finals = {
            key: part[column].dropna() for key, part in at.groupby(["estimator", "divergence"])
        }
        empty = pd.Series([], dtype=float)
        for est in [e for e in EST_ORDER if e != against and e in set(at["estimator"])]:
            a = [finals.get((est, d), empty) for d in divs]
            b = [finals.get((against, d), empty) for d in divs]
            if min(map(len, a + b)) < 2:  # a stratum without two runs on a side: no interval
                continue
            diff, lo, hi, p = stratified_difference(a, b)
            out.append(
                {"point": point, "contrast": f"{est} - {against}", "diff": diff, "lo": lo,
                 "hi": hi, "p": p, "n": f"{sum(map(len, a))} vs {sum(map(len, b))}"}
            )  # fmt: skip
    frame = pd.DataFrame(out)
    if not frame.empty:
        frame["p_holm"] = adjust(frame["p"].to_numpy(), "holm")
    return frame


def mechanism(runs: pd.DataFrame) -> pd.DataFrame:
    """Per point and estimator (divergences pooled): the mean over runs of each bucket's
    high-side clip fraction and of the early rise, with 95 % t CIs (``<column>_lo/_hi``)."""
    return by_level(runs, [*clip_columns("high"), "p_answer_0", "rise"])


def by_level(runs: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Per point and estimator (divergences pooled, Table 1's estimator order, the points in
    :func:`level_order`): ``n`` (runs) and each column's mean over runs with its 95 % t CI (``<column>_lo/_hi``;
    NaNs left out, as :func:`_ci_row`)."""
    out = []
    for (point, est), part in runs.groupby(["point", "estimator"], sort=True):
        row: dict[str, object] = {"point": point, "estimator": est, "n": len(part)}
        for col in columns:
            ci = _ci_row(part[col])
            row[col], row[f"{col}_lo"], row[f"{col}_hi"] = ci["mean"], ci["lo"], ci["hi"]
        out.append(row)
    frame = pd.DataFrame(out)
    frame["estimator"] = pd.Categorical(frame["estimator"], EST_ORDER, ordered=True)
    return frame.sort_values(["point", "estimator"], key=_level_rank, ignore_index=True)


def dose_response_figure(
    gain_table: pd.DataFrame, axis: str, bases: dict[float, float], k: int = DEFAULT_EVAL_K
) -> Figure:
    """Gain over the base (points) against the base's avg@k (log axis), one line per estimator
    (colour) and divergence (line style), 95 % t CIs as error bars, the series nudged apart
    sideways so the bars do not hide each other; ``bases``: point -> the base's avg@k (percent),
    the x position of the point, labelled with the point (Table 1's estimator order and
    Figure 2's colours)."""
    fig = Figure(figsize=(7.5, 4.4))
    ax = fig.subplots()
    styles = ["-", "--", ":", "-."]
    divs = list(dict.fromkeys(gain_table["divergence"]))
    series = [(d, e) for d in divs for e in EST_ORDER]
    for i, (div, est) in enumerate(series):
        rows = gain_table[(gain_table["divergence"] == div) & (gain_table["estimator"] == est)]
        if rows.empty:
            continue
        rows = rows.sort_values("point")
        nudge = 1 + (i - (len(series) - 1) / 2) * 0.025
        x = np.array([bases[p] for p in rows["point"]]) * nudge
        y = rows["mean"].to_numpy()
        err = np.abs(rows[["lo", "hi"]].to_numpy().T - y)
        ax.errorbar(x, y, yerr=err, color=EST_COLORS[est], ls=styles[divs.index(div) % 4],
                    marker="o", ms=4, capsize=3, label=f"{div}/{est}")  # fmt: skip
    ax.set_xscale("log")
    ticks = sorted(bases)
    ax.set_xticks([bases[p] for p in ticks], [f"{bases[p]:.1f}\n({p})" for p in ticks])
    ax.minorticks_off()
    ax.set_xlabel(f"base avg@{k} (%)  ({axis}), log scale")
    ax.set_ylabel("gain over the base (points)")
    ax.axhline(0, color="0.6", lw=0.8)
    ax.legend(ncol=2, fontsize="small")
    n = (
        f"{gain_table['n'].min()}-{gain_table['n'].max()}"
        if gain_table["n"].nunique() > 1
        else str(gain_table["n"].iloc[0])
    )
    ax.set_title(f"Gain vs how rare the correct answer is ({n} seeds per point, 95% t CI)")
    fig.tight_layout()
    return fig


def dose_response_panels(
    runs: pd.DataFrame, axes: Sequence[str], k: int = DEFAULT_EVAL_K
) -> Figure:
    """Two axes: gain over the base (points; mean over runs, divergences pooled, 95 % t CI as
    error bars) against the first axis's value (linear, a tick at each value), one line per
    estimator (Table 1's order, Figure 2's colours, nudged apart sideways), one panel per value of
    the second axis titled with that value and its base's avg@k (``runs``: :func:`runs_frame`'s
    frame of the two axes)."""
    if len(axes) != 2:
        raise ValueError(f"a panel per second axis's value needs two axes, not {list(axes)}")
    x_name, panel_name = axis_columns(axes)
    xs = sorted(runs[x_name].dropna().unique())
    panels = sorted(runs[panel_name].dropna().unique())
    fig = Figure(figsize=(1.5 + 3.6 * len(panels), 4.4))
    axs = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    span = (xs[-1] - xs[0]) or 1.0
    for ax, value in zip(axs, panels, strict=True):
        at = runs[runs[panel_name] == value]
        series = [e for e in EST_ORDER if e in set(at["estimator"])]
        for i, est in enumerate(series):
            levels = list(at[at["estimator"] == est].groupby(x_name)["gain"])
            ci = [_ci_row(gain) for _x, gain in levels]
            x = np.array([x for x, _gain in levels], dtype=float)
            y = np.array([c["mean"] for c in ci])
            err = np.abs(np.array([[c["lo"], c["hi"]] for c in ci]).T - y)
            nudge = (i - (len(series) - 1) / 2) * 0.015 * span
            ax.errorbar(x + nudge, y, yerr=err, color=EST_COLORS[est], marker="o", ms=4,
                        capsize=3, label=est)  # fmt: skip
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.set_xlabel(axes[0])
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set_title(f"{panel_name} {value}: base avg@{k} {_base_text(at)} %")
        ax.legend(fontsize="small")  # each panel's: an estimator may be at some levels only
    axs[0].set_ylabel("gain over the base (points)")
    fig.suptitle("Gain over the base per level (divergences pooled, 95% t CI)")
    fig.tight_layout()
    return fig


def _base_text(runs: pd.DataFrame) -> str:
    """The base's avg@k (percent) of ``runs``' levels: one number, or their range if they differ."""
    bases = runs.groupby("point")["base"].first()
    lo, hi = f"{bases.min():.1f}", f"{bases.max():.1f}"
    return lo if lo == hi else f"{lo}-{hi}"


def manipulation_check(
    runs: pd.DataFrame, clip_percent: float = 3.0, estimator: str = REFERENCE_ESTIMATOR
) -> pd.DataFrame:
    """Did a level move MC where it was meant to? Per point (:func:`level_order`), over
    ``estimator``'s (MC's) runs, divergences pooled: ``n`` (runs); ``clip`` with ``clip_lo`` and
    ``clip_hi``, the high-side clip fraction in the μ :data:`CHECK_BUCKET` bucket
    (``clip_high/<bucket>``, as :func:`mechanism`'s) in percent, mean and 95 % t CI over runs;
    ``gain`` with ``gain_lo`` and ``gain_hi``, the gain over the base (points, the same); and
    ``passes``: ``clip`` ≥ ``clip_percent`` and ``gain_lo`` > 0 (a level with one run, no CI,
    does not pass). A point without such runs has no row."""
    column = f"clip_high/{CHECK_BUCKET}"
    rows = []
    for point, part in runs[runs["estimator"] == estimator].groupby("point"):
        clip, gain = _ci_row(100 * part[column]), _ci_row(part["gain"])
        rows.append(
            {"point": point, "n": len(part), "clip": clip["mean"], "clip_lo": clip["lo"],
             "clip_hi": clip["hi"], "gain": gain["mean"], "gain_lo": gain["lo"],
             "gain_hi": gain["hi"]}
        )  # fmt: skip
    columns = ["point", "n", "clip", "clip_lo", "clip_hi", "gain", "gain_lo", "gain_hi"]
    frame = pd.DataFrame(rows, columns=columns)
    frame = frame.sort_values("point", key=_level_rank, ignore_index=True)
    frame["passes"] = (frame["clip"] >= clip_percent) & (frame["gain_lo"] > 0)
    return frame


def strongest_level(check: pd.DataFrame) -> object | None:
    """The passing level of a :func:`manipulation_check` with the largest MC high-side clip
    fraction (the first in the table's order on a tie); None when no level passes."""
    passing = check[check["passes"]]
    if passing.empty:
        return None
    return passing["point"].iloc[int(np.argmax(passing["clip"].to_numpy()))]
