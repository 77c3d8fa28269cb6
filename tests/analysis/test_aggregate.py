"""gppo/analysis/tables/aggregate.py: Mean / IQM / P(improvement) over benchmarks, and its files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from gppo.analysis.data.tidy import normalise
from gppo.analysis.tables.aggregate import aggregate_frame, write_aggregate
from gppo.stats import inference as S


def _tidy(seed_counts: dict[str, int], rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for i, (cell, n) in enumerate(seed_counts.items()):
        for seed in range(n):
            for b, level in zip("ABCD", (0.2, 0.3, 0.4, 0.5), strict=True):
                rows.append(("math", cell, b, seed, float(level + 0.03 * i + rng.normal(0, 0.02))))
    rows.append(("math", "kl/mc", "A", 9, 0.9))  # a run without every benchmark: left out
    return normalise(pd.DataFrame(rows, columns=["domain", "cell", "benchmark", "seed", "score"]))


def test_estimates_match_their_definitions_and_cis_bracket_them():
    tidy = _tidy({"tv/mc": 4, "kl/mc": 4, "gspo": 3}, np.random.default_rng(0))
    agg = aggregate_frame(tidy, "tv/mc").set_index(["cell", "metric"])
    for cell in ("tv/mc", "kl/mc", "gspo"):
        full = tidy[(tidy.cell == cell) & (tidy.seed < 9)].pivot(
            index="seed", columns="benchmark", values="score"
        )
        ref = tidy[tidy.cell == "tv/mc"].pivot(index="seed", columns="benchmark", values="score")
        assert np.isclose(agg.loc[(cell, "mean"), "estimate"], full.to_numpy().mean())
        iqm = stats.trim_mean(full.to_numpy().ravel(), 0.25)
        assert np.isclose(agg.loc[(cell, "iqm"), "estimate"], iqm)
        pi = S.probability_of_improvement(
            [full[b].to_numpy() for b in "ABCD"], [ref[b].to_numpy() for b in "ABCD"]
        )
        assert np.isclose(agg.loc[(cell, "prob_improvement"), "estimate"], pi)
        for metric in ("mean", "iqm", "prob_improvement"):
            lo, est, hi = agg.loc[(cell, metric), ["lo", "estimate", "hi"]]
            assert lo <= est + 1e-12 and est <= hi + 1e-12
        assert agg.loc[(cell, "mean"), "n_runs"] == len(full)


def test_one_run_gives_estimates_without_intervals_and_files_are_written(tmp_path):
    tidy = _tidy({"tv/mc": 1, "kl/mc": 1}, np.random.default_rng(1))
    paths = write_aggregate(tidy, tmp_path, "tv/mc")
    names = {p.name for p in paths}
    assert {"aggregate.csv", "aggregate_intervals.png", "aggregate_improvement.svg"} <= names
    agg = pd.read_csv(tmp_path / "aggregate.csv")
    assert agg["lo"].isna().all() and agg["estimate"].notna().all()


def test_intervals_resample_whole_runs_and_dropped_runs_are_named():
    """A run keeps its benchmark scores together: the Mean's CI is Table 1's t interval of the run
    averages; the run without every benchmark (kl/mc seed 9) is named in ``left_out``."""
    tidy = _tidy({"tv/mc": 4, "kl/mc": 4, "gspo": 3}, np.random.default_rng(0))
    agg = aggregate_frame(tidy, "tv/mc").set_index(["cell", "metric"])
    for cell in ("tv/mc", "kl/mc", "gspo"):
        full = tidy[(tidy.cell == cell) & (tidy.seed < 9)].pivot(
            index="seed", columns="benchmark", values="score"
        )
        lo, hi = agg.loc[(cell, "mean"), ["lo", "hi"]]
        assert (lo, hi) == pytest.approx(S.mean_ci(full.to_numpy().mean(axis=1)), abs=1e-12)
    assert agg.loc[("kl/mc", "mean"), "left_out"] == "9"
    assert agg.loc[("tv/mc", "mean"), "left_out"] == ""
