"""The exploration study's estimator contrasts (gppo/analysis/tables/exploration_contrasts.py): the stratified
difference is Welch's test for one stratum, the mean of the strata's differences for several, and
the tables keep every level, estimator and divergence apart. Two axes (issue 59): the tables list
the levels in the axes' numeric order, the figure has a panel per second axis's value, and the
manipulation check passes the levels where MC clips and gains."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from gppo.analysis.tables.exploration_contrasts import (
    CHECK_BUCKET,
    by_level,
    contrasts,
    dose_response_figure,
    dose_response_panels,
    gains,
    level_order,
    manipulation_check,
    mechanism,
    stratified_difference,
    strongest_level,
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


# --- two axes (issue 59's ppo_epochs x base_temperature): a level is a combination ---------------

EPOCHS, TEMPERATURES = (1, 2, 10), (1.0, 2.6)  # 10: the labels' string order is not the numeric


def _label(epochs: int, temperature: float) -> str:
    return f"ppo_epochs {epochs}, base_temperature {temperature}"


#: the levels in the axes' numeric order (ppo_epochs, then base_temperature)
NUMERIC = [_label(e, t) for e in EPOCHS for t in TEMPERATURES]


def _two_axis_runs(seeds: int = 3) -> pd.DataFrame:
    """ppo_epochs (1, 2, 10) x base_temperature (1.0, 2.6) x TV, KL x MC, Atomic (and Binary at
    ppo_epochs 2, τ 2.6) x ``seeds``; a run's gain is ``epochs + 10 τ`` (+3 for Atomic, +1 for
    KL) plus ±0.1 seed noise; the base is 10 % at τ 1.0, 4 % at τ 2.6. Rows in no level order."""
    rows = []
    for temperature in TEMPERATURES[::-1]:
        for epochs in EPOCHS[::-1]:
            ests = ["mc", "atomic"] + (["binary"] if (epochs, temperature) == (2, 2.6) else [])
            for div in ("tv", "kl"):
                for est in ests:
                    for seed in range(seeds):
                        gain = epochs + 10 * temperature + (3.0 if est == "atomic" else 0.0)
                        gain += (1.0 if div == "kl" else 0.0) + 0.1 * (seed - (seeds - 1) / 2)
                        base = 10.0 if temperature == 1.0 else 4.0
                        row = {"point": _label(epochs, temperature), "ppo_epochs": epochs,
                               "base_temperature": temperature, "divergence": div,
                               "estimator": est, "seed": seed, "base": base,
                               "final": base + gain, "gain": gain, "p_answer_0": 0.1,
                               "rise": 1.5}  # fmt: skip
                        row.update({f"clip_high/{b[0]}": 0.01 for b in MU_BUCKETS})
                        rows.append(row)
    return pd.DataFrame(rows)


def test_two_axis_tables_list_the_levels_in_the_axes_numeric_order() -> None:
    """gains, contrasts, mechanism and by_level group by the label and list the levels by
    ppo_epochs then τ ascending (1, 2, 10), not by the label's text (1, 10, 2)."""
    runs = _two_axis_runs()
    assert level_order(runs["point"]) == NUMERIC
    assert sorted(NUMERIC) != NUMERIC != sorted(NUMERIC, reverse=True)  # the test can tell
    g = gains(runs)
    assert list(dict.fromkeys(g["point"])) == NUMERIC
    top = g.set_index(["point", "divergence", "estimator"]).loc[(_label(10, 2.6), "kl", "atomic")]
    assert np.isclose(top["mean"], 10 + 26 + 3 + 1) and top["n"] == 3
    c = contrasts(runs)
    assert list(dict.fromkeys(c["point"])) == NUMERIC
    assert len(c) == len(NUMERIC) + 1  # atomic - mc at every level, binary - mc at one
    assert np.allclose(c[c["contrast"] == "atomic - mc"]["diff"], 3.0)
    smallest = c["p"].idxmin()  # Holm over the whole table's 7 rows, not a level's 1 or 2
    assert np.isclose(c.at[smallest, "p_holm"], 7 * c.at[smallest, "p"], rtol=1e-9, atol=0)
    for table in (mechanism(runs), by_level(runs, ["gain"])):
        assert list(dict.fromkeys(table["point"])) == NUMERIC


def test_the_two_axis_figure_has_a_panel_per_second_axis_value() -> None:
    """A panel per τ, titled with it and its base's avg@k; in each, the gain against ppo_epochs
    (ticks at 1, 2, 10), a line per estimator in Figure 2's colours, divergences pooled."""
    runs = _two_axis_runs()
    fig = dose_response_panels(runs, ["local.ppo_epochs", "local.base_temperature"], k=8)
    assert len(fig.axes) == len(TEMPERATURES)
    for ax, temperature, base in zip(fig.axes, TEMPERATURES, ("10.0", "4.0"), strict=True):
        assert ax.get_title() == f"base_temperature {temperature}: base avg@8 {base} %"
        assert list(ax.get_xticks()) == list(EPOCHS)
        drawn = {c.get_label(): c.lines[0] for c in ax.containers}
        want = ["mc", "binary", "atomic"] if temperature == 2.6 else ["mc", "atomic"]
        assert list(drawn) == want
        assert all(line.get_color() == EST_COLORS[est] for est, line in drawn.items())
        mc = drawn["mc"]
        assert np.allclose(mc.get_xdata(), EPOCHS, atol=0.5)  # nudged, at the values
        assert np.allclose(mc.get_ydata(), [e + 10 * temperature + 0.5 for e in EPOCHS])
    assert len(fig.axes[1].containers[1].lines[0].get_xdata()) == 1  # Binary: one level


def _check_runs() -> pd.DataFrame:
    """Four levels of MC runs (2 divergences x 2 seeds): high clip at μ 0.1-0.5 of 4, 6, 8 and 2
    %, gains 3 ± 0.5 points except 0.5 ± 3 at ppo_epochs 10 (a CI across 0); and Atomic runs
    clipping 50 % at the 2 % level (which must not count)."""
    plan = [((1, 1.0), 0.04, 3.0, 0.5), ((2, 1.0), 0.06, 3.0, 0.5),
            ((10, 1.0), 0.08, 0.5, 3.0), ((1, 2.6), 0.02, 3.0, 0.5)]  # fmt: skip
    rows = []
    for (epochs, temperature), clip, gain, spread in plan:
        for est in ("mc", "atomic") if clip == 0.02 else ("mc",):
            for i, (div, seed) in enumerate([(d, s) for d in ("tv", "kl") for s in (0, 1)]):
                sign = 1 if i % 2 else -1
                rows.append(
                    {"point": _label(epochs, temperature), "divergence": div, "estimator": est,
                     "seed": seed, "gain": gain + sign * spread,
                     f"clip_high/{CHECK_BUCKET}": (0.5 if est == "atomic" else clip)
                     + sign * 0.001}
                )  # fmt: skip
    return pd.DataFrame(rows)


def test_the_manipulation_check_passes_a_level_that_clips_and_gains() -> None:
    check = manipulation_check(_check_runs(), clip_percent=3.0)
    assert list(check["point"]) == [_label(1, 1.0), _label(1, 2.6), _label(2, 1.0), _label(10, 1.0)]
    assert np.allclose(check["clip"], [4.0, 2.0, 6.0, 8.0]) and (check["n"] == 4).all()
    assert np.allclose(check["gain"], [3.0, 3.0, 3.0, 0.5])
    assert (check["clip_lo"] < check["clip"]).all() and (check["clip"] < check["clip_hi"]).all()
    # 2 %: too little clip (Atomic's 50 % not counted); 8 %: the gain's CI reaches below 0
    assert list(check["passes"]) == [True, False, True, False]
    assert check.loc[3, "gain_lo"] < 0 < check.loc[2, "gain_lo"]
    assert strongest_level(check) == _label(2, 1.0)  # not 8 %: it fails
    assert list(manipulation_check(_check_runs(), clip_percent=5.0)["passes"]) == [
        False, False, True, False,
    ]  # fmt: skip


def test_with_no_passing_level_there_is_no_strongest() -> None:
    check = manipulation_check(_check_runs(), clip_percent=7.0)
    assert not check["passes"].any() and len(check) == 4
    assert strongest_level(check) is None
