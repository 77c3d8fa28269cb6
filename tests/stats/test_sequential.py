"""gppo/stats/sequential.py and spending.py: the adaptive-seeds rule (issue 48): published
bounds, properties of the rule (hypothesis), and the A/A error by simulation."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from gppo.stats import spending
from gppo.stats.sequential import SEPARATED, Design, decide

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from sequential_sim import normal_noise, simulate  # a benchmark tool, not installed

FAST = settings(max_examples=40, deadline=None)
score = st.floats(30, 60, allow_nan=False).map(lambda v: round(v, 2))


def test_obrien_fleming_type_bounds_match_the_published_ones():
    # Lan-DeMets O'Brien-Fleming-type, 5 equally spaced looks, two-sided 0.05 (gsDesign sfLDOF)
    got = spending.boundaries(0.05, (0.2, 0.4, 0.6, 0.8, 1.0), True, "obf")
    assert got == pytest.approx((4.8769, 3.3570, 2.6803, 2.2898, 2.0310), abs=2e-4)


@pytest.mark.parametrize("kind", sorted(spending.SPENDING))
def test_bounds_hold_alpha_on_brownian_paths(kind):
    """An independent check of the recursive integration: z paths at 2..8 seeds of 8."""
    fractions = tuple(n / 8 for n in range(2, 9))
    c = np.array(spending.boundaries(0.05, fractions, True, kind))
    rng = np.random.default_rng(1)
    steps = np.diff((0.0, *fractions))
    w = np.cumsum(rng.standard_normal((200_000, len(steps))) * np.sqrt(steps), axis=1)
    err = (np.abs(w / np.sqrt(fractions)) >= c).any(axis=1).mean()
    assert err == pytest.approx(0.05, abs=0.0025)  # 5 standard errors


def _t_paths_error(alpha: float, looks: tuple[int, ...], seed: int) -> float:
    """Share of null paths of a lone pair's pooled t-test (n_j seeds each) rejected at any look
    with the nominal levels of ``alpha``; paths independent of the calibration's."""
    rng = np.random.default_rng(seed)
    counts = np.asarray(looks)
    x = rng.standard_normal((2, 100_000, counts[-1]))
    s1, s2 = np.cumsum(x, -1)[..., counts - 1], np.cumsum(x**2, -1)[..., counts - 1]
    df = 2 * (counts - 1)
    from scipy import stats

    t = (s1[0] - s1[1]) / counts / np.sqrt((s2 - s1**2 / counts).sum(0) / df * 2 / counts)
    levels = spending.nominal_levels(alpha, tuple(counts / counts[-1]), True)
    return float((2 * stats.t.sf(np.abs(t), df) <= np.asarray(levels)).any(axis=1).mean())


def test_small_df_calibration_holds_alpha_where_plain_levels_do_not():
    looks = tuple(range(2, 9))
    calibrated = spending.t_calibrated_alpha(0.05, looks, 2)
    assert calibrated < 0.05
    assert spending.t_calibrated_alpha(0.05, looks, 18) == 0.05  # 18 groups: df 18 at 2 seeds
    assert _t_paths_error(0.05, looks, 7) > 0.053  # df 2..14: the t's add up to more than α
    assert _t_paths_error(calibrated, looks, 7) <= 0.05 + 2 * 0.0007


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_seeds": 1}, "seeds.min"),
        ({"min_seeds": 5, "max_seeds": 4}, "seeds.max"),
        ({"batch": 0}, "seeds.batch"),
        ({"alpha": 0.0}, "seeds.alpha"),
        ({"margin": 0.0}, "seeds.margin"),
        ({"correction": "bh"}, "seeds.correction"),
        ({"spending": "pocock"}, "seeds.spending"),
    ],
)
def test_bad_designs_are_refused_in_one_line_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field) as err:
        Design(**kwargs)
    assert "\n" not in str(err.value)


def _table(ref, rows):
    return {f"r{i}": list(r) for i, r in enumerate(rows)}, list(ref)


seeds = st.lists(score, min_size=2, max_size=8)


@FAST
@given(
    st.lists(score, min_size=3, max_size=3),
    st.lists(score, min_size=3, max_size=3),
    st.floats(0, 15),
    st.floats(0, 15),
    st.sampled_from([1.0, -1.0]),
)
def test_a_larger_effect_never_undoes_a_separation(ref, row, a, b, sign):
    small, large = sorted((a, b))
    other = [45.0, 46.5, 44.0]
    design = Design(3, 8, 1)
    d1 = decide({"x": [v + sign * small for v in row], "o": other}, ref, design).rows["x"]
    d2 = decide({"x": [v + sign * large for v in row], "o": other}, ref, design).rows["x"]
    if d1.status == "separated" and np.sign(d1.delta) == sign:
        assert d2.status == "separated"


@FAST
@given(seeds, st.lists(seeds, min_size=1, max_size=4), st.floats(0.5, 6))
def test_equivalence_needs_the_interval_inside_the_margin(ref, rows, margin):
    table, r = _table(ref, rows)
    out = decide(table, r, Design(2, 8, 1, margin=margin))
    for d in out.rows.values():
        if d.status == "equivalent":
            assert d.interval is not None and -margin < d.interval[0] <= d.interval[1] < margin


@FAST
@given(
    st.lists(score, min_size=6, max_size=6),
    st.lists(st.lists(score, min_size=6, max_size=6), min_size=1, max_size=4),
)
def test_a_row_at_max_is_always_decided_and_nothing_gets_more_seeds(ref, rows):
    table, r = _table(ref, rows)
    out = decide(table, r, Design(2, 6, 1, margin=1.0))
    assert all(d.status != "continue" for d in out.rows.values())
    assert out.done and out.reference_next == 0


@FAST
@given(seeds, st.lists(seeds, min_size=1, max_size=4))
def test_the_rule_is_symmetric_in_sign(ref, rows):
    table, r = _table(ref, rows)
    design = Design(2, 8, 1, margin=2.0)
    out = decide(table, r, design)
    flipped = decide({k: [-v for v in x] for k, x in table.items()}, [-v for v in r], design)
    for k, d in out.rows.items():
        f = flipped.rows[k]
        assert f.status == d.status and f.delta == pytest.approx(-d.delta)
        if d.interval is not None:
            assert f.interval == pytest.approx((-d.interval[1], -d.interval[0]))


@FAST
@given(seeds, st.lists(seeds, min_size=1, max_size=4))
def test_with_bonferroni_a_row_is_separated_exactly_where_its_interval_excludes_zero(ref, rows):
    table, r = _table(ref, rows)
    out = decide(table, r, Design(2, 8, 1, correction="bonferroni"))
    for d in out.rows.values():
        if d.interval is not None:
            assert (d.status == "separated") == (d.interval[0] > 0 or d.interval[1] < 0)


@FAST
@given(seeds, st.lists(seeds, min_size=2, max_size=4), st.floats(-12, 0))
def test_holm_separates_every_row_bonferroni_separates(ref, rows, shift):
    table, r = _table(ref, rows)
    table["r0"] = [v + shift for v in table["r0"]]
    holm = decide(table, r, Design(2, 8, 1)).rows
    bonf = decide(table, r, Design(2, 8, 1, correction="bonferroni")).rows
    for k, d in bonf.items():
        if d.status == "separated":
            assert holm[k].status == "separated"


def test_open_rows_and_the_reference_get_the_next_batch_decided_rows_none():
    ref = [44.0, 46.0]
    others = {f"o{i}": [44.0 + i / 4, 46.0 - i / 8] for i in range(8)}  # pool df 11 at 2 seeds
    rows = {"far": [20.0, 21.0], "near": [45.0, 44.0], "chi2/mc": ref, **others}
    design = Design(2, 8, 2, test="pooled")
    out = decide(rows, ref, design, same_runs={"chi2/mc"})
    assert out.rows["chi2/mc"].status == "equivalent" and out.rows["chi2/mc"].interval == (0.0, 0.0)
    assert out.rows["far"].status == "separated"
    assert out.rows["near"].status == "continue"
    assert out.next_seeds["far"] == 0 and out.next_seeds["near"] == 2
    assert out.next_seeds["chi2/mc"] == 0 and out.reference_next == 2
    done = {k: "futile" for k in [*others, "near"]}
    with pytest.raises(ValueError, match="look 1: the reference has 2 seeds"):
        decide(rows, ref, design, same_runs={"chi2/mc"}, look=1)
    later = decide(rows, ref, design, decided=done, same_runs={"chi2/mc"}, look=0)
    assert later.rows["near"].status == "futile" and later.rows["near"].reason == "earlier"
    assert later.done and later.reference_next == 0


@pytest.mark.parametrize("test", ["welch", "pooled"])
def test_aa_error_is_held_in_simulated_sweeps(test):
    """A/A, 17 rows and a lone pair (df 2 at the first look): any wrong separation in at most
    α of the sweeps, up to 3 binomial standard errors."""
    design = Design(2, 8, 1, test=test)
    for rows, sweeps in ((17, 600), (1, 2000)):
        r = simulate(np.zeros(rows), design, sweeps, np.random.default_rng(rows), normal_noise(2.0))
        err = (r.status == SEPARATED).any(axis=1).mean()
        assert err <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / sweeps)


def test_welch_holds_the_error_where_the_reference_is_noisier_and_pooling_does_not():
    """Issue 58's case: the reference's seed sd 4, the rows' 2, 17 rows, every Δ 0: the pooled
    rule separates some row in about 19% of the sweeps, Welch's (the default) in at most α."""
    effects = np.zeros(17)
    out = {}
    for test in ("welch", "pooled"):
        r = simulate(effects, Design(2, 8, 1, test=test), 1000, np.random.default_rng(58),
                     normal_noise(2.0), ref_noise=normal_noise(4.0))  # fmt: skip
        out[test] = (r.status == SEPARATED).any(axis=1).mean()
    assert out["welch"] <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 1000)
    assert out["pooled"] > 0.12


@FAST
@given(seeds, seeds, st.floats(1, 50))
def test_welch_a_row_does_not_borrow_another_rows_variance(ref, row, spread):
    """Welch's rule: a row's t statistic is scipy's Welch t of its seeds against the
    reference's, and its interval does not move when another row's seeds spread more."""
    quiet = [45.0, 45.5, 44.5]
    noisy = [45.0, 45.0 + spread, 45.0 - spread]
    design = Design(3, 8, 1, test="welch", correction="bonferroni")
    a = decide({"x": row, "o": quiet}, ref, design).rows["x"]
    b = decide({"x": row, "o": noisy}, ref, design).rows["x"]
    assert a.interval == b.interval
    if a.interval is not None:
        welch = stats.ttest_ind(row, ref, equal_var=False)
        centre = (a.interval[0] + a.interval[1]) / 2
        assert centre == pytest.approx(np.mean(row) - np.mean(ref))
        if a.status == "separated":  # a level at most α / 2 (2 rows, Bonferroni)
            assert welch.pvalue <= 0.025 + 1e-9


def test_clear_effects_are_separated_early_and_grid_rows_stop_before_max():
    effects = [-12.0, -8.0, 0.5, -0.5, 0.0]
    design = Design(2, 8, 1, test="pooled")
    r = simulate(effects, design, 300, np.random.default_rng(3), normal_noise(2.0))
    sep = (r.status == SEPARATED).mean(axis=0)
    assert sep[0] == 1.0 and sep[1] > 0.95
    assert r.n[:, 0].mean() < 4  # -12 points (6 se at 2 seeds) needs few seeds
    assert r.runs.mean() < 0.75 * r.fixed_runs
