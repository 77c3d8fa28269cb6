"""GPPO objectives: pure torch (imports torch and the standard library; of ours only the leaf
modules :mod:`gppo.errors` and :mod:`gppo.registry`). The math they implement (generators,
estimators, calibration, regions, the objective) is written out in docs/conventions.md.

Public API:

* :func:`calibrate_delta` ``(divergence, r_min=0.8) -> float``
* :func:`proximal_region` ``(divergence, estimator, delta, mu) -> (r_lo, r_hi)``
* :func:`gppo_policy_loss` ``(old_log_prob, log_prob, advantages, response_mask, *, divergence,
  estimator, delta=None, r_min=0.8, ratio_bounds=(0.5, 10.0), dual_clip=10.0,
  loss_agg_mode="token-mean", global_batch_info=None) -> (loss, metrics)``
* :func:`gppo_token_loss`: the same without aggregation -> ((B, T) per-token loss, metrics), for
  callers that aggregate with verl's own ``agg_loss``.
* :func:`agg_loss`: verl's aggregation modes.
* :mod:`.methods`: ``get_method(name)``, ``known_methods()``.
* the registries :data:`.divergences.DIVERGENCES`, :data:`.estimators.ESTIMATORS`,
  :data:`.methods.METHODS` (:class:`gppo.registry.Registry`).
"""

from .aggregation import AGG_MODES, agg_loss
from .divergences import get_divergence, known_divergences
from .estimators import get_estimator, known_estimators
from .losses import MU_BUCKETS, gppo_policy_loss, gppo_token_loss
from .regions import calibrate_delta, proximal_region

__all__ = [
    "AGG_MODES",
    "MU_BUCKETS",
    "agg_loss",
    "calibrate_delta",
    "get_divergence",
    "get_estimator",
    "gppo_policy_loss",
    "gppo_token_loss",
    "known_divergences",
    "known_estimators",
    "proximal_region",
]
