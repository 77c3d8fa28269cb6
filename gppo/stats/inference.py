"""Interval estimates and tests of Table 1, after Agarwal et al. (NeurIPS 2021, "Deep RL at the
Edge of the Statistical Precipice", rliable), built on ``scipy.stats``.

Data of one cell: ``columns``, a sequence with one 1-D array per benchmark, the scores of that
benchmark over the cell's seeds (shape ``(n_seeds_b,)``; percent or fractions, any scale).

- :func:`mean_ci`: Student t CI of a mean over seeds (shape ``(n_seeds,)``): one benchmark's
  scores, or a cell's per-seed averages over benchmarks (the Avg. column);
- :func:`delta_ci`: the t CI of ``mean(x) - mean(y)``, x and y the per-seed averages of a cell and
  of the reference (Δ of Table 1), with the variance of the table's test (pooled, or Welch's);
- :func:`run_bootstrap_interval`: the CI of any statistic of run x benchmark matrices (shape
  ``(n_runs_i, n_bench)``), whole runs (rows) resampled, each matrix independently (the aggregate
  view's Mean, IQM and P(X > Y));
- :func:`strata_mean_ci`: the t CI of a mean over independent strata of their means (an
  estimator's mean over its cells, benchmarks/sensitivity.py), Welch-Satterthwaite's df; not for
  benchmarks scored by the same runs, whose scores are correlated through the run;
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
- :func:`separated_ranks`: ranks 1-3 where the data separate them (entries not separated
  share a rank).

One training run (seed) is scored on every benchmark, so a cell's benchmark scores are
correlated through the run: the run is the unit that Table 1 resamples. Resampling seeds within
each benchmark instead would break that correlation and give intervals far too narrow.

Table 1's intervals are t intervals, not bootstraps: a seed is costly, so a cell has 3 to 5, and a
percentile bootstrap of a mean over n runs is narrower than the t interval by the factor
``sqrt((n-1)/n) · z / t_{n-1}`` (0.37 at n = 3, 0.63 at n = 5): its "95%" covers about 75% at
n = 3, and ranks drawn from such intervals would separate what the data do not. The aggregate
view's IQM and P(X > Y) have no closed form and keep rliable's bootstrap over runs (with few runs
those intervals are too narrow in the same way; their figures say so). Every bootstrap uses a
fixed generator seed, so a table is reproducible byte for byte.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats

from gppo.objectives import defaults

CONFIDENCE = 0.95
ALPHA = 0.05
N_RESAMPLES = 2000
SEED = 0
CORRECTIONS = {"bh": "Benjamini-Hochberg", "holm": "Holm"}
TESTS = {
    "welch": (
        "two-sided Welch t-test: the row's and the reference's own seed variances,"
        " Welch-Satterthwaite degrees of freedom"
    ),
    "pooled": (
        "two-sided t-test with the within-cell variance pooled over the table's trained rows "
        "(the base model and duplicate rows left out)"
    ),
}
#: Table 1's test and the adaptive rule's by default (docs/statistics.md argues the choice)
DEFAULT_TEST = defaults.TEST
Interval = tuple[float, float]
#: a statistic of the samples, vectorised along the last axis (scipy.stats.bootstrap's form)
Statistic = Callable[..., Any]

_RNG_KW = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"


def _arrays(columns: Sequence[Sequence[float]]) -> list[np.ndarray]:
    return [np.asarray(c, dtype=float) for c in columns]


def _percentile_bootstrap(
    samples: Sequence[np.ndarray], statistic: Statistic, confidence: float, seed: int
) -> Interval:
    """``scipy.stats.bootstrap``'s percentile CI, the samples resampled independently
    (``N_RESAMPLES``, vectorised, seeded)."""
    rng: dict[str, Any] = {_RNG_KW: np.random.default_rng(seed)}  # rng= or random_state=
    res = stats.bootstrap(
        tuple(samples),
        statistic,
        n_resamples=N_RESAMPLES,
        confidence_level=confidence,
        method="percentile",
        paired=False,
        vectorized=True,
        **rng,
    )
    ci = res.confidence_interval
    return float(ci.low), float(ci.high)


def run_bootstrap_interval(
    runs: Sequence[np.ndarray],
    statistic: Statistic,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval:
    """Percentile bootstrap CI of ``statistic(*runs)``, whole runs resampled.

    ``runs``: matrices of shape ``(n_i, n_bench)``, one row per run (seed); each matrix's rows are
    resampled with replacement, independently of the other matrices, and a row keeps its
    benchmark scores together (the benchmarks of one run are correlated through the run).
    ``statistic`` takes arrays of shape ``(..., n_i, n_bench)`` and reduces the last two axes.
    The point itself when no matrix has two different rows.
    """
    mats = [np.asarray(m, dtype=float) for m in runs]
    if all(np.all(m == m[:1]) for m in mats):
        point = float(statistic(*mats))
        return point, point

    def on_indices(*idx: np.ndarray, axis: int = -1) -> np.ndarray:
        return statistic(*(m[np.asarray(i, dtype=int)] for m, i in zip(mats, idx, strict=True)))

    indices = [np.arange(len(m)) for m in mats]
    return _percentile_bootstrap(indices, on_indices, confidence, seed)


def _t_interval(diff: float, se: float, df: float, confidence: float) -> Interval:
    """``diff ± t_{df, (1+confidence)/2} · se`` (``scipy.stats.t.interval``); the point when
    ``se`` is 0 (no spread: identical seeds are not replicates, nothing to widen)."""
    if se == 0 or not math.isfinite(se):
        return diff, diff
    lo, hi = stats.t.interval(confidence, df, loc=diff, scale=se)
    return float(lo), float(hi)


def mean_ci(x: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> Interval | None:
    """Student t CI of the mean of ``x`` (shape ``(n,)``): ``x̄ ± t_{n-1} s / sqrt(n)``;
    None for n < 2.

    Table 1's Avg. column: ``x`` = the per-seed averages ``a_s = (1/B) Σ_b x_sb`` of the seeds
    with every benchmark (the run is the unit); a benchmark column: that benchmark's per-seed
    scores. Not a bootstrap: with 3 seeds a percentile bootstrap of the mean spans about
    ``±1.96 · 0.82 s / sqrt(3)`` against the t interval's ``±4.30 s / sqrt(3)`` and covers
    the true mean in about 3 draws of 4, not 19 of 20 (``tests/stats/test_inference.py``)."""
    arr = np.asarray(x, dtype=float)
    if arr.size < 2:
        return None
    return _t_interval(float(arr.mean()), float(stats.sem(arr)), arr.size - 1, confidence)


def pooled_variance(pool: Sequence[Sequence[float]]) -> tuple[float, int]:
    """``(s², df)``: the within-group variance pooled over the groups of ``pool`` with 2 or
    more values, ``s² = Σ_g Σ_i (x_gi - x̄_g)² / df``, ``df = Σ_g (n_g - 1)`` (one-way ANOVA's
    mean square error); ``(nan, 0)`` when no group has 2 values."""
    groups = [np.asarray(g, dtype=float) for g in pool if len(g) >= 2]
    df = sum(g.size - 1 for g in groups)
    if df == 0:
        return math.nan, 0
    return sum(float(np.sum((g - g.mean()) ** 2)) for g in groups) / df, df


def delta_ci(
    x: Sequence[float],
    y: Sequence[float],
    confidence: float = CONFIDENCE,
    pool: Sequence[Sequence[float]] | None = None,
) -> Interval | None:
    """t CI of ``mean(x) - mean(y)``, the interval that matches Table 1's test.

    Table 1's Δ: ``x``, ``y`` (shapes ``(n,)``, ``(m,)``) = the per-seed averages over benchmarks
    of the cell and of the reference; None if n or m < 2. ``pool`` given (the pooled test): the
    standard error ``s sqrt(1/n + 1/m)`` with ``s²`` pooled over ``pool``'s groups on their
    degrees of freedom (:func:`pooled_variance`), so the interval excludes 0 exactly where
    :func:`pooled_pvalues` is below ``1 - confidence`` before the correction. ``pool`` None:
    Welch's interval (``scipy.stats.ttest_ind(equal_var=False).confidence_interval``).
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size < 2 or b.size < 2:
        return None
    diff = float(a.mean() - b.mean())
    if pool is not None:
        s2, df = pooled_variance(pool)
        if df == 0:
            return None
        return _t_interval(diff, math.sqrt(s2 * (1 / a.size + 1 / b.size)), df, confidence)
    if np.all(a == a[0]) and np.all(b == b[0]):
        return diff, diff
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # near-constant samples
        ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(confidence)
    return float(ci.low), float(ci.high)


def strata_mean_ci(
    columns: Sequence[Sequence[float]], confidence: float = CONFIDENCE
) -> Interval | None:
    """Student t CI of the mean over independent strata of their means, ``(1/K) Σ_k x̄_k``.

    ``columns``: K arrays of shape ``(n_k,)``, e.g. the cells of one estimator, each over its
    seeds. ``se = sqrt(Σ_k v_k) / K`` with ``v_k = s_k² / n_k``, and Welch-Satterthwaite's
    ``df = (Σ_k v_k)² / Σ_k v_k² / (n_k - 1)`` (``K = 1``: :func:`mean_ci`). Independent strata
    only (different cells' runs; not benchmarks scored by the same runs). None if any
    ``n_k < 2``; the point where no stratum has spread."""
    cols = _arrays(columns)
    if not cols or min(c.size for c in cols) < 2:
        return None
    point = float(np.mean([c.mean() for c in cols]))
    v = np.array([c.var(ddof=1) / c.size for c in cols])
    if not v.any():
        return point, point
    df = v.sum() ** 2 / sum(vk**2 / (c.size - 1) for vk, c in zip(v, cols, strict=True))
    return _t_interval(point, math.sqrt(v.sum()) / len(cols), float(df), confidence)


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

    None also when neither side has any spread (every seed the same value on both sides):
    identical seeds are not replicates, so there is no variance to test against.
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size < 2 or b.size < 2:
        return None
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return None  # no spread: identical seeds are not replicates
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
    sample (or reference) with fewer than 2 values, or when nothing can be pooled, or when the
    pooled variance is 0 (identical seeds are not replicates).
    """
    s2, df = pooled_variance(pool)
    ref = np.asarray(reference, dtype=float)
    if df == 0 or ref.size < 2:
        return [None] * len(samples)
    out: list[float | None] = []
    for sample in samples:
        x = np.asarray(sample, dtype=float)
        if x.size < 2:
            out.append(None)
            continue
        diff = float(x.mean() - ref.mean())
        se = math.sqrt(s2 * (1 / x.size + 1 / ref.size))
        if se == 0:  # no spread anywhere: identical seeds are not replicates
            out.append(None)
            continue
        out.append(float(2 * stats.t.sf(abs(diff) / se, df)))
    return out


def adjust(pvalues: Sequence[float] | np.ndarray, method: str = "bh") -> np.ndarray:
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
    """Ranks 1-3 that the data support; None elsewhere. Entries the data do not separate share a
    rank (as ties do), so two entries get different marks only where the data separate them.

    Order the entries with a mean by mean, highest first (positions 1..n). A *cut* after position
    k (``means_(k) > means_(k+1)``) is where the data separate the top k from the rest: every CI
    of the top k lies entirely above every CI of the rest, ``min_{i<=k} lo_i > max_{j>k} hi_j``.
    An entry's rank is 1 + the number of entries above the last cut before it (competition
    ranking of the groups between cuts: 1, 1, 3); it is kept only if a cut lies at or below it
    (it is separated from every entry below it) and the rank is at most 3. Entries without a
    mean are never ranked; one entry with a mean but no CI (one seed) admits no cut at all.
    """
    idx = sorted(
        (i for i, m in enumerate(means) if m is not None),
        key=lambda i: -means[i],  # type: ignore[operator]  # idx: only means not None
    )
    out: list[int | None] = [None] * len(means)
    cis = [intervals[i] for i in idx]
    if len(idx) < 2 or any(ci is None for ci in cis):
        return out
    lows = np.minimum.accumulate([ci[0] for ci in cis])  # type: ignore[index]  # no None: checked above
    highs = np.maximum.accumulate([ci[1] for ci in cis][::-1])[::-1]  # type: ignore[index]  # as above
    cuts = [
        k
        for k in range(1, len(idx))
        if means[idx[k - 1]] > means[idx[k]] and lows[k - 1] > highs[k]  # type: ignore[operator]  # idx: not None
    ]
    if not cuts:
        return out
    for pos, i in enumerate(idx, start=1):
        if pos > cuts[-1]:
            break  # below the last cut: not separated from the entries under it
        rank = 1 + max((k for k in cuts if k < pos), default=0)
        if rank <= 3:
            out[i] = rank
    return out
