"""Interval estimates and tests of Table 1, after Agarwal et al. (NeurIPS 2021, "Deep RL at the
Edge of the Statistical Precipice", rliable), built on ``scipy.stats``.

Data of one cell: ``columns``, a sequence with one 1-D array per benchmark, the scores of that
benchmark over the cell's seeds (shape ``(n_seeds_b,)``; percent or fractions, any scale).

- :func:`mean_ci`: percentile bootstrap CI of one benchmark's mean over seeds;
- :func:`stratified_mean_ci`: the CI of the Avg. (mean over benchmarks of the per-benchmark
  means), seeds resampled *within* each benchmark (stratified bootstrap, rliable's
  ``StratifiedBootstrap``): ``Avg* = (1/B) Σ_b mean(x_b*)``;
- :func:`stratified_delta_ci`: the same for ``Avg(cell) - Avg(reference)``, cell and reference
  resampled independently;
- :func:`probability_of_improvement`: ``P(X > Y) = (1/B) Σ_b U_b / (n_b m_b)`` with ``U_b`` the
  Mann-Whitney U statistic of benchmark ``b`` (pairs with ``x > y`` count 1, ties 1/2), rliable's
  definition;
- :func:`pooled_pvalues` (default test): two-sided t-tests of each row's per-seed averages
  against the reference's with the pooled within-cell variance of the table (one-way ANOVA
  mean square error, ``df = Σ_g (n_g - 1)``), the many-to-one setting of Dunnett's test; a run
  is the unit, so scores correlated across benchmarks within a run keep the test valid. With 3
  seeds a per-pair test has 4 degrees of freedom or fewer and almost no power after a correction;
  pooling assumes the cells' seed variances are equal (benchmarks/sensitivity.py reports them);
- :func:`welch_pvalue`: the two-sided Welch t-test of one pair (no equal-variance assumption);
- :func:`adjust`: Benjamini-Hochberg (``scipy.stats.false_discovery_control``) or Holm;
- :func:`separated_ranks`: which top-3 entries the data separate from the rest.

Every bootstrap uses a fixed generator seed, so a table is reproducible byte for byte.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 0.05
N_RESAMPLES = 2000
SEED = 0
CORRECTIONS = {"bh": "Benjamini-Hochberg", "holm": "Holm"}
TESTS = {
    "pooled": "two-sided t-test with the pooled within-cell variance of the table's rows",
    "welch": "two-sided Welch t-test",
}
Interval = tuple[float, float]

_RNG_KW = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"


def _arrays(columns: Sequence[Sequence[float]]) -> list[np.ndarray]:
    return [np.asarray(c, dtype=float) for c in columns]


def bootstrap_interval(
    samples: Sequence[np.ndarray], statistic, confidence: float = CONFIDENCE, seed: int = SEED
) -> Interval:
    """Percentile bootstrap CI of ``statistic(*samples, axis=-1)``, samples resampled
    independently (stratified); the point itself when nothing varies."""
    flat = np.concatenate(samples)
    if np.all(flat == flat[0]) or all(np.all(s == s[0]) for s in samples):
        point = float(statistic(*samples, axis=-1))  # no spread: the interval is the point
        return point, point
    kw = {_RNG_KW: np.random.default_rng(seed)}
    res = stats.bootstrap(
        tuple(samples),
        statistic,
        n_resamples=N_RESAMPLES,
        confidence_level=confidence,
        method="percentile",
        paired=False,
        vectorized=True,
        **kw,
    )
    ci = res.confidence_interval
    return float(ci.low), float(ci.high)


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def mean_ci(
    x: Sequence[float], confidence: float = CONFIDENCE, seed: int = SEED
) -> Interval | None:
    """Percentile bootstrap CI of the mean of ``x`` (shape ``(n,)``); None for n < 2."""
    arr = np.asarray(x, dtype=float)
    if arr.size < 2:
        return None
    return bootstrap_interval([arr], _mean, confidence, seed)


def _avg_of_means(*xs: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean([np.mean(x, axis=axis) for x in xs], axis=0)


def stratified_mean_ci(
    columns: Sequence[Sequence[float]], confidence: float = CONFIDENCE, seed: int = SEED
) -> Interval | None:
    """CI of the mean over benchmarks, seeds resampled within each benchmark; None if any n < 2."""
    cols = _arrays(columns)
    if not cols or min(c.size for c in cols) < 2:
        return None
    return bootstrap_interval(cols, _avg_of_means, confidence, seed)


def stratified_delta_ci(
    columns: Sequence[Sequence[float]],
    reference: Sequence[Sequence[float]],
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval | None:
    """CI of ``Avg(columns) - Avg(reference)`` (same benchmarks, same order), stratified."""
    cols, refs = _arrays(columns), _arrays(reference)
    if len(cols) != len(refs):
        raise ValueError(f"{len(cols)} benchmark columns against {len(refs)} of the reference")
    if not cols or min(c.size for c in [*cols, *refs]) < 2:
        return None
    b = len(cols)

    def delta(*xs: np.ndarray, axis: int = -1) -> np.ndarray:
        return _avg_of_means(*xs[:b], axis=axis) - _avg_of_means(*xs[b:], axis=axis)

    return bootstrap_interval([*cols, *refs], delta, confidence, seed)


def probability_of_improvement(
    columns: Sequence[Sequence[float]], reference: Sequence[Sequence[float]]
) -> float | None:
    """rliable's P(X > Y): mean over benchmarks of U_b / (n_b m_b), ties counted 1/2.

    Benchmarks where either side has no score are left out; None when none is left.
    """
    values = []
    for x, y in zip(_arrays(columns), _arrays(reference), strict=True):
        if x.size and y.size:
            u = stats.mannwhitneyu(x, y, alternative="two-sided").statistic  # U of x
            values.append(float(u) / (x.size * y.size))
    return float(np.mean(values)) if values else None


def welch_pvalue(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Two-sided Welch t-test p-value of mean(x) = mean(y); None when a side has < 2 values.

    Both sides without spread: p = 1 if the means are equal, else 0 (a certain difference).
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size < 2 or b.size < 2:
        return None
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 1.0 if a[0] == b[0] else 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # near-constant samples
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return p if math.isfinite(p) else 1.0


def pooled_pvalues(
    samples: Sequence[Sequence[float]],
    reference: Sequence[float],
    pool: Sequence[Sequence[float]],
) -> list[float | None]:
    """p-values of mean(x) = mean(reference) for each x in ``samples``, pooled variance.

    ``pool``: the groups (per-seed averages of every distinct row, the reference included) whose
    within-group variance is pooled: ``s² = Σ_g Σ_i (x_gi - x̄_g)² / Σ_g (n_g - 1)``; then
    ``t = (x̄ - ȳ) / (s sqrt(1/n + 1/m))`` on ``Σ_g (n_g - 1)`` degrees of freedom. None for a
    sample (or reference) with fewer than 2 values, or when nothing can be pooled.
    """
    groups = [np.asarray(g, dtype=float) for g in pool if len(g) >= 2]
    df = sum(g.size - 1 for g in groups)
    ref = np.asarray(reference, dtype=float)
    if df == 0 or ref.size < 2:
        return [None] * len(samples)
    s2 = sum(float(np.sum((g - g.mean()) ** 2)) for g in groups) / df
    out: list[float | None] = []
    for sample in samples:
        x = np.asarray(sample, dtype=float)
        if x.size < 2:
            out.append(None)
            continue
        diff = float(x.mean() - ref.mean())
        se = math.sqrt(s2 * (1 / x.size + 1 / ref.size))
        if se == 0:
            out.append(1.0 if diff == 0 else 0.0)
            continue
        out.append(float(2 * stats.t.sf(abs(diff) / se, df)))
    return out


def adjust(pvalues: Sequence[float], method: str = "bh") -> np.ndarray:
    """Multiplicity-adjusted p-values over one family of comparisons (``bh`` or ``holm``)."""
    p = np.asarray(pvalues, dtype=float)
    if p.size == 0:
        return p
    if method == "bh":
        return stats.false_discovery_control(p, method="bh")
    if method == "holm":  # scipy has no Holm: step-down max((m - i) p_(i)), capped at 1
        order = np.argsort(p)
        stepped = np.maximum.accumulate((p.size - np.arange(p.size)) * p[order])
        out = np.empty_like(p)
        out[order] = np.minimum(stepped, 1.0)
        return out
    raise ValueError(f"unknown correction {method!r}; allowed: {', '.join(CORRECTIONS)}")


def separated_ranks(
    means: Sequence[float | None], intervals: Sequence[Interval | None]
) -> list[int | None]:
    """Top-3 ranks that the data support; None elsewhere.

    Rank = competition rank by mean, highest first (1, 1, 3). An entry of rank r <= 3 keeps its
    rank only if its CI lies entirely above the CI of every entry ranked 4th or lower (and at
    least one such entry exists); entries without a mean or a CI are never ranked.
    """
    idx = [i for i, (m, ci) in enumerate(zip(means, intervals, strict=True)) if m is not None]
    rank = {i: 1 + sum(means[j] > means[i] for j in idx) for i in idx}  # type: ignore[operator]
    rest = [intervals[i] for i in idx if rank[i] > 3]
    out: list[int | None] = [None] * len(means)
    if not rest or any(ci is None for ci in rest):
        return out
    ceiling = max(ci[1] for ci in rest)  # type: ignore[index]
    for i in idx:
        ci = intervals[i]
        if rank[i] <= 3 and ci is not None and ci[0] > ceiling:
            out[i] = rank[i]
    return out
