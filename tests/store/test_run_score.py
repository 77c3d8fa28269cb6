"""One home for a run's score (:mod:`gppo.store.run_score`): what the launcher's seed gate,
``status``, the reports and the studies read from the same run."""

from __future__ import annotations

import pytest

from gppo import metrics as M
from gppo.store.run_score import base_score, logged_k, points, run_score

METRICS = {
    M.eval_metric("b1", 8): 0.30,
    M.eval_metric("b2", 8): 0.55,
    M.eval_metric("b1", 1): 0.90,  # another k: not part of avg@8
    M.eval_base_metric("b1", 8): 0.10,
    M.eval_base_metric("b2", 8): 0.20,
    M.TRAIN_SCORE: 0.99,
}


def test_a_runs_score_is_its_avg_at_k_over_benchmarks_in_points():
    assert run_score(METRICS, 8) == pytest.approx(42.5)
    assert run_score(METRICS, 1) == pytest.approx(90.0)
    assert run_score(METRICS) == run_score(METRICS, 8)  # the largest k logged
    assert run_score(METRICS, 4) is None and run_score({M.TRAIN_SCORE: 0.5}) is None
    assert base_score(METRICS, 8) == pytest.approx(15.0) and base_score(METRICS) == base_score(
        METRICS, 8
    )
    assert logged_k(METRICS) == 8 and logged_k({}) is None
    assert points([]) is None and points([0.25, 0.5]) == pytest.approx(37.5)
