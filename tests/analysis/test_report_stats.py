"""`gppo-sweep report --from-csv` on synthetic multi-seed scores with known effects."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from gppo.cli.report import report

app = typer.Typer()
app.command()(report)

EFFECTS = {"tv/mc": 0.0, "tv/atomic": 0.10, "kl/atomic": 0.08, "kl/mc": 0.0, "chi2/binary": 0.0}
EFFECTS |= {"hellinger/mc": 0.0, "gspo": 0.0, "cispo": -0.10}


def _synthetic(path: Path, seeds: int, rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for cell, effect in EFFECTS.items():
        for seed in range(seeds):
            run = rng.normal(0, 0.01)  # a run is good or bad on every benchmark
            for level, bench in zip((0.2, 0.3, 0.4, 0.5), ("A", "B", "C", "D"), strict=True):
                value = np.clip(level + effect + run + rng.normal(0, 0.02), 0, 1)
                rows.append(("math", cell, bench, seed, round(float(value), 4)))
    frame = pd.DataFrame(rows, columns=["domain", "cell", "benchmark", "seed", "score"])
    frame.to_csv(path, index=False)
    return frame


def _pi(frame: pd.DataFrame, cell: str, ref: str = "tv/mc") -> float:
    per = []
    for _, g in frame.groupby("benchmark"):
        x = g[g.cell == cell].score.to_numpy()
        y = g[g.cell == ref].score.to_numpy()
        per.append(((x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])).mean())
    return float(np.mean(per))


@pytest.mark.slow
def test_known_effects_are_marked_nulls_are_not_and_pi_matches(tmp_path):
    frame = _synthetic(tmp_path / "scores.csv", 5, np.random.default_rng(3))
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app, ["--from-csv", str(tmp_path / "scores.csv"), "-o", str(out), "--no-figures"]
    )
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out / "table1.csv", dtype=str, keep_default_na=False).set_index("cell")
    improvement = next(c for c in table.columns if "improvement" in c)
    significant = next(c for c in table.columns if "significant" in c)
    for cell, effect in EFFECTS.items():
        assert float(table.loc[cell, improvement]) == np.float64(_pi(frame, cell)).round(6)
        expected = "true" if effect else "false"
        assert table.loc[cell, significant] == expected, cell
    md = (out / "table1.md").read_text()
    assert "Benjamini-Hochberg" in md and "†" in md and "P(> tv/mc)" in md


@pytest.mark.slow
def test_the_marks_of_one_rendering_agree_across_formats(tmp_path):
    _synthetic(tmp_path / "s.csv", 3, np.random.default_rng(5))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["--from-csv", str(tmp_path / "s.csv"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    csv = pd.read_csv(io.StringIO((out / "table1.csv").read_text()), dtype=str)
    marked = int((csv["significant"] == "true").sum())
    assert (out / "table1.md").read_text().count("†") == marked + 1  # + the footnote's mark
    assert (out / "table1.tex").read_text().count(r"$^\dagger$") == marked + 1
    assert (out / "table1.html").read_text().count("†") == marked + 1


def test_options_welch_holm_and_bad_values(tmp_path):
    from gppo.analysis.data.tidy import read_scores_csv
    from gppo.analysis.tables.table1 import build_table1

    _synthetic(tmp_path / "s.csv", 5, np.random.default_rng(11))
    tidy = read_scores_csv(tmp_path / "s.csv")
    pooled = {r.cell: r for r in build_table1(tidy, test="pooled").blocks[0].rows}
    welch = {r.cell: r for r in build_table1(tidy, test="welch", correction="holm").blocks[0].rows}
    for cell, effect in EFFECTS.items():
        if cell == "tv/mc":
            continue
        assert welch[cell].p_value != pooled[cell].p_value
        assert pooled[cell].significant == bool(effect)  # 5 seeds: both find the +-8..10 points
        assert welch[cell].significant == bool(effect)
    with pytest.raises(ValueError, match="unknown test 'z'; allowed: welch, pooled"):
        build_table1(tidy, test="z")
    with pytest.raises(ValueError, match="unknown correction 'x'; allowed: bh, holm"):
        build_table1(tidy, correction="x")
