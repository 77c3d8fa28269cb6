"""Argument checks of the losses: clear errors naming the argument and what is allowed.

The one rule for each GPPO hyper-parameter: the losses, the grid spec (:mod:`gppo.grid.schema`),
the tuner's search space and the verl plugin's config all call these, so they accept and refuse
the same values with the same words:

* ``delta``: a finite number > 0 (:func:`check_delta`);
* ``r_min``: a number in the open interval (0, 1) (:func:`check_r_min`);
* ``ratio_bounds``: :data:`RATIO_BOUNDS_RULE` (:func:`check_ratio_bounds`);
* ``dual_clip``: None or a number > 1 (:func:`check_dual_clip`).
"""

from __future__ import annotations

import math

import torch

Tensor = torch.Tensor


def check_same_shape(**tensors: Tensor) -> None:
    items = list(tensors.items())
    for name, x in items:
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"{name} must be a torch.Tensor of shape (B, T), got {type(x).__name__}"
            )
    ref_name, ref = items[0]
    for name, x in items[1:]:
        if x.shape != ref.shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)} but {ref_name} has shape {tuple(ref.shape)}: "
                "old_log_prob, log_prob, advantages and response_mask must all have the same "
                "shape (B, T)"
            )


#: The one rule for the fixed ratio limits, shared by the library, the grid spec and the verl
#: plugin (each calls :func:`check_ratio_bounds`): r = 1 strictly inside, high may be +inf.
RATIO_BOUNDS_RULE = "None or a pair (low, high) with 0 <= low < 1 < high"


def check_ratio_bounds(ratio_bounds: object) -> tuple[float, float] | None:
    """``(low, high)`` as floats, or None; raises ValueError naming :data:`RATIO_BOUNDS_RULE`."""
    if ratio_bounds is None:
        return None
    try:
        # any input is tried: a non-iterable or a wrong length raises TypeError/ValueError, caught
        lo, hi = (float(x) for x in ratio_bounds)  # type: ignore[attr-defined]  # any input, refused below
    except (TypeError, ValueError):
        raise ValueError(
            f"ratio_bounds must be {RATIO_BOUNDS_RULE}, got {ratio_bounds!r}"
        ) from None
    if not (0.0 <= lo < 1.0 < hi) or math.isnan(hi):
        raise ValueError(f"ratio_bounds must be {RATIO_BOUNDS_RULE}, got {ratio_bounds!r}")
    return lo, hi


def check_delta(delta: object) -> float:
    """delta as a float; ValueError unless it is a finite number > 0."""
    try:
        d = float(delta)  # type: ignore[arg-type]  # any input: float() refuses it below
    except (TypeError, ValueError):
        raise ValueError(f"delta must be a finite number > 0, got {delta!r}") from None
    if not (math.isfinite(d) and d > 0):
        raise ValueError(f"delta must be a finite number > 0, got {delta!r}")
    return d


def check_r_min(r_min: object) -> float:
    """r_min as a float; ValueError unless 0 < r_min < 1."""
    try:
        r = float(r_min)  # type: ignore[arg-type]  # any input: float() refuses it below
    except (TypeError, ValueError):
        raise ValueError(
            f"r_min must be a number in the open interval (0, 1), got {r_min!r}"
        ) from None
    if not (0.0 < r < 1.0):
        raise ValueError(f"r_min must be a number in the open interval (0, 1), got {r_min!r}")
    return r


def check_dual_clip(dual_clip: object) -> float | None:
    """dual_clip as a float, or None; ValueError unless it is None or a number > 1."""
    if dual_clip is None:
        return None
    try:
        c = float(dual_clip)  # type: ignore[arg-type]  # any input: float() refuses it below
    except (TypeError, ValueError):
        raise ValueError(f"dual_clip must be None or a number > 1, got {dual_clip!r}") from None
    if not c > 1.0:
        raise ValueError(f"dual_clip must be None or a number > 1, got {dual_clip!r}")
    return c
