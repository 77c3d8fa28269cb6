"""gppo/stats/inference.py: properties (hypothesis), an independent PI, and null calibration."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from gppo.stats import inference as S

score = st.floats(0, 100, allow_nan=False).map(lambda v: round(v, 1))  # ties happen
column = st.lists(score, min_size=1, max_size=6)
columns = st.lists(column, min_size=1, max_size=4)
FAST = settings(max_examples=40, deadline=None)


def _pi_by_pairs(xs: list[list[float]], ys: list[list[float]]) -> float:
    """P(X > Y) from its definition: every pair of seeds, ties 1/2, mean over benchmarks."""
    per = []
    for x, y in zip(xs, ys, strict=True):
        wins = sum((a > b) + 0.5 * (a == b) for a in x for b in y)
        per.append(wins / (len(x) * len(y)))
    return sum(per) / len(per)


@FAST
@given(st.data())
def test_probability_of_improvement_matches_pair_counting_and_is_antisymmetric(data):
    xs = data.draw(columns)
    ys = [data.draw(column) for _ in xs]
    pi = S.probability_of_improvement(xs, ys)
    assert pi == pytest.approx(_pi_by_pairs(xs, ys), abs=1e-12)
    assert pi + S.probability_of_improvement(ys, xs) == pytest.approx(1.0)
    assert S.probability_of_improvement(xs, xs) == pytest.approx(0.5)


@FAST
@given(st.lists(score, min_size=2, max_size=8))
def test_mean_ci_is_the_t_interval_of_the_mean(x):
    """x̄ ± t_{n-1} s / sqrt(n), written out here from the textbook formula."""
    lo, hi = S.mean_ci(x)
    n, mean, sd = len(x), float(np.mean(x)), float(np.std(x, ddof=1))
    half = stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n)
    assert (lo, hi) == pytest.approx((mean - half, mean + half), abs=1e-9)
    wider = S.mean_ci(x, confidence=0.99)
    assert wider[0] <= lo + 1e-12 and hi <= wider[1] + 1e-12
    assert S.mean_ci(x[:1]) is None


@pytest.mark.parametrize("n", [2, 3, 5])
def test_mean_ci_covers_the_true_mean_19_times_in_20(n):
    """3,000 draws of n normal seeds: the 95% interval covers the true mean 93.5-96.5% of the
    time (a percentile bootstrap of the same draws covered 50%, 74% and 82% of 600)."""
    rng = np.random.default_rng(n)
    draws = rng.normal(40.0, 2.0, (3000, n))
    covered = [lo <= 40.0 <= hi for lo, hi in map(S.mean_ci, draws)]
    assert 0.935 <= np.mean(covered) <= 0.965


def test_delta_ci_uses_the_tests_variance():
    """Pooled: the interval excludes 0 exactly where the uncorrected pooled test rejects at
    5%; Welch: scipy's Welch interval; both cover the true difference 19 times in 20."""
    rng = np.random.default_rng(7)
    hits = {"pooled": 0, "welch": 0}
    reps = 2000
    for _ in range(reps):
        ref, *rows = rng.normal(40.0, 2.0, (4, 3))
        x = rows[0] + 1.5
        pool = [ref, *rows]
        lo, hi = S.delta_ci(x, ref, pool=[x, *pool[1:], ref])
        (p,) = S.pooled_pvalues([x], ref, [x, *pool[1:], ref])
        assert (lo > 0 or hi < 0) == (p < 0.05)
        hits["pooled"] += lo <= 1.5 <= hi
        wlo, whi = S.delta_ci(x, ref)
        assert (wlo > 0 or whi < 0) == (S.welch_pvalue(x, ref) < 0.05)
        hits["welch"] += wlo <= 1.5 <= whi
    for test, hit in hits.items():
        assert 0.93 <= hit / reps <= 0.97, test
    assert S.delta_ci([1.0, 2.0], [3.0]) is None
    assert S.delta_ci([1.0, 2.0], [3.0, 4.0], pool=[[5.0]]) is None  # nothing to pool
    assert S.delta_ci([2.0, 2.0], [1.0, 1.0]) == (1.0, 1.0)  # no spread: the point


@FAST
@given(st.lists(st.lists(score, min_size=2, max_size=5), min_size=1, max_size=4), st.data())
def test_strata_mean_ci_is_welchs_t_interval_and_moves_with_the_data(xs, data):
    """(1/K) Σ x̄_k ± t_df · sqrt(Σ s_k²/n_k) / K, df by Welch-Satterthwaite, written out here;
    one stratum is mean_ci; a shift of every score shifts the interval."""
    lo, hi = S.strata_mean_ci(xs)
    point = np.mean([np.mean(c) for c in xs])
    v = np.array([np.var(c, ddof=1) / len(c) for c in xs])
    if v.sum() == 0:
        assert (lo, hi) == pytest.approx((point, point))
        return
    df = v.sum() ** 2 / sum(vk**2 / (len(c) - 1) for vk, c in zip(v, xs, strict=True))
    half = stats.t.ppf(0.975, df) * np.sqrt(v.sum()) / len(xs)
    assert (lo, hi) == pytest.approx((point - half, point + half), abs=1e-6)
    if len(xs) == 1:
        assert (lo, hi) == pytest.approx(S.mean_ci(xs[0]), abs=1e-9)
    shift = data.draw(st.floats(-20, 20))
    slo, shi = S.strata_mean_ci([[v + shift for v in c] for c in xs])
    assert (slo, shi) == pytest.approx((lo + shift, hi + shift), abs=1e-6)
    assert S.strata_mean_ci([*xs, [1.0]]) is None


def test_strata_mean_ci_covers_the_true_mean_19_times_in_20():
    """3,000 draws of 4 strata of 3 seeds each (seed sds 1, 2, 2, 3): the 95% interval covers
    the mean of the strata's true means 93.5-96.5% of the time."""
    rng = np.random.default_rng(3)
    means, sds = np.array([40.0, 42.0, 44.0, 39.0]), np.array([1.0, 2.0, 2.0, 3.0])
    draws = rng.normal(means[:, None], sds[:, None], (3000, 4, 3))
    covered = [lo <= means.mean() <= hi for lo, hi in map(S.strata_mean_ci, draws)]
    assert 0.935 <= np.mean(covered) <= 0.965


@FAST
@given(st.lists(st.floats(0, 1), min_size=1, max_size=20))
def test_corrections_never_lower_a_p_value_and_keep_its_order(p):
    for method in S.CORRECTIONS:
        adj = S.adjust(p, method)
        assert np.all(adj >= np.asarray(p) - 1e-12) and np.all(adj <= 1)
        order = np.argsort(p, kind="stable")
        assert np.all(np.diff(adj[order]) >= -1e-12)
    assert np.all(S.adjust(p, "holm") >= S.adjust(p, "bh") - 1e-12)  # Holm is the stricter one


@FAST
@given(st.lists(st.tuples(score, st.floats(0, 10)), min_size=1, max_size=10))
def test_separated_ranks_never_distinguish_entries_the_data_do_not_separate(items):
    means = [m for m, _ in items]
    cis = [(m - w, m + w) for m, w in items]
    ranks = S.separated_ranks(means, cis)
    unmarked = 4  # below every mark
    for i, r in enumerate(ranks):
        if r is None:
            continue
        assert r <= 3 and r <= 1 + sum(m > means[i] for m in means)  # never above its rank
        for j, q in enumerate(ranks):  # a better mark: the data separate the two entries
            if (q or unmarked) > r:
                assert cis[i][0] > cis[j][1], (i, j, ranks)


def test_separated_ranks_examples():
    means = [50, 49, 40, 39, 20]
    narrow = [(m - 1, m + 1) for m in means]
    # 50 and 49 overlap: they share rank 1; 40 and 39 overlap: they share rank 3 (1, 1, 3)
    assert S.separated_ranks(means, narrow) == [1, 1, 3, 3, None]
    apart = [60, 50, 40, 30]
    assert S.separated_ranks(apart, [(m - 1, m + 1) for m in apart]) == [1, 2, 3, None]
    # 1st above everything, 2nd overlaps 3rd, 3rd overlaps 4th: only the 1st is separated
    chain = [(59, 61), (45, 52), (38, 46), (30, 40)]
    assert S.separated_ranks(apart, chain) == [1, None, None, None]
    wide = [(m - 30, m + 30) for m in means]
    assert S.separated_ranks(means, wide) == [None] * 5  # nothing separates
    assert S.separated_ranks(means, [None] * 5) == [None] * 5  # one seed: no CI, no highlight


def _percentile_bootstrap(*samples, statistic) -> tuple[float, float]:
    ci = stats.bootstrap(
        samples, statistic, method="percentile", n_resamples=S.N_RESAMPLES, rng=S.SEED
    ).confidence_interval
    return float(ci.low), float(ci.high)


@FAST
@given(st.data())
def test_run_bootstrap_resamples_whole_runs(data):
    """Mean over a (runs x benchmarks) matrix: its CI is the bootstrap of the run averages."""
    n, b = data.draw(st.integers(2, 6)), data.draw(st.integers(1, 4))
    m = np.array(
        data.draw(st.lists(st.lists(score, min_size=b, max_size=b), min_size=n, max_size=n))
    )
    got = S.run_bootstrap_interval([m], lambda x: np.mean(x, axis=(-2, -1)))
    avgs = m.mean(axis=1)
    if np.ptp(avgs) > 0:
        assert got == pytest.approx(_percentile_bootstrap(avgs, statistic=np.mean), abs=1e-9)
    assert got[0] - 1e-9 <= m.mean() <= got[1] + 1e-9


def test_welch_edge_cases():
    assert S.welch_pvalue([1.0], [1.0, 2.0]) is None
    # no spread on either side: identical seeds are not replicates, so no test (not p = 0 or 1)
    assert S.welch_pvalue([1.0, 1.0], [1.0, 1.0]) is None
    assert S.welch_pvalue([1.0, 1.0], [2.0, 2.0]) is None
    assert S.pooled_pvalues([[2.0, 2.0]], [1.0, 1.0], [[2.0, 2.0], [1.0, 1.0]]) == [None]
    with pytest.raises(ValueError, match="unknown correction"):
        S.adjust([0.1], "bonferroni")


def _family(rng: np.random.Generator, effects: list[float], seeds: int, bench: int = 4):
    """(reference, rows) of per-seed averages, scores like the testbed's.

    Per run: a run effect shared by its benchmarks (sd 1.5 points) plus per-benchmark noise
    (sd 2 points) around benchmark levels 20-50, plus the row's effect (points).
    """
    level = rng.uniform(20, 50, bench)

    def avgs(effect: float) -> np.ndarray:
        run = rng.normal(0, 1.5, (seeds, 1))
        return (level + effect + run + rng.normal(0, 2.0, (seeds, bench))).mean(axis=1)

    return avgs(0.0), [avgs(e) for e in effects]


def _pvalues(test: str, ref: np.ndarray, rows: list[np.ndarray]) -> list[float]:
    if test == "welch":
        return [S.welch_pvalue(x, ref) for x in rows]
    return S.pooled_pvalues(rows, ref, [ref, *rows])


@pytest.mark.parametrize("test", ["pooled", "welch"])
def test_null_calibration_false_marks_within_the_stated_level(test):
    """16 null cells, 3 seeds, 4 benchmarks, 250 (Welch: 120) tables: marks at most alpha."""
    rng = np.random.default_rng(20211206)
    reps, cells = (250 if test == "pooled" else 120), 16
    raw = 0
    marked = dict.fromkeys(S.CORRECTIONS, 0)
    tables_with_a_mark = dict.fromkeys(S.CORRECTIONS, 0)
    for _ in range(reps):
        p = _pvalues(test, *_family(rng, [0.0] * cells, 3))
        raw += sum(v <= S.ALPHA for v in p)
        for method in S.CORRECTIONS:
            adj = S.adjust(p, method)
            marked[method] += int(np.sum(adj <= S.ALPHA))
            tables_with_a_mark[method] += bool(np.any(adj <= S.ALPHA))
    n = reps * cells
    se = (S.ALPHA * (1 - S.ALPHA) / n) ** 0.5
    # the uncorrected test is calibrated (not trivially conservative): rate ~ alpha
    assert abs(raw / n - S.ALPHA) < 4 * se + 0.01
    for method in S.CORRECTIONS:  # per null cell, and per table (all null: FWER = FDR)
        assert marked[method] / n <= S.ALPHA
        assert tables_with_a_mark[method] / reps <= S.ALPHA + 3 * (0.05 * 0.95 / reps) ** 0.5


@pytest.mark.parametrize(
    ("test", "seeds", "at_least"), [("pooled", 3, 0.55), ("pooled", 5, 0.9), ("welch", 5, 0.6)]
)
def test_power_true_effects_are_marked(test, seeds, at_least):
    """3 rows at +5 points (per-seed-average sd ~1.8) among 13 null rows, BH, 60 tables."""
    rng = np.random.default_rng(7)
    hits = false = 0
    effects = [5.0] * 3 + [0.0] * 13
    for _ in range(60):
        marks = S.adjust(_pvalues(test, *_family(rng, effects, seeds)), "bh") <= S.ALPHA
        hits += int(marks[:3].sum())
        false += int(marks[3:].sum())
    assert hits / (60 * 3) >= at_least
    assert false / (60 * 13) <= S.ALPHA


def test_pooled_pvalues_equal_the_two_sample_t_test_for_two_groups():
    x, y = [1.0, 2.0, 4.0], [2.0, 3.5, 5.0, 6.0]
    (p,) = S.pooled_pvalues([x], y, [x, y])
    from scipy import stats

    assert p == pytest.approx(stats.ttest_ind(x, y).pvalue)
    assert S.pooled_pvalues([[1.0]], y, [y]) == [None]
