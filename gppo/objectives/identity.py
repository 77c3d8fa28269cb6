"""When two losses are one function: a canonical key of a method's loss, read off the loss's own
definitions (:mod:`.losses`), so that equal keys mean the same loss, gradient and diagnostics
on every input, bit for bit.

A GPPO cell's loss (the paper's Eq. 11; docs/conventions.md "The objective") depends on its
divergence, estimator and δ only through the per-token clip interval [r_lo(μ), r_hi(μ)]
intersected with ``ratio_bounds``, and on ``dual_clip`` and ``loss_agg_mode``:

- **mc**: D = |f(r)| does not involve μ, so the interval is two numbers, for every μ. The key
  holds the two floats the loss clips with (:func:`.losses._bounds`, exactly as it computes them)
  and whether ``ratio_bounds`` cut the region (the ``bound_active_frac`` diagnostic), not the
  divergence or δ that produced them. tv/mc at δ = 0.2 and chi2/mc at δ = 0.04 clip at the same
  two floats, [0.8, 1.2] (so does ``alpha:2``/mc at its calibrated δ): one key. So do one mc
  cell at two ``ratio_bounds`` that both contain its region.
- **atomic**, **binary** (and any estimator whose D involves μ): the interval moves with μ, and
  two cells' intervals agree at every μ only when their generators are positive multiples of one
  another with δ scaled alike (``alpha:2`` and chi2, ``alpha:0.5`` and hellinger). Those compute
  their bounds by different routes (a closed form in the input dtype, the float64 solver), equal
  to about 1e-12, not bit for bit, so the key keeps them apart: it is the canonical divergence
  name, the estimator, δ and the bounds, exactly.
- ``dual_clip`` and ``loss_agg_mode`` enter as they are (a ratio can exceed any c; the
  aggregations differ on any ragged mask).

A baseline's key is its name and its resolved parameters, exactly: none is the same function as
a grid cell on every input (GSPO's sequence ratio, Clip-Cov's random cut, ...), and two baselines
are one only with the same parameters. ``tests/objectives/test_identity.py`` checks both ways:
equal keys give identical loss, gradient and diagnostics on random inputs; near misses (one
ulp, one setting) differ.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import torch

from .defaults import LOSS_AGG_MODE, R_MIN
from .divergences import canonical_divergence
from .losses import _bounds, make_plan
from .methods import get_method

#: the method whose loss is a Divergence x Estimator cell
GPPO = "gppo"
#: a GPPO cell's parameters that act only through its clip interval
_IN_REGION = ("divergence", "estimator", "delta", "r_min", "ratio_bounds")


def _exact(value: Any) -> Any:
    """A JSON-safe copy in which every float is its exact hex spelling (no rounding in keys)."""
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, Mapping):
        return {str(k): _exact(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_exact(v) for v in value]
    return value


def _gppo_region(params: Mapping[str, Any]) -> list[Any]:
    """The clip interval as a function of μ, canonically (see the module docstring)."""
    plan = make_plan(
        params["divergence"],
        params["estimator"],
        params.get("delta"),
        params.get("r_min", R_MIN),
        params.get("ratio_bounds"),
        params.get("dual_clip"),
    )
    if plan.estimator == "mc":  # constant in μ: the two floats the loss clips with
        from .regions import mc_scalar_bounds

        lo, hi = _bounds(plan, torch.zeros((), dtype=torch.float64))
        raw_lo, raw_hi = mc_scalar_bounds(plan.divergence, plan.delta)
        bounded = plan.b_lo > 0 or plan.b_hi < math.inf
        cut = bounded and (raw_lo < plan.b_lo or raw_hi > plan.b_hi)
        return ["mc", float(lo), float(hi), cut]
    return [
        plan.estimator,
        canonical_divergence(plan.divergence),
        plan.delta,
        plan.b_lo,
        plan.b_hi,
    ]


def loss_key(method: str, params: Mapping[str, object]) -> str:
    """The canonical key of ``method``'s loss with ``params`` (a cell's ``loss_params``): equal
    keys, the same loss, gradient and diagnostics on every input. Raises what the method's own
    validation raises for bad parameters."""
    params = dict(params)
    agg = params.pop("loss_agg_mode", LOSS_AGG_MODE)  # Method.loss takes it beside the params
    p = get_method(method).resolve(params)
    if method != GPPO:
        return json.dumps([method, _exact(p), agg], separators=(",", ":"))
    # the region's key holds divergence, estimator, δ (or r_min) and ratio_bounds
    rest = {k: v for k, v in p.items() if k not in _IN_REGION}
    return json.dumps([GPPO, _exact(_gppo_region(p)), _exact(rest), agg], separators=(",", ":"))
