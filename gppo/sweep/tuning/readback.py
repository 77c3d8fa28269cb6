"""Read a trial's values back from its MLflow run: the objective and the intermediate values.

* Objective (maximised): ``tune.objective.metric`` when named (its latest value), else the mean
  avg@k over the domain's benchmarks at the final evaluation: ``eval/avg_at_<k>`` as the backend
  logs it, or the mean of the per-benchmark ``eval/<b>/avg_at_<k>`` at the last evaluated step
  when the backend logged only those.
* Intermediate values (pruning): the history of ``tune.intermediate.metric`` (``train/score`` by
  default), MLflow step = Optuna step, read while the job runs.
"""

from __future__ import annotations

import math
from typing import Any

from gppo import metrics


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def objective_value(client: Any, run_id: str, *, metric: str | None, k: int) -> float | None:
    """The trial's score, or ``None`` when the run has not logged it (a failed trial)."""
    if metric is not None:
        history = client.get_metric_history(run_id, metric)
        if not history:
            return None
        last = max(history, key=lambda m: (m.step, m.timestamp))
        return _finite(last.value)
    domain = metrics.eval_domain_metric(k)
    history = client.get_metric_history(run_id, domain)
    if history:
        return _finite(max(history, key=lambda m: (m.step, m.timestamp)).value)
    # fall back to the mean over the per-benchmark metrics at their last common step
    run = client.get_run(run_id)
    names = [n for n in run.data.metrics if (p := metrics.parse_eval_metric(n)) and p[1] == k]
    if not names:
        return None
    finals: dict[int, list[float]] = {}
    for name in names:
        for m in client.get_metric_history(run_id, name):
            finals.setdefault(m.step, []).append(m.value)
    complete = [s for s, vals in finals.items() if len(vals) == len(names)]
    if not complete:
        return None
    step = max(complete)
    return _finite(sum(finals[step]) / len(finals[step]))


def intermediate_values(client: Any, run_id: str, metric: str) -> list[tuple[int, float]]:
    """``(step, value)`` of the intermediate metric so far, one per step (latest write wins)."""
    by_step: dict[int, tuple[int, float]] = {}
    for m in client.get_metric_history(run_id, metric):
        value = _finite(m.value)
        if value is None:
            continue
        if m.step not in by_step or m.timestamp >= by_step[m.step][0]:
            by_step[m.step] = (m.timestamp, value)
    return sorted((step, v) for step, (_, v) in by_step.items())
