"""The report names and orders cells from one place: display names, verl loss modes and colours
from the objectives' registries, one row order for Table 1 and the aggregate view."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gppo.analysis.data.tidy import normalise
from gppo.analysis.figures import paper_figures as F
from gppo.analysis.tables.aggregate import aggregate_frame
from gppo.analysis.tables.render import divergence_name, row_names
from gppo.analysis.tables.table1 import build_table1
from gppo.analysis.vocabulary import row_order
from gppo.objectives.methods import get_method, verl_loss_modes

#: the grid cells first seen out of Table 1's order, an extension divergence before a known one
CELLS = ("base", "rkl/mc", "gspo", "kl/atomic", "js/mc", "tv/binary", "clip_cov", "tv/mc")


def _tidy() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [
        ("math", cell, b, seed, float(rng.uniform(0.1, 0.9)))
        for cell in CELLS
        for seed in range(2)
        for b in ("A", "B")
    ]
    return normalise(pd.DataFrame(rows, columns=["domain", "cell", "benchmark", "seed", "score"]))


def test_table1_and_the_aggregate_view_share_one_row_order():
    expected = ["tv/mc", "tv/binary", "kl/atomic", "rkl/mc", "js/mc", "gspo", "clip_cov", "base"]
    assert row_order(CELLS) == expected
    tidy = _tidy()
    table_rows = [r.cell for r in build_table1(tidy, reference="tv/mc").blocks[0].rows]
    aggregate_rows = list(dict.fromkeys(aggregate_frame(tidy, "tv/mc")["cell"]))
    assert table_rows == aggregate_rows == expected


def test_names_and_colours_come_from_the_registries():
    tidy = _tidy()
    rows = {r.cell: r for r in build_table1(tidy, reference="tv/mc").blocks[0].rows}
    assert row_names(rows["tv/mc"]) == ("TV", "MC (GRPO)")  # the alias's display name
    assert row_names(rows["clip_cov"]) == ("Other baselines", "Clip-Cov")
    assert row_names(rows["kl/atomic"]) == ("KL", "Atomic")
    assert divergence_name("chi2") == "χ²" and divergence_name("alpha:0.5") == "α=0.5"
    assert divergence_name("not-a-divergence") == "not-a-divergence"  # an old CSV's name
    panels = dict(F._panels(list(CELLS), "tv/mc"))
    baselines = {cell: (label, style["color"]) for cell, label, style in panels["Baselines"]}
    assert baselines["clip_cov"] == ("Clip-Cov", get_method("clip_cov").colour)
    assert verl_loss_modes()["gmpo"] == "geo_mean" and "grpo" not in verl_loss_modes()
