"""Shared helpers for the objectives tests (a uniquely named module, not a conftest, so it
cannot clash with other test folders; hypothesis budgets are set per test with ``@settings``)."""

from __future__ import annotations

import math

import torch

from gppo.objectives.divergences import known_divergences, paper_divergences
from gppo.objectives.estimators import known_estimators, paper_estimators

# Contract tests run over the registries: a newly registered divergence or estimator is tested
# without editing a list here (test_obj_registry.test_known_names pins the expected names).
GRID_DIVERGENCES = paper_divergences()
#: every registered divergence beyond the paper's four, and members of the alpha:<a> family
EXTENSIONS = [d for d in known_divergences() if d not in GRID_DIVERGENCES] + [
    "alpha:0.5",
    "alpha:2",
    "alpha:-1",
    "alpha:1.5",
]
ESTIMATORS = known_estimators()
GRID_ESTIMATORS = paper_estimators()
ALL_CELLS = [(d, e) for d in GRID_DIVERGENCES + EXTENSIONS for e in ESTIMATORS]
AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def make_batch(
    b: int = 6,
    t: int = 40,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    spread: float = 0.3,
    log_mu_scale: float = 6.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(old_log_prob, log_prob, advantages, response_mask) with varied mu and ratios.

    mu mixes confident tokens (log mu near 0) and rare ones; log pi = log mu + noise, kept <= 0;
    some tokens have pi = 1 exactly; the mask ends sequences early and empties one row.
    """
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(b, t, generator=g, dtype=torch.float64)
    old = torch.where(
        u < 0.4,
        -torch.rand(b, t, generator=g, dtype=torch.float64) * 0.05,
        -torch.rand(b, t, generator=g, dtype=torch.float64) * log_mu_scale,
    )
    new = (old + spread * torch.randn(b, t, generator=g, dtype=torch.float64)).clamp(max=0.0)
    adv = torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t).clone()
    adv[:, ::7] = torch.randn(b, len(range(0, t, 7)), generator=g, dtype=torch.float64)
    adv[0, :3] = 0.0
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(torch.float64)
    if b > 2:
        mask[2] = 0.0
    return old.to(dtype), new.to(dtype), adv.to(dtype), mask.to(dtype)


def reference_token_loss(
    old: torch.Tensor,
    new: torch.Tensor,
    adv: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    ratio_bounds: tuple[float, float] | None,
    dual_clip: float | None,
) -> torch.Tensor:
    """The objective (docs/conventions.md, the paper's Eq. 11) written out directly with autograd
    (the test oracle)."""
    if ratio_bounds is not None:
        lo = lo.clamp(min=ratio_bounds[0])
        hi = hi.clamp(max=ratio_bounds[1])
    r = torch.exp(torch.clamp(new - old, -20.0, 20.0))
    clipped = torch.clamp(r, lo.to(r.dtype), hi.to(r.dtype))  # inclusive, like verl's clamp
    j = torch.minimum(r * adv, clipped * adv)
    if dual_clip is not None:
        j = torch.where(adv < 0, torch.maximum(j, dual_clip * adv), j)
    return -j


def finite(x: torch.Tensor) -> bool:
    return bool(torch.isfinite(x).all())


__all__ = [
    "AGG_MODES",
    "ALL_CELLS",
    "ESTIMATORS",
    "EXTENSIONS",
    "GRID_DIVERGENCES",
    "GRID_ESTIMATORS",
    "finite",
    "make_batch",
    "math",
]
