"""Aggregate view over benchmarks (rliable's kind, Agarwal et al. 2021), from the tidy frame.

Per domain and cell, from the runs with a score on every benchmark (matrix ``(n_runs, n_bench)``,
scores as fractions):

- ``mean``: mean over runs and benchmarks;
- ``iqm``: interquartile mean of all run x benchmark scores (``scipy.stats.trim_mean(·, 0.25)``);
- ``prob_improvement``: P(cell > reference), the Mann-Whitney U / (n m) per benchmark (ties 1/2)
  averaged over benchmarks (as in Table 1);

``mean`` with the Student t CI of the run averages (:func:`gppo.stats.inference.mean_ci`, Table 1's
Avg. interval); ``iqm`` and ``prob_improvement`` with a 95% percentile CI from a bootstrap over
runs (:func:`gppo.stats.inference.run_bootstrap_interval`: whole rows of the matrix resampled, a
run's benchmark scores kept together since one run is scored on every benchmark; cell and
reference independently), which with a few runs is too narrow (see ``stats``), as the figures
say. One run: the estimate without a CI. ``left_out``: the seeds with results but not on every benchmark,
left out of the estimates ("/"-joined, empty when none).

:func:`aggregate_frame` computes them; :func:`figure_intervals` (Mean and IQM interval
estimates per cell) and :func:`figure_improvement` (P(cell > reference) with its CI) draw them;
:func:`write_aggregate` writes ``aggregate.csv`` and both figures (png + svg) for the report.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from gppo.analysis.vocabulary import row_order
from gppo.objectives.defaults import REFERENCE
from gppo.stats.inference import mean_ci, run_bootstrap_interval
from gppo.store.state import State

METRICS = ("mean", "iqm", "prob_improvement")
STEM_INTERVALS = "aggregate_intervals"
STEM_IMPROVEMENT = "aggregate_improvement"


def _mean(m: np.ndarray) -> np.ndarray:
    """Mean over runs and benchmarks of ``m``, shape ``(..., n_runs, n_bench)``."""
    return np.mean(m, axis=(-2, -1))


def _iqm(m: np.ndarray) -> np.ndarray:
    """Interquartile mean of all run x benchmark scores of ``m``, shape ``(..., n_runs, n_bench)``."""
    return stats.trim_mean(m.reshape(*m.shape[:-2], -1), 0.25, axis=-1)


def _pi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``(1/B) Σ_b U_b / (n m)`` of ``x`` ``(..., n, B)`` against ``y`` ``(..., m, B)``."""
    u = stats.mannwhitneyu(x, y, axis=-2).statistic  # shape (..., B)
    return np.mean(u / (x.shape[-2] * y.shape[-2]), axis=-1)


def _mean_interval(matrices: list[np.ndarray], statistic) -> tuple[float, float]:
    """Table 1's Avg. interval: the t CI of the run averages of the one matrix."""
    return mean_ci(matrices[0].mean(axis=1))  # type: ignore[return-value]  # >= 2 runs: a CI


def _estimate(
    matrices: list[np.ndarray], statistic, interval=run_bootstrap_interval
) -> tuple[float, float, float]:
    point = float(statistic(*matrices))
    if min(len(m) for m in matrices) < 2:
        return point, np.nan, np.nan
    lo, hi = interval(matrices, statistic)
    return point, lo, hi


def _pivot(tidy: pd.DataFrame, domain: str, cell: str) -> pd.DataFrame:
    rows = tidy[(tidy["domain"] == domain) & (tidy["status"] == State.DONE)]
    benches = list(dict.fromkeys(rows["benchmark"]))
    mine = rows[rows["cell"] == cell].pivot_table(
        index="seed", columns="benchmark", values="score", aggfunc="mean"
    )
    return mine.reindex(columns=benches)


def run_matrix(tidy: pd.DataFrame, domain: str, cell: str) -> pd.DataFrame:
    """(runs x benchmarks) finished scores of one cell; runs without every benchmark dropped
    (:func:`left_out` names them)."""
    return _pivot(tidy, domain, cell).dropna()


def left_out(tidy: pd.DataFrame, domain: str, cell: str) -> list[int]:
    """Seeds of one cell with a finished score on some benchmark but not on every one."""
    m = _pivot(tidy, domain, cell)
    return [int(s) for s in m.index[m.isna().any(axis=1) & m.notna().any(axis=1)]]


def aggregate_frame(tidy: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """Long frame: domain, cell, metric (mean | iqm | prob_improvement), estimate, lo, hi, n_runs,
    left_out (seeds without every benchmark, not in the estimates)."""
    out = []
    for domain in dict.fromkeys(tidy["domain"]):
        cells = row_order(tidy.loc[tidy["domain"] == domain, "cell"])
        ref = run_matrix(tidy, domain, reference) if reference in cells else None
        for cell in cells:
            m = run_matrix(tidy, domain, cell)
            if m.empty:
                continue
            runs = m.to_numpy(float)
            dropped = "/".join(map(str, left_out(tidy, domain, cell)))
            rec = {"domain": domain, "cell": cell, "n_runs": len(m), "left_out": dropped}
            out.append(
                {**rec, "metric": "mean", **_named(_estimate([runs], _mean, _mean_interval))}
            )
            out.append({**rec, "metric": "iqm", **_named(_estimate([runs], _iqm))})
            if ref is not None and not ref.empty and list(ref.columns) == list(m.columns):
                est = _estimate([runs, ref.to_numpy(float)], _pi)
                out.append({**rec, "metric": "prob_improvement", **_named(est)})
    columns = ["domain", "cell", "metric", "estimate", "lo", "hi", "n_runs", "left_out"]
    return pd.DataFrame(out, columns=columns)


def _named(values: tuple[float, float, float]) -> dict[str, float]:
    return dict(zip(("estimate", "lo", "hi"), values, strict=True))


def _bars(ax, part: pd.DataFrame, scale: float, colour: str) -> None:
    y = np.arange(len(part))[::-1]
    est = part["estimate"].to_numpy() * scale
    lo, hi = part["lo"].to_numpy() * scale, part["hi"].to_numpy() * scale
    has = ~np.isnan(lo)
    ax.barh(y[has], (hi - lo)[has], left=lo[has], height=0.6, color=colour, alpha=0.35)
    ax.plot(est, y, "|", color=colour, markersize=12, markeredgewidth=2)
    ax.set_yticks(y, part["cell"].tolist())
    ax.grid(axis="x", alpha=0.3)
    ax.use_sticky_edges = (
        False  # a bar's left edge would pin the axis there, cutting the base's mark
    )
    ax.margins(x=0.05)


def figure_intervals(agg: pd.DataFrame):
    """Mean (t CI) and IQM (bootstrap CI) over benchmarks per cell (percent), 95% over runs."""
    import matplotlib.pyplot as plt

    domains = list(dict.fromkeys(agg["domain"]))
    means = agg[agg["metric"] == "mean"]
    n_cells = max((means["domain"] == d).sum() for d in domains) if domains else 1
    fig, axes = plt.subplots(
        len(domains) or 1, 2, figsize=(9, 0.3 * n_cells * len(domains) + 1.5), squeeze=False
    )
    for row, domain in zip(axes, domains, strict=False):
        for ax, metric, colour in zip(
            row, ("mean", "iqm"), ("tab:blue", "tab:orange"), strict=True
        ):
            part = agg[(agg["domain"] == domain) & (agg["metric"] == metric)]
            _bars(ax, part, 100.0, colour)
            ax.set_title(f"{domain}: {'Mean' if metric == 'mean' else 'IQM'} (%)", fontsize=10)
            if ax is not row[0]:
                ax.set_yticklabels([])
    fig.suptitle(
        "Interval estimates over benchmarks: Mean, 95% t CI over runs;"
        " IQM, 95% bootstrap CI over runs (too narrow with few runs)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def figure_improvement(agg: pd.DataFrame, reference: str = REFERENCE):
    """P(cell > reference) per cell with its 95% bootstrap CI over runs (too narrow with few
    runs); 0.5 = no difference."""
    import matplotlib.pyplot as plt

    part = agg[(agg["metric"] == "prob_improvement") & (agg["cell"] != reference)]
    domains = list(dict.fromkeys(part["domain"])) or ["(none)"]
    n = max((part["domain"] == d).sum() for d in domains) or 1
    fig, axes = plt.subplots(1, len(domains), figsize=(4.5 * len(domains), 0.3 * n + 1.5))
    for ax, domain in zip(np.atleast_1d(axes), domains, strict=True):
        _bars(ax, part[part["domain"] == domain], 1.0, "tab:green")
        ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
        ax.set_xlim(0, 1)
        ax.set_title(
            f"{domain}: P(cell > {reference}), 95% bootstrap CI over runs\n"
            "(too narrow with few runs)",
            fontsize=10,
        )
    fig.tight_layout()
    return fig


def write_aggregate(
    tidy: pd.DataFrame, out_dir: str | Path, reference: str = REFERENCE
) -> list[Path]:
    """``aggregate.csv`` and the two figures (png + svg) into ``out_dir``; the paths written."""
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    agg = aggregate_frame(tidy, reference)
    paths = [out / "aggregate.csv"]
    agg.to_csv(paths[0], index=False, float_format="%.6g")
    if agg.empty:
        return paths
    for stem, fig in (
        (STEM_INTERVALS, figure_intervals(agg)),
        (STEM_IMPROVEMENT, figure_improvement(agg, reference)),
    ):
        for ext in ("png", "svg"):
            fig.savefig(out / f"{stem}.{ext}", bbox_inches="tight", dpi=150)
            paths.append(out / f"{stem}.{ext}")
        plt.close(fig)
    return paths


__all__ = [
    "METRICS",
    "aggregate_frame",
    "figure_improvement",
    "figure_intervals",
    "left_out",
    "run_matrix",
    "write_aggregate",
]
