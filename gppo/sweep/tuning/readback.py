"""Read a trial's values back from its MLflow run: the objective and the intermediate values.

* Objective (maximised): ``tune.objective.metric`` when named (its value at the last step), else
  the mean avg@k over the domain's benchmarks at the final evaluation: ``eval/avg_at_<k>`` as
  the backend logs it, or the mean of the per-benchmark ``eval/<b>/avg_at_<k>`` at the last step
  where every benchmark was evaluated, when the backend logged only those.
* Intermediate values (pruning): the history of ``tune.intermediate.metric`` (``train/score`` by
  default), MLflow step = Optuna step, read while the job runs.
"""

from __future__ import annotations

import math

from gppo import metrics
from gppo.store.tracking import Tracking, metric_steps


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def objective_value(tracking: Tracking, run_id: str, *, metric: str | None, k: int) -> float | None:
    """The trial's score, or ``None`` when the run has not logged it (a failed trial)."""
    steps = metric_steps(tracking, run_id, metric or metrics.eval_domain_metric(k))
    if steps or metric is not None:
        return _finite(steps[-1][1]) if steps else None
    run = tracking.get_run(run_id)
    names = [n for n in run.data.metrics if (p := metrics.parse_eval_metric(n)) and p[1] == k]
    by_step: dict[int, list[float]] = {}
    for name in names:
        for step, value in metric_steps(tracking, run_id, name):
            by_step.setdefault(step, []).append(value)
    complete = [s for s, values in by_step.items() if len(values) == len(names)]
    return _finite(sum(by_step[max(complete)]) / len(names)) if complete else None


def intermediate_values(tracking: Tracking, run_id: str, metric: str) -> list[tuple[int, float]]:
    """``(step, value)`` of the intermediate metric so far, one per step (latest write wins),
    finite values only."""
    return [(s, v) for s, v in metric_steps(tracking, run_id, metric) if _finite(v) is not None]
