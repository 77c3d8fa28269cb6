"""A run's score: one home for what the launcher's seed gate, ``status``, the reports and the
studies call a seed's score.

A seed's score is its run's avg@k on each benchmark (the final evaluation, logged as
``eval/<benchmark>/avg_at_<k>``), averaged over the benchmarks, in points (x 100). Every reader
calls :func:`run_score` on the run's metrics, so the launcher (which decides which seeds to run
from these scores) and the report (which replays the same decisions) can never read different
numbers from the same runs. :func:`base_score` is the same for the base model's step-0
evaluation (``eval_base/...``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal

from gppo import metrics as M
from gppo.score_format import pct, quantize


def points(fractions: Iterable[float]) -> float | None:
    """The mean of avg@k fractions in points (``100 * mean``), computed exactly in decimal as
    Table 1 averages a seed's benchmarks (:func:`gppo.score_format.pct`) and returned as the nearest
    float, so that it prints as Table 1 does (:func:`score_text`); None for no value."""
    values = [pct(v) for v in fractions]
    return float(sum(values, Decimal(0)) / len(values)) if values else None


def score_text(score: float) -> str:
    """A score in points as Table 1 prints it: one decimal, rounded half up (``34.7``)."""
    return str(quantize(Decimal(repr(float(score))), 1))


def logged_k(metrics: Mapping[str, float], base: bool = False) -> int | None:
    """The largest k the run logged a final (``base``: step-0) evaluation at; None for none."""
    parse = M.parse_eval_base_metric if base else M.parse_eval_metric
    ks = [p[1] for name in metrics if (p := parse(name))]
    return max(ks) if ks else None


def _score(
    metrics: Mapping[str, float], k: int | None, parse: Callable[[str], tuple[str, int] | None]
) -> float | None:
    if k is None:
        k = logged_k(metrics, base=parse is M.parse_eval_base_metric)
    return points(v for name, v in metrics.items() if (p := parse(name)) and p[1] == k)


def run_score(metrics: Mapping[str, float], k: int | None = None) -> float | None:
    """A seed's score: the run's avg@``k`` averaged over its benchmarks, in points (``k`` None:
    the largest k it logged); None when it logged no final evaluation at ``k``."""
    return _score(metrics, k, M.parse_eval_metric)


def base_score(metrics: Mapping[str, float], k: int | None = None) -> float | None:
    """The base model's score in the run (its step-0 evaluation), as :func:`run_score`."""
    return _score(metrics, k, M.parse_eval_base_metric)
