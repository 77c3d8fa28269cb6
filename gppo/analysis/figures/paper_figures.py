"""Figure 1 (proximal-region geometry) and Figure 2 (training dynamics, clip fraction per μ bucket).

matplotlib with the Agg backend (no display); every function returns the Figure so tests can
inspect axes and lines, and :func:`save` writes PNG and SVG.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from gppo import metrics as M
from gppo.analysis.tables.render import divergence_name
from gppo.analysis.vocabulary import BASELINE_ORDER, DIV_ORDER, EST_COLORS, EST_NAMES, EST_ORDER
from gppo.objectives.defaults import R_MIN, REFERENCE
from gppo.registry import LazyMapping

#: behaviour probabilities at which ``regions`` prints the bounds
PRINT_MUS = (0.001, 0.01, 0.1, 0.5, 0.9)
CURVE_METRICS = (M.TRAIN_SCORE, M.ENTROPY, *(M.clip_frac_bucket(b[0]) for b in M.MU_BUCKETS))


def _ordered(values: Iterable[str], order: Sequence[str]) -> list[str]:
    values = list(dict.fromkeys(values))
    return sorted(values, key=lambda v: (order.index(v) if v in order else len(order), v))


def region_bounds(
    divergence: str,
    estimator: str,
    mu: np.ndarray,
    *,
    r_min: float = R_MIN,
    delta: float | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(r_lo, r_hi, δ) of one cell at behaviour probabilities ``mu`` (δ calibrated from r_min)."""
    from gppo.objectives.regions import calibrate_delta, clip_interval

    delta = calibrate_delta(divergence, r_min) if delta is None else float(delta)
    lo, hi = clip_interval(divergence, estimator, delta, mu)
    return lo.numpy(), hi.numpy(), delta


def region_table(
    cells: Sequence[tuple[str, str]],
    *,
    r_min: float = R_MIN,
    deltas: Mapping[str, float] | None = None,
    mus: Sequence[float] = PRINT_MUS,
) -> pd.DataFrame:
    """Bounds at a few μ: columns divergence, estimator, delta, mu, r_lo, r_hi."""
    rows = []
    for div, est in cells:
        lo, hi, delta = region_bounds(
            div, est, np.asarray(mus, dtype=float), r_min=r_min, delta=(deltas or {}).get(div)
        )
        rows += [
            {"divergence": div, "estimator": est, "delta": delta, "mu": m, "r_lo": a, "r_hi": b}
            for m, a, b in zip(mus, lo, hi, strict=True)
        ]
    return pd.DataFrame(rows)


def figure1_regions(
    cells: Sequence[tuple[str, str]],
    *,
    r_min: float = R_MIN,
    deltas: Mapping[str, float] | None = None,
    mu: np.ndarray | None = None,
    ylim: tuple[float, float] = (0.0, 3.0),
) -> Figure:
    """Figure 1: r_lo and r_hi against μ (log axis), one panel per divergence.

    Each estimator of a panel draws two lines (``r_hi`` solid, ``r_lo`` dashed) in its colour; the
    MC region (constant in μ) is also drawn as a grey band, labelled "MC band".
    """
    mu = np.logspace(-4, 0, 400)[:-1] if mu is None else np.asarray(mu, dtype=float)
    divs = _ordered((d for d, _ in cells), DIV_ORDER)
    fig, axes = plt.subplots(1, len(divs), figsize=(4.2 * len(divs), 3.6), squeeze=False)
    for ax, div in zip(axes[0], divs, strict=True):
        ests = _ordered((e for d, e in cells if d == div), EST_ORDER)
        delta = (deltas or {}).get(div)
        mc_lo, mc_hi, used = region_bounds(div, "mc", mu, r_min=r_min, delta=delta)
        ax.fill_between(mu, mc_lo, mc_hi, color="0.85", label="MC band", zorder=0)
        for est in ests:
            lo, hi, _ = region_bounds(div, est, mu, r_min=r_min, delta=delta)
            color = EST_COLORS.get(est)
            name = EST_NAMES.get(est, est)
            ax.plot(mu, hi, color=color, linestyle="-", label=f"{name} r_hi")
            ax.plot(mu, lo, color=color, linestyle="--", label=f"{name} r_lo")
        ax.set_xscale("log")
        ax.set_ylim(*ylim)
        ax.set_xlabel("μ (behaviour probability)")
        ax.set_ylabel("ratio bound r")
        ax.set_title(f"{divergence_name(div)} (δ = {used:.4g})")
    handles: dict[str, Any] = {}
    for ax in axes[0]:
        for artist in [*ax.collections, *ax.get_lines()]:
            handles.setdefault(artist.get_label(), artist)
    fig.tight_layout()
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=min(len(handles), 7),
        fontsize="small",
        frameon=False,
    )  # fmt: skip  (under the panels: never on the curves)
    return fig


def collect_curves(
    client, runs: pd.DataFrame, metrics: Sequence[str] = CURVE_METRICS, max_workers: int = 8
) -> pd.DataFrame:
    """Metric histories of the runs (``Collected.runs`` rows with a run_id): tidy long frame.

    Columns: domain, cell, seed, metric, step, value. One ``get_metric_history`` per (run, metric),
    issued from a small thread pool.
    """
    rows = runs[runs["run_id"].astype(bool)] if len(runs) else runs
    jobs = [(r, m) for r in rows.itertuples(index=False) for m in metrics]

    def fetch(job):
        run, metric = job
        hist = client.get_metric_history(run.run_id, metric)
        return [(run.domain, run.cell, run.seed, metric, h.step, h.value) for h in hist]

    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        records = [rec for part in pool.map(fetch, jobs) for rec in part]
    return pd.DataFrame(records, columns=["domain", "cell", "seed", "metric", "step", "value"])


def _mean_curve(frame: pd.DataFrame, window: int | None = None) -> pd.Series:
    """Mean over seeds per step, then a trailing rolling mean of ``window`` steps.

    ``window=None`` picks one step in 15 of the curve's length (none under 30 steps): a training
    score of a few dozen rollouts per step is too noisy to compare cells by eye otherwise.
    """
    curve = frame.groupby("step")["value"].mean().sort_index()
    return _smooth(curve, window)


def _smooth(curve: pd.Series, window: int | None) -> pd.Series:
    if window is None:
        window = len(curve) // 15 if len(curve) >= 30 else 1
    return curve.rolling(window, min_periods=1).mean() if window > 1 else curve


def _seed_band(frame: pd.DataFrame, window: int | None) -> tuple[pd.Series, pd.Series] | None:
    """(min, max) over seeds per step of the smoothed per-seed curves; None with one seed."""
    wide = frame.pivot_table(index="step", columns="seed", values="value", aggfunc="mean")
    if wide.shape[1] < 2:
        return None
    wide = wide.sort_index().apply(lambda col: _smooth(col.dropna(), window)).dropna(how="all")
    return wide.min(axis=1), wide.max(axis=1)


def _baseline_colours() -> dict[str, str]:
    from gppo.objectives.methods import METHODS

    return {b: METHODS.get(b).colour or "" for b in BASELINE_ORDER}


#: baselines' colours, the method registry's (estimators use EST_COLORS; the reference is grey
#: and dashed; a baseline without a colour takes one of OTHER_COLORS)
BASELINE_COLORS: Mapping[str, str] = LazyMapping(_baseline_colours)
OTHER_COLORS = ("tab:olive", "tab:cyan", "tab:gray", "gold", "teal")
REFERENCE_STYLE = {"color": "0.45", "linestyle": "--"}
ROWS = ((M.TRAIN_SCORE, "training score"), (M.ENTROPY, "entropy"))


def _panels(cells: Sequence[str], reference: str) -> list[tuple[str, list[tuple[str, str, dict]]]]:
    """Columns of Figure 2: (title, [(cell, label, line style)]) per divergence, then baselines.

    A divergence's panel holds its estimators (colour of the estimator) and the reference cell
    (grey, dashed) unless the reference is one of them; the baselines share one panel.
    """
    from gppo.analysis.vocabulary import BASELINE_NAMES

    grid = [c for c in cells if "/" in c]
    others = _ordered((c for c in cells if "/" not in c), list(BASELINE_COLORS))
    ref = (
        [(reference, f"reference ({reference})", dict(REFERENCE_STYLE))]
        if reference in cells
        else []
    )
    panels = []
    for div in _ordered((c.split("/")[0] for c in grid), DIV_ORDER):
        ests = _ordered((c.split("/")[1] for c in grid if c.split("/")[0] == div), EST_ORDER)
        lines = [
            (f"{div}/{e}", EST_NAMES.get(e, e), {"color": EST_COLORS.get(e, "tab:gray")})
            for e in ests
        ]
        if reference not in {c for c, _, _ in lines}:
            lines += ref
        panels.append((divergence_name(div), lines))
    if others:
        spare = iter(OTHER_COLORS * 4)
        lines = [
            (c, BASELINE_NAMES.get(c, c), {"color": BASELINE_COLORS.get(c) or next(spare)})
            for c in others
        ]
        panels.append(("Baselines", lines + ref))
    return panels


def figure2_dynamics(
    curves: pd.DataFrame, smooth: int | None = None, reference: str = REFERENCE
) -> Figure:
    """Figure 2 as small multiples: training score (first row) and entropy (second row) vs step.

    One column per divergence, holding its estimators (MC black, Atomic red, Binary blue: the
    same colours as Figure 1 and the clip-by-μ figure) and the ``reference`` cell (grey, dashed),
    then one column for the baselines (with the reference too). Each line is the mean over
    seeds, smoothed by a trailing rolling mean of ``smooth`` steps (None: automatic, see
    :func:`_mean_curve`; 1: raw); with several seeds a band spans their min and max. Several
    domains stack their row pairs. Rows share the y axis; legends sit outside the panels.
    """
    domains = list(dict.fromkeys(curves["domain"])) or ["(no data)"]
    panels = _panels(list(dict.fromkeys(curves["cell"])), reference) or [("(no data)", [])]
    n_rows, n_cols = 2 * len(domains), len(panels)
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(3.4 * n_cols + 0.8, 2.4 * n_rows + 0.6),
        squeeze=False, sharex=True, sharey="row",
    )  # fmt: skip
    for d, domain in enumerate(domains):
        frame = curves[curves["domain"] == domain]
        for r, (metric, name) in enumerate(ROWS):
            row = 2 * d + r
            of_metric = frame[frame["metric"] == metric]
            for c, (title, lines) in enumerate(panels):
                ax = axes[row][c]
                for cell, label, style in lines:
                    data = of_metric[of_metric["cell"] == cell]
                    if not len(data):
                        continue
                    mean = _mean_curve(data, smooth)
                    ax.plot(mean.index, mean.values, label=label, linewidth=1.4, **style)
                    band = _seed_band(data, smooth)
                    if band is not None:
                        lo, hi = band
                        ax.fill_between(lo.index, lo.values, hi.values, color=style["color"],
                                        alpha=0.15, linewidth=0)  # fmt: skip
                if r == 0:
                    ax.set_title(title if len(domains) == 1 else f"{domain}: {title}")
                if c == 0:
                    prefix = "" if len(domains) == 1 else f"{domain}\n"
                    ax.set_ylabel(prefix + name)
                if row == n_rows - 1:
                    ax.set_xlabel("step")
                ax.grid(alpha=0.3)
    _outside_legends(fig, axes, panels)
    fig.tight_layout()
    return fig


def _outside_legends(fig: Figure, axes: np.ndarray, panels: list) -> None:
    """One legend under the figure for the estimators and the reference; the baselines' own
    legend right of their panel (never on top of the curves)."""
    seen: dict[str, Any] = {}
    for c, (title, _) in enumerate(panels):
        if title == "Baselines":
            continue
        for line in axes[0][c].get_lines():
            seen.setdefault(line.get_label(), line)
    if seen:
        fig.legend(
            list(seen.values()), list(seen), loc="upper center", bbox_to_anchor=(0.5, 0.0),
            ncol=len(seen), frameon=False,
        )  # fmt: skip
    if panels and panels[-1][0] == "Baselines" and axes[0][-1].get_lines():
        axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small")


def clip_by_mu_frame(curves: pd.DataFrame) -> pd.DataFrame:
    """Per domain, estimator and μ bucket: the mean clip fraction over runs with its 95% t CI.

    A run is one (cell, seed) of a grid cell; its value is its mean over steps. Columns:
    domain, estimator, bucket (its name in ``gppo.metrics.MU_BUCKETS``), mean, lo, hi (NaN with
    one run), n_runs.
    The interval is over the runs pooled across divergences, so it states how well the data pin
    the displayed mean, not a difference between divergences.
    """
    from gppo.stats.inference import mean_ci

    names = {M.clip_frac_bucket(b[0]): b[0] for b in M.MU_BUCKETS}
    data = curves[curves["metric"].isin(names) & curves["cell"].str.contains("/", regex=False)]
    runs = (
        data.assign(estimator=data["cell"].str.split("/").str[1], bucket=data["metric"].map(names))
        .groupby(["domain", "estimator", "bucket", "cell", "seed"], sort=False)["value"]
        .mean()
        .reset_index()
    )
    out = []
    for (domain, est, bucket), part in runs.groupby(["domain", "estimator", "bucket"], sort=False):
        values = part["value"].to_numpy(float)
        lo, hi = mean_ci(values) or (np.nan, np.nan)
        out.append((domain, est, bucket, float(values.mean()), lo, hi, len(values)))
    columns = ["domain", "estimator", "bucket", "mean", "lo", "hi", "n_runs"]
    return pd.DataFrame(out, columns=columns)


def figure2_clip_by_mu(curves: pd.DataFrame) -> Figure:
    """Clip fraction per μ bucket for each estimator, with 95% t CIs over runs.

    One panel per domain; one bar group per bucket of gppo.metrics.MU_BUCKETS, one bar series per
    estimator (grid cells only): the mean over runs (each run's mean over steps; runs of every
    divergence pooled) and its interval (:func:`clip_by_mu_frame`; none with one run): where
    Atomic and Binary clip differently from MC.
    """
    buckets = [b[0] for b in M.MU_BUCKETS]
    frame = clip_by_mu_frame(curves)
    domains = list(dict.fromkeys(frame["domain"])) or ["(no data)"]
    fig, axes = plt.subplots(1, len(domains), figsize=(8.0 * len(domains), 3.6), squeeze=False)
    for ax, domain in zip(axes[0], domains, strict=True):
        mine = frame[frame["domain"] == domain]
        ests = _ordered(mine["estimator"], EST_ORDER)
        width = 0.8 / max(len(ests), 1)
        x = np.arange(len(buckets))
        for j, est in enumerate(ests):
            rows = mine[mine["estimator"] == est].set_index("bucket").reindex(buckets)
            means = rows["mean"].to_numpy(float)
            ax.bar(
                x + (j - (len(ests) - 1) / 2) * width,
                means,
                width,
                yerr=np.abs(rows[["lo", "hi"]].to_numpy(float).T - means),
                error_kw={"elinewidth": 1, "capsize": 2, "ecolor": "0.3"},
                label=EST_NAMES.get(est, est),
                color=EST_COLORS.get(est),
            )
        ax.set_xticks(x, [_bucket_label(lo, hi) for _, lo, hi in M.MU_BUCKETS])
        ax.set_xlabel("μ bucket")
        ax.set_ylabel("clip fraction (95% t CI over runs)")
        ax.set_title(domain)
        if ests:
            ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def _bucket_label(lo: float, hi: float) -> str:
    if lo <= 0:
        return f"μ < {hi:g}"
    return f"μ ≥ {lo:g}" if hi >= 1 else f"{lo:g} ≤ μ < {hi:g}"


def save(fig: Figure, stem: str | Path) -> list[Path]:
    """Write ``stem.png`` and ``stem.svg``; close the figure; return the paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    for path in paths:
        fig.savefig(path, dpi=150 if path.suffix == ".png" else None, bbox_inches="tight")
    plt.close(fig)
    return paths
