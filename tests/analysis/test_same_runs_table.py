"""Table 1 with a cell served by an identical cell's runs (tidy rows with the same ``run_id``s):
the row is kept with its numbers, marked, and its runs count once in the pooled variance; the
tidy CSV (``report --from-csv``) carries the same marks."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gppo.analysis.data.tidy import normalise, read_scores_csv
from gppo.analysis.tables.render import to_markdown
from gppo.analysis.tables.table1 import build_table1
from gppo.analysis.tables.table1_model import SAME_RUNS

BENCHES = ("b1", "b2")


def _tidy(shared: bool = True, with_follower: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    cells = ["tv/mc", "kl/mc", "hellinger/mc"] + (["chi2/mc"] if with_follower else [])
    for cell in cells:
        source = "tv/mc" if cell == "chi2/mc" and shared else cell
        for seed in range(3):
            for b in BENCHES:
                # the follower's scores are its source's (copied), its run id too when shared
                score = rng.uniform(0.2, 0.6) if cell != "chi2/mc" else None
                rows.append(
                    {
                        "domain": "math", "cell": cell, "benchmark": b, "seed": seed,
                        "score": score, "run_id": f"run-{source}-{seed}",
                    }
                )  # fmt: skip
    frame = pd.DataFrame(rows)
    if with_follower:
        tv = frame[frame.cell == "tv/mc"].set_index(["seed", "benchmark"])["score"]
        fol = frame.cell == "chi2/mc"
        frame.loc[fol, "score"] = [
            tv[(s, b)] for s, b in zip(frame[fol].seed, frame[fol].benchmark, strict=True)
        ]
    return normalise(frame)


def test_the_follower_row_is_marked_and_shows_its_sources_numbers() -> None:
    table = build_table1(_tidy())
    rows = {r.cell: r for r in table.blocks[0].rows}
    assert rows["chi2/mc"].same_runs == "tv/mc"
    assert rows["tv/mc"].same_runs is None and rows["kl/mc"].same_runs is None
    assert rows["chi2/mc"].entries == rows["tv/mc"].entries
    mark = table.mark(SAME_RUNS)
    assert mark and any(f.text.endswith("chi2/mc = tv/mc (math)") for f in table.footnotes)
    assert f"<sup>{mark}</sup>" in to_markdown(table) or f"^{mark}" in to_markdown(table)


def test_the_same_runs_count_once_in_the_pooled_variance() -> None:
    with_follower = {r.cell: r for r in build_table1(_tidy()).blocks[0].rows}
    without = {r.cell: r for r in build_table1(_tidy(with_follower=False)).blocks[0].rows}
    for cell in ("kl/mc", "hellinger/mc"):
        assert with_follower[cell].p_value == without[cell].p_value
        assert with_follower[cell].delta == without[cell].delta


def test_equal_numbers_from_other_runs_are_not_marked() -> None:
    table = build_table1(_tidy(shared=False))
    assert all(r.same_runs is None for r in table.blocks[0].rows)
    assert not table.mark(SAME_RUNS)


def test_the_tidy_csv_keeps_the_marks(tmp_path) -> None:
    path = tmp_path / "scores.csv"
    _tidy().to_csv(path, index=False)
    rows = {r.cell: r for r in build_table1(read_scores_csv(path)).blocks[0].rows}
    assert rows["chi2/mc"].same_runs == "tv/mc"


def test_the_family_counts_each_comparison_once() -> None:
    """Issue 58: a row on the reference's own runs is no comparison and leaves the family
    unchanged; the adjusted p-values are the correction over the other rows alone."""
    from gppo.stats import inference as S

    for test in ("welch", "pooled"):
        with_follower = {r.cell: r for r in build_table1(_tidy(), test=test).blocks[0].rows}
        without = {
            r.cell: r for r in build_table1(_tidy(with_follower=False), test=test).blocks[0].rows
        }
        family = [with_follower[c] for c in ("kl/mc", "hellinger/mc")]
        expected = S.adjust([r.p_value for r in family], "bh")
        assert [r.p_adjusted for r in family] == list(expected)
        for cell in ("kl/mc", "hellinger/mc"):
            assert with_follower[cell].p_adjusted == without[cell].p_adjusted
