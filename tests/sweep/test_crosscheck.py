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
from crosscheck import adaptive_rule, recompute
from crosscheck.adaptive_rule import Adaptive
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


def _runs(scores: dict[str, list[float | None]], failed: tuple = ()) -> pd.DataFrame:
    """A runs frame (:func:`recompute.runs_frame`'s columns) of one table: each row's scores by
    seed (None: not finished), and (row, seed) attempts that FAILED."""
    rows = [
        {"cell_id": f"{lab}-s{seed}", "label": lab, "domain": "math", "seed": seed, "point": "{}",
         "finished": score is not None, "status": "FINISHED" if score is not None else "RUNNING",
         "score": score, "base": 10.0, "run_id": f"{lab}-{seed}", "same_runs": None,
         "cpu_hours": 0.0}
        for lab, seeds in scores.items()
        for seed, score in enumerate(seeds)
    ]  # fmt: skip
    for lab, seed in failed:
        rows = [r for r in rows if r["cell_id"] != f"{lab}-s{seed}"]
        rows.append({**rows[0], "cell_id": f"{lab}-s{seed}", "label": lab, "seed": seed,
                     "finished": False, "status": "FAILED", "score": None,
                     "run_id": f"{lab}-{seed}-failed"})  # fmt: skip
    return pd.DataFrame(rows)


def _table1(**kl: object) -> pd.DataFrame:
    """table1.csv's adaptive columns: the reference and kl/mc (``kl``: its fields)."""
    ref = {"domain": "math", "cell": "tv/mc", "significant": "false", "stopped": "reference"}
    return pd.DataFrame([ref, {"domain": "math", "cell": "kl/mc", **kl}])


#: kl/mc 20 points under tv/mc at 2 seeds, 2-3 seeds: separated at the first look
SEPARATED = {"tv/mc": [50.0, 50.2, None], "kl/mc": [30.0, 30.3, None]}
SEPARATED_ROW = {"delta": -20.0, "delta_ci95_lo": -22.4, "delta_ci95_hi": -17.5,
                 "significant": "true", "stop_status": "separated", "stop_reason": "bound",
                 "stop_seeds": 2, "stopped": "separated at 2 seeds"}  # fmt: skip
#: the same row read as futile
FUTILE = {"stop_status": "futile", "stop_reason": "futility", "stopped": "futile at 2 seeds",
          "significant": "false"}  # fmt: skip
#: kl/mc's seed 1 failed with no retry left
FAILED_ROW = {"significant": "false", "stop_status": "failed", "stop_reason": "seed failed",
              "stop_seeds": 1, "stopped": "seed failed at 1 seed: not decided"}  # fmt: skip


def _check(runs: pd.DataFrame, table: pd.DataFrame, design: Adaptive | None = None) -> list[str]:
    design = design or Adaptive(min=2, max=3)
    return adaptive_rule.stop_disagreements(table, runs, ["{}"] * len(table), design)


def test_the_adaptive_check_agrees_with_right_stops():
    assert _check(_runs(SEPARATED), _table1(**SEPARATED_ROW)) == []
    failed = _runs({"tv/mc": [50.0, 50.2], "kl/mc": [30.0]}, failed=(("kl/mc", 1),))
    assert _check(failed, _table1(**FAILED_ROW)) == []


@pytest.mark.parametrize(
    ("wrong", "says"),
    [
        ({"delta": -15.0}, "delta -15.0 != the mean over its first 2 seeds"),
        ({"stop_seeds": 3, "stopped": "separated at 3 seeds"}, "separated at 3 seeds, yet 2"),
        ({"delta_ci95_hi": 0.5}, "its interval [-22.4, 0.5] covers 0"),
        ({"stopped": "separated at 2 seed"}, "stopped 'separated at 2 seed'"),
        ({"significant": "false"}, "significant False"),
        (FUTILE, "the rule gives 'separated'"),
    ],
    ids=["delta", "seeds", "covers-0", "text", "mark", "status"],
)
def test_the_adaptive_check_flags_a_wrong_stop(wrong, says):
    bad = _check(_runs(SEPARATED), _table1(**{**SEPARATED_ROW, **wrong}))
    assert any(says in b for b in bad), bad


def test_the_adaptive_check_flags_a_missing_seed_failed():
    failed = _runs({"tv/mc": [50.0, 50.2], "kl/mc": [30.0]}, failed=(("kl/mc", 1),))
    open_row = {"significant": "false", "stop_status": "open", "stop_reason": "",
                "stop_seeds": 1, "stopped": "open (1 seed)"}  # fmt: skip
    bad = _check(failed, _table1(**open_row))
    assert any("seed [1] failed with no retry left, yet the row reads 'open'" in b for b in bad)
    assert any("open after the launch ended" in b for b in bad)
    ref_lost = _runs({"tv/mc": [50.0], "kl/mc": [30.0, 30.3]}, failed=(("tv/mc", 1),))
    bad = _check(ref_lost, _table1(**{**open_row, "stop_seeds": 2, "stopped": "open (2 seeds)"}))
    assert any("a reference seed [1] failed, yet the row reads 'open'" in b for b in bad), bad


def test_the_adaptive_check_flags_a_wrong_row_without_committed_bounds():
    """A design whose critical values are not in the check's table: the facts still hold."""
    design = Adaptive(min=2, max=5)
    assert adaptive_rule.replay(adaptive_rule.Table({}, "tv/mc"), design) is None
    runs = _runs(SEPARATED)
    assert _check(runs, _table1(**SEPARATED_ROW), design) == []
    assert any(
        "delta -15.0" in b
        for b in _check(runs, _table1(**{**SEPARATED_ROW, "delta": -15.0}), design)
    )
    budget = {**SEPARATED_ROW, "stop_status": "open", "stop_reason": "budget",
              "significant": "false", "stopped": "left by the budget at 2 seeds"}  # fmt: skip
    assert any("the spec has none" in b for b in _check(runs, _table1(**budget), design))


def test_the_checks_critical_values_are_the_products():
    """The committed bounds (data, so that the check imports nothing from gppo.stats) are what
    gppo.stats computes today; if the rule changes, regenerate them (adaptive_rule.CRITICAL)."""
    from gppo.stats import spending
    from gppo.stats.sequential import Design

    for (mn, mx, batch, family), (levels, final) in adaptive_rule.CRITICAL.items():
        looks = Design(min_seeds=mn, max_seeds=mx, batch=batch).looks
        fractions = spending.look_fractions(looks, mx)
        a = spending.t_calibrated_alpha(0.05 / family, looks, 2, "power")
        assert spending.nominal_levels(a, fractions, True, "power") == levels
        assert spending.nominal_levels(0.05 / family, fractions, True, "power")[-1] == final


def test_the_checks_replay_agrees_with_the_rounds_on_random_tables():
    """Two implementations of the rule, the check's from the docs and gppo.stats.rounds, on 150
    random tables (seeds missing, failed, rows on the reference's own runs, a budget)."""
    from types import SimpleNamespace

    from gppo.stats.rounds import OPEN, Rounds, TableRounds
    from gppo.stats.sequential import Design

    rng = np.random.default_rng(5)
    statuses = set()
    for _ in range(150):
        mn, mx = ((2, 3), (2, 4))[rng.integers(2)]
        margin, budget = (None, 1.0, 3.0)[rng.integers(3)], bool(rng.integers(2))
        names = ["ref", *[f"r{i}" for i in range(rng.integers(1, 4))]]
        cells = {r: [SimpleNamespace(id=f"{r}-{i}") for i in range(mx)] for r in names}
        scores, failed = {}, set()
        for r in names:
            shift, sd = rng.choice([0.0, 2.0, 10.0]), rng.choice([0.5, 2.0])
            for c in cells[r]:
                u = rng.random()
                if u < 0.05:
                    failed.add(c.id)
                elif u > 0.1:
                    scores[c.id] = 50 - shift + sd * rng.standard_normal()
        cells["same"] = [SimpleNamespace(id=f"same-{i}") for i in range(mx)]
        scores |= {f"same-{i}": scores[f"ref-{i}"] for i in range(mx) if f"ref-{i}" in scores}
        design = Design(min_seeds=mn, max_seeds=mx, margin=margin, rows=len(names) - 1)
        rounds = Rounds(design, [TableRounds({}, cells, "ref", frozenset({"same"}))])
        left = {c.id for cs in cells.values() for c in cs if c.id not in scores} if budget else ()
        theirs = rounds.stops(scores, left, failed)[0]
        table = adaptive_rule.Table(
            {r: {i: scores[c.id] for i, c in enumerate(cs) if c.id in scores}
             for r, cs in cells.items()},
            "ref",
            {r: {i for i, c in enumerate(cs) if c.id in failed} for r, cs in cells.items()},
            {"same"},
        )  # fmt: skip
        mine = adaptive_rule.replay(table, Adaptive(mn, mx, margin=margin, budget=budget))
        assert set(mine) == set(theirs)
        for r, s in theirs.items():
            status = "open" if s.status == OPEN else s.status
            lo, hi = s.interval or (None, None)
            assert (status, s.reason, s.seeds) == (mine[r].status, mine[r].reason, mine[r].seeds)
            assert (s.delta, lo, hi) == pytest.approx((mine[r].delta, mine[r].lo, mine[r].hi))
            statuses.add((status, s.reason))
    assert len(statuses) >= 7, statuses  # separated, futile, open, failed, the budget...


@pytest.mark.slow
@pytest.mark.parametrize("combo", PAIRWISE, ids=lambda c: c.name())
def test_every_reported_number_agrees_with_the_recomputation(combo, tmp_path, ray_cluster):
    problems = run_combo(combo, tmp_path / combo.name(), ray_cluster.address)
    assert not problems, "\n".join(problems)
