"""The exploration study's estimator contrasts (gppo/analysis/tables/exploration_contrasts.py): the stratified
difference is Welch's test for one stratum, the mean of the strata's differences for several, and
the tables keep every level, estimator and divergence apart."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from gppo.analysis.tables.exploration_contrasts import (
    contrasts,
    dose_response_figure,
    gains,
    mechanism,
    stratified_difference,
)
from gppo.analysis.vocabulary import EST_COLORS, EST_ORDER
from gppo.objectives.buckets import MU_BUCKETS

samples = st.lists(st.floats(-50, 50, allow_nan=False), min_size=2, max_size=8).filter(
    lambda xs: np.ptp(xs) > 1e-3
)


@settings(max_examples=60, deadline=None)
@given(samples, samples)
def test_one_stratum_is_welchs_test(a, b) -> None:
    diff, lo, hi, p = stratified_difference([a], [b])
    welch = stats.ttest_ind(a, b, equal_var=False)
    ci = welch.confidence_interval(0.95)
    assert np.isclose(diff, np.mean(a) - np.mean(b))
    assert np.isclose(p, welch.pvalue, atol=1e-9)
    assert np.isclose(lo, ci.low) and np.isclose(hi, ci.high)


@settings(max_examples=60, deadline=None)
@given(samples, samples, samples, samples, st.floats(-20, 20))
def test_strata_average_their_differences_and_a_shift_moves_only_the_point(
    a1, b1, a2, b2, c
) -> None:
    diff, lo, hi, p = stratified_difference([a1, a2], [b1, b2])
    want = ((np.mean(a1) - np.mean(b1)) + (np.mean(a2) - np.mean(b2))) / 2
    assert np.isclose(diff, want)
    assert lo <= diff <= hi and 0 <= p <= 1
    shifted = stratified_difference([[x + c for x in a1], [x + c for x in a2]], [b1, b2])
    assert np.isclose(shifted[0], diff + c)
    assert np.isclose(shifted[2] - shifted[1], hi - lo)  # same width: only the point moves


def _runs() -> pd.DataFrame:
    """Two levels x two divergences x three estimators x 4 seeds; at level 0.01 Atomic is 5 points
    above MC in both divergences, at 0.25 every estimator is the same up to seed noise."""
    rng = np.random.default_rng(0)
    rows = []
    for point, atomic_shift in ((0.25, 0.0), (0.01, 5.0)):
        for div in ("tv", "kl"):
            for est in ("mc", "atomic", "binary"):
                for seed in range(4):
                    final = 20 + (atomic_shift if est == "atomic" else 0.0) + rng.normal(0, 0.5)
                    row = {"point": point, "divergence": div, "estimator": est, "seed": seed,
                           "base": 10.0, "final": final, "gain": final - 10.0,
                           "p_answer_0": 0.1, "rise": 1.5 if est == "atomic" else 1.2}  # fmt: skip
                    row.update({f"clip_high/{b[0]}": 0.01 for b in MU_BUCKETS})
                    rows.append(row)
    return pd.DataFrame(rows)


def test_contrasts_find_the_planted_effect_and_only_it() -> None:
    table = contrasts(_runs()).set_index(["point", "contrast"])
    assert list(table.index.get_level_values("point")) == [0.25, 0.25, 0.01, 0.01]
    planted = table.loc[(0.01, "atomic - mc")]
    assert 4 < planted["diff"] < 6 and planted["lo"] > 0 and planted["p_holm"] < 0.05
    for key in [(0.25, "atomic - mc"), (0.25, "binary - mc"), (0.01, "binary - mc")]:
        assert table.loc[key, "lo"] < 0 < table.loc[key, "hi"], key
    assert (table["p_holm"] >= table["p"]).all()


def test_contrasts_and_their_figure_follow_table_1s_estimators() -> None:
    """One estimator order, Table 1's (MC, Binary, Atomic), and Figure 2's colours: the contrasts
    at a level list the estimators as Table 1's rows do, the dose-response figure draws each
    series in its estimator's Figure 2 colour and labels the base's avg@k with the k given."""
    runs = _runs()
    at = contrasts(runs).query("point == 0.25")["contrast"].tolist()
    assert at == [f"{e} - mc" for e in EST_ORDER if e != "mc"] == ["binary - mc", "atomic - mc"]
    fig = dose_response_figure(gains(runs), "level", {0.25: 30.0, 0.01: 3.0}, k=4)
    ax = fig.axes[0]
    drawn = {c.get_label(): c.lines[0].get_color() for c in ax.containers}
    assert list(drawn) == [f"{d}/{e}" for d in ("tv", "kl") for e in EST_ORDER]
    assert all(colour == EST_COLORS[label.split("/")[1]] for label, colour in drawn.items())
    assert ax.get_xlabel().startswith("base avg@4 (%)")


def test_gains_and_mechanism_keep_cells_apart() -> None:
    runs = _runs()
    g = gains(runs)
    assert len(g) == 2 * 2 * 3 and (g["n"] == 4).all()
    top = g[(g["point"] == 0.01) & (g["estimator"] == "atomic")]["mean"]
    assert (top > 13).all()
    m = mechanism(runs)
    assert list(m["point"]) == [0.25] * 3 + [0.01] * 3
    assert list(m["estimator"].astype(str)) == list(EST_ORDER) * 2  # Table 1's order
    assert np.allclose(m[m["estimator"] == "atomic"]["rise"], 1.5)
