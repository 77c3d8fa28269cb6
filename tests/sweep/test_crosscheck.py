"""The independent check of issue 57 over a pairwise design of small probe sweeps: every number
of ``table1.csv``, ``scores.csv``, the report page and ``gppo-sweep status`` recomputed from the
raw MLflow runs by ``tests/crosscheck/recompute.py`` (which imports nothing from
``gppo.analysis``). The full product is ``benchmarks/crosscheck_matrix.py``; how to add a
combination is in docs/development.md."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from crosscheck import recompute
from crosscheck.matrix import PAIRWISE, full_product, pairs_covered, run_combo
from scipy import stats

CROSSCHECK = Path(recompute.__file__).parent


def test_the_pairwise_design_covers_every_pair_of_the_full_product():
    assert pairs_covered(PAIRWISE) == pairs_covered(full_product())
    assert len(PAIRWISE) == 7 and len(full_product()) == 96


def test_the_check_imports_nothing_from_gppo_analysis():
    """Nor from gppo.stats, where the reports' statistics moved (issue 58): the check's own."""
    for path in CROSSCHECK.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not [n for n in names if n.startswith(("gppo.analysis", "gppo.stats"))], path


def test_welch_and_bh_of_the_check_match_textbook_values():
    x, ref = np.array([27.0, 31.0, 29.5]), np.array([50.0, 46.0, 55.0, 52.0])
    d, lo, hi, p = recompute._welch(x, ref)
    assert p == pytest.approx(stats.ttest_ind(x, ref, equal_var=False).pvalue)
    assert d == pytest.approx(x.mean() - ref.mean()) and lo < d < hi < 0
    # BH by hand: p_(i) x m / i, then the running minimum from the top
    assert recompute._bh({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx(
        {"a": 0.03, "b": 0.04, "c": 0.04}
    )


def test_the_check_tests_a_row_without_spread_against_a_reference_with_spread():
    """docs/statistics.md, "No spread": a collapsed row is in the family when the reference
    scatters; a comparison where neither side scatters is not."""
    runs = pd.DataFrame(
        [
            {"domain": "math", "point": "{}", "label": lab, "seed": seed, "finished": True,
             "score": score, "base": 10.0, "run_id": f"{lab}-{seed}", "same_runs": None,
             "cpu_hours": 0.0}
            for seed in range(3)
            for lab, score in (("tv/mc", 30.0 + 3 * seed), ("kl/mc", 20.0), ("kl/atomic", 40.0))
        ]
    )  # fmt: skip
    rows = {k[2]: v for k, v in recompute.expected_table(runs).items()}
    assert rows["kl/mc"]["p"] == pytest.approx(
        stats.ttest_ind([20.0] * 3, [30.0, 33.0, 36.0], equal_var=False).pvalue
    )
    assert "p_adj" in rows["kl/mc"] and "p_adj" in rows["kl/atomic"]  # a family of two
    assert "p_adj" not in rows["base"] or rows["base"]["p_adj"] == rows["base"]["p"]


@pytest.mark.slow
@pytest.mark.parametrize("combo", PAIRWISE, ids=lambda c: c.name())
def test_every_reported_number_agrees_with_the_recomputation(combo, tmp_path, ray_cluster):
    problems = run_combo(combo, tmp_path / combo.name(), ray_cluster.address)
    assert not problems, "\n".join(problems)
