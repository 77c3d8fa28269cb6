"""GPPO objectives: pure torch (imports torch and the standard library; of ours only the leaf
modules :mod:`gppo.errors` and :mod:`gppo.registry`). The public names below are imported on
first use, so ``import gppo.objectives.defaults`` (and ``.buckets``) loads no torch. The math they implement (generators,
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

from gppo.registry import lazy_exports

#: the public names and the submodule each lives in, imported on first use: the torch-free parts
#: (:mod:`.defaults`, :mod:`.buckets`) stay importable without torch (``gppo.metrics`` uses them)
_EXPORTS = {
    "AGG_MODES": "aggregation",
    "MU_BUCKETS": "buckets",
    "agg_loss": "aggregation",
    "calibrate_delta": "regions",
    "get_divergence": "divergences",
    "get_estimator": "estimators",
    "gppo_policy_loss": "losses",
    "gppo_token_loss": "losses",
    "known_divergences": "divergences",
    "known_estimators": "estimators",
    "proximal_region": "regions",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
