"""Figures 1-2: structure of the matplotlib objects (axes, lines, labels), never pixels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer, ErrorbarContainer
from scipy import stats

from gppo import metrics as M
from gppo.analysis.figures import paper_figures as F


def test_figure1_one_panel_per_divergence_two_lines_per_estimator_and_mc_band(tmp_path):
    cells = [(d, e) for d in ("kl", "tv") for e in ("mc", "atomic", "binary")]
    fig = F.figure1_regions(cells)
    assert len(fig.axes) == 2
    tv, kl = fig.axes  # paper order: TV before KL
    assert tv.get_title().startswith("TV (δ = 0.2)") and kl.get_title().startswith("KL")
    for ax in fig.axes:
        assert ax.get_xscale() == "log"
        labels = [ln.get_label() for ln in ax.get_lines()]
        assert labels == [
            "MC r_hi",
            "MC r_lo",
            "Binary r_hi",
            "Binary r_lo",
            "Atomic r_hi",
            "Atomic r_lo",
        ]
        assert [c.get_label() for c in ax.collections] == ["MC band"]
    # the MC lines are the band's edges: kl-mc is [e^-δ, e^δ] = [0.8, 1.25] at r_min = 0.8
    hi, lo = kl.get_lines()[0].get_ydata(), kl.get_lines()[1].get_ydata()
    assert np.allclose(hi, 1.25) and np.allclose(lo, 0.8)
    # atomic widens as μ decreases
    atomic_hi = np.asarray(tv.get_lines()[4].get_ydata())
    assert atomic_hi[0] > atomic_hi[-1]
    paths = F.save(fig, tmp_path / "fig1")
    assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size for p in paths)


def test_region_table_bounds_at_a_few_mu():
    table = F.region_table([("tv", "binary"), ("chi2", "atomic")], mus=(0.1, 0.5))
    tvb = table[table.estimator == "binary"].set_index("mu")
    assert tvb.loc[0.5, "r_lo"] == pytest.approx(0.8) and tvb.loc[0.5, "r_hi"] == pytest.approx(1.2)
    ripo = table[table.divergence == "chi2"].set_index("mu")
    assert ripo.loc[0.1, "r_hi"] == pytest.approx(1 + (0.04 / 0.1) ** 0.5)


def _curves():
    rows = []
    for domain in ("math", "code"):
        for cell in ("tv/mc", "kl/atomic", "gspo"):
            for seed in (0, 1):
                for step in range(1, 4):
                    rows.append((domain, cell, seed, M.TRAIN_SCORE, step, 0.1 * step + seed))
                    rows.append((domain, cell, seed, M.ENTROPY, step, 1.0 / step))
                    if "/" in cell:
                        for b, *_ in M.MU_BUCKETS:
                            rows.append((domain, cell, seed, M.clip_frac_bucket(b), step, 0.01))
    return pd.DataFrame(rows, columns=["domain", "cell", "seed", "metric", "step", "value"])


def test_figure2_small_multiples_per_divergence_and_baselines():
    fig = F.figure2_dynamics(_curves())
    # rows: (score, entropy) per domain; columns: TV, KL, Baselines
    assert len(fig.axes) == 4 * 3
    grid = np.asarray(fig.axes).reshape(4, 3)
    assert [ax.get_title() for ax in grid[0]] == ["math: TV", "math: KL", "math: Baselines"]
    assert [ax.get_title() for ax in grid[2]] == ["code: TV", "code: KL", "code: Baselines"]
    assert grid[0][0].get_ylabel() == "math\ntraining score"
    assert grid[1][0].get_ylabel() == "math\nentropy"
    tv, kl, base = ([ln.get_label() for ln in ax.get_lines()] for ax in grid[0])
    assert tv == ["MC"]  # the reference tv/mc is TV's own MC line: drawn once
    assert kl == ["Atomic", "reference (tv/mc)"]
    assert base == ["GSPO", "reference (tv/mc)"]
    # one colour per estimator everywhere, the same as Figures 1 and clip-by-μ
    colors = {ln.get_label(): ln.get_color() for ax in fig.axes for ln in ax.get_lines()}
    assert colors["MC"] == F.EST_COLORS["mc"] and colors["Atomic"] == F.EST_COLORS["atomic"]
    # mean over the two seeds per step: (0.1 s + 0 + 0.1 s + 1) / 2, with a min-max band
    assert np.allclose(grid[0][0].get_lines()[0].get_ydata(), [0.6, 0.7, 0.8])
    band = grid[0][0].collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.1) and band.max() == pytest.approx(1.3)
    assert np.allclose(grid[1][1].get_lines()[0].get_ydata(), [1.0, 0.5, 1 / 3])
    # legends outside the curves: the figure's (estimators) and the baselines' (right of it)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "MC",
        "Atomic",
        "reference (tv/mc)",
    ]
    anchor = (
        grid[0][2].get_legend().get_bbox_to_anchor().transformed(grid[0][2].transAxes.inverted())
    )
    assert anchor.x0 > 1.0


def test_figure2_one_seed_no_band_and_reference_choice():
    one = _curves()[lambda f: (f["seed"] == 0) & (f["domain"] == "math")]
    fig = F.figure2_dynamics(one, reference="kl/atomic")
    grid = np.asarray(fig.axes).reshape(2, 3)
    assert not grid[0][0].collections  # one seed: no band
    assert [ln.get_label() for ln in grid[0][0].get_lines()] == ["MC", "reference (kl/atomic)"]
    assert grid[0][0].get_title() == "TV"


def test_figure2_clip_fraction_per_mu_bucket_per_estimator():
    fig = F.figure2_clip_by_mu(_curves())
    assert len(fig.axes) == 2
    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [c.get_label() for c in bars] == ["MC", "Atomic"]  # grid cells only
    assert all(len(c.patches) == len(M.MU_BUCKETS) for c in bars)
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["μ < 0.01", "0.01 ≤ μ < 0.1", "0.1 ≤ μ < 0.5", "μ ≥ 0.5"]


def test_clip_by_mu_states_a_t_interval_over_runs():
    """A run is (cell, seed), its value the mean over steps; the bar is the mean over runs and its
    error bar the t interval of those run means; one run: the bar alone."""
    rows = []
    per_run = {("tv/mc", 0): 0.10, ("tv/mc", 1): 0.14, ("kl/mc", 0): 0.12}
    for (cell, seed), level in per_run.items():
        for step, wobble in enumerate((-0.02, 0.0, 0.02), start=1):  # mean over steps: level
            rows.append(
                ("math", cell, seed, M.clip_frac_bucket("mu_lt_0.01"), step, level + wobble)
            )
    rows.append(("math", "tv/atomic", 0, M.clip_frac_bucket("mu_lt_0.01"), 1, 0.3))
    curves = pd.DataFrame(rows, columns=["domain", "cell", "seed", "metric", "step", "value"])
    frame = F.clip_by_mu_frame(curves).set_index("estimator")
    runs = np.array(list(per_run.values()))
    half = stats.t.ppf(0.975, 2) * runs.std(ddof=1) / np.sqrt(3)
    mc = frame.loc["mc"]
    assert mc["n_runs"] == 3 and mc["mean"] == pytest.approx(0.12)
    assert (mc["lo"], mc["hi"]) == pytest.approx((0.12 - half, 0.12 + half))
    assert frame.loc["atomic", "n_runs"] == 1 and np.isnan(frame.loc["atomic", "lo"])
    ax = F.figure2_clip_by_mu(curves).axes[0]
    mc_bars, atomic_bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    first_bucket = mc_bars.lines[2][0].get_segments()[0]  # [[x, lo], [x, hi]]
    assert np.allclose(first_bucket[:, 1], [0.12 - half, 0.12 + half])
    assert not len(atomic_bars.lines[2][0].get_segments()[0])  # one run: no error bar


def test_figure2_smooths_long_noisy_curves_with_a_trailing_mean():
    steps = np.arange(1, 61)
    noisy = np.where(steps % 2 == 0, 1.0, 0.0)  # alternating 0/1: mean 0.5
    curves = pd.DataFrame(
        {"domain": "math", "cell": "tv/mc", "seed": 0, "metric": M.TRAIN_SCORE,
         "step": steps, "value": noisy}
    )  # fmt: skip
    auto = F.figure2_dynamics(curves).axes[0].get_lines()[0].get_ydata()
    assert np.allclose(auto[4:], 0.5)  # window 60 // 15 = 4: an even window averages to 0.5
    raw = F.figure2_dynamics(curves, smooth=1).axes[0].get_lines()[0].get_ydata()
    assert np.array_equal(raw, noisy)
