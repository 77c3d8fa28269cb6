"""Figure 1 (proximal-region geometry) and Figure 2 (training dynamics, clip fraction per μ bucket).

matplotlib with the Agg backend (no display); every function returns the Figure so tests can
inspect axes and lines, and :func:`save` writes PNG and SVG.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from gppo import metrics as M
from gppo.analysis.render import divergence_name
from gppo.analysis.table import DIV_ORDER, EST_NAMES, EST_ORDER

#: behaviour probabilities at which ``regions`` prints the bounds
PRINT_MUS = (0.001, 0.01, 0.1, 0.5, 0.9)
EST_COLORS = {"mc": "black", "atomic": "tab:red", "binary": "tab:blue"}
CURVE_METRICS = (M.TRAIN_SCORE, M.ENTROPY, *(M.clip_frac_bucket(b[0]) for b in M.MU_BUCKETS))


def _ordered(values: Iterable[str], order: Sequence[str]) -> list[str]:
    values = list(dict.fromkeys(values))
    return sorted(values, key=lambda v: (order.index(v) if v in order else len(order), v))


def region_bounds(
    divergence: str,
    estimator: str,
    mu: np.ndarray,
    *,
    r_min: float = 0.8,
    delta: float | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(r_lo, r_hi, δ) of one cell at behaviour probabilities ``mu`` (δ calibrated from r_min)."""
    import torch

    from gppo.objectives import calibrate_delta, proximal_region

    delta = calibrate_delta(divergence, r_min) if delta is None else float(delta)
    lo, hi = proximal_region(divergence, estimator, delta, torch.as_tensor(mu, dtype=torch.float64))
    return lo.detach().cpu().numpy(), hi.detach().cpu().numpy(), delta


def region_table(
    cells: Sequence[tuple[str, str]],
    *,
    r_min: float = 0.8,
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
    r_min: float = 0.8,
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
        ax.legend(fontsize="x-small", loc="center left")
    fig.tight_layout()
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
    if window is None:
        window = len(curve) // 15 if len(curve) >= 30 else 1
    return curve.rolling(window, min_periods=1).mean() if window > 1 else curve


def figure2_dynamics(curves: pd.DataFrame, smooth: int | None = None) -> Figure:
    """Figure 2: training score (solid, left axis) and entropy (dash-dot, right axis) vs step.

    One panel per domain; one colour per cell, averaged over seeds and smoothed by a trailing
    rolling mean of ``smooth`` steps (None: automatic, see :func:`_mean_curve`; 1: raw). Each
    panel is an Axes plus its ``twinx`` Axes (so a figure with D domains has 2·D axes).
    """
    domains = list(dict.fromkeys(curves["domain"])) or ["(no data)"]
    fig, axes = plt.subplots(1, len(domains), figsize=(8 * len(domains), 4), squeeze=False)
    cmap = plt.get_cmap("tab20")
    for ax, domain in zip(axes[0], domains, strict=True):
        twin = ax.twinx()
        frame = curves[curves["domain"] == domain]
        for i, cell in enumerate(dict.fromkeys(frame["cell"])):
            color = cmap(i % 20)
            of_cell = frame[frame["cell"] == cell]
            score = _mean_curve(of_cell[of_cell["metric"] == M.TRAIN_SCORE], smooth)
            ent = _mean_curve(of_cell[of_cell["metric"] == M.ENTROPY], smooth)
            if len(score):
                ax.plot(score.index, score.values, color=color, linestyle="-", label=cell)
            if len(ent):
                twin.plot(
                    ent.index, ent.values, color=color, linestyle="-.", label=f"{cell} entropy"
                )
        ax.set_title(domain)
        ax.set_xlabel("step")
        ax.set_ylabel("training score (solid)")
        twin.set_ylabel("entropy (dash-dot)")
        if ax.lines:  # outside the plot, to the right of the entropy axis
            ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.18, 1.0))
    fig.tight_layout()
    return fig


def figure2_clip_by_mu(curves: pd.DataFrame) -> Figure:
    """Clip fraction per μ bucket for each estimator (mean over steps, seeds and divergences).

    One panel per domain; one bar group per bucket of gppo.metrics.MU_BUCKETS, one bar series per
    estimator (grid cells only): where Atomic and Binary clip differently from MC.
    """
    buckets = [b[0] for b in M.MU_BUCKETS]
    names = {M.clip_frac_bucket(b): b for b in buckets}
    data = curves[curves["metric"].isin(names) & curves["cell"].str.contains("/", regex=False)]
    domains = list(dict.fromkeys(data["domain"])) or ["(no data)"]
    fig, axes = plt.subplots(1, len(domains), figsize=(5.5 * len(domains), 3.6), squeeze=False)
    for ax, domain in zip(axes[0], domains, strict=True):
        frame = data[data["domain"] == domain].assign(
            estimator=lambda f: f["cell"].str.split("/").str[1],
            bucket=lambda f: f["metric"].map(names),
        )
        ests = _ordered(frame["estimator"], EST_ORDER)
        width = 0.8 / max(len(ests), 1)
        x = np.arange(len(buckets))
        for j, est in enumerate(ests):
            means = frame[frame["estimator"] == est].groupby("bucket")["value"].mean()
            heights = [float(means.get(b, np.nan)) for b in buckets]
            ax.bar(
                x + (j - (len(ests) - 1) / 2) * width,
                heights,
                width,
                label=EST_NAMES.get(est, est),
                color=EST_COLORS.get(est),
            )
        ax.set_xticks(x, [_bucket_label(lo, hi) for _, lo, hi in M.MU_BUCKETS])
        ax.set_xlabel("μ bucket")
        ax.set_ylabel("clip fraction")
        ax.set_title(domain)
        if ests:
            ax.legend(fontsize="small")
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
