"""Per-cell tables of the region on a grid of mu: a cheap, safe pre-test for the solved cells.

For cells without a closed form (kl-binary, the extensions) the loss must know, per token,
whether r lies outside [r_lo(mu), r_hi(mu)], and the exact bound only where it does. Regions
widen monotonically as mu falls (docs/conventions.md), so on a grid of mu the bounds at the next larger grid
mu are an *inner* region for every token in between: a token inside them is inside its own
region, with no solve. The grid is uniform in v = log(-log mu) (fine both as mu -> 1 and as
mu -> 0), built once per (divergence, estimator, delta) in float64 by the exact solver, and
also gives the starting point of the exact Newton solve for the few tokens outside.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from .regions import region_from_log_mu

Tensor = torch.Tensor

V_MIN = math.log(1e-9)  # -log mu below this (mu > 1 - 1e-9): use the bounds at mu = 1
V_MAX = math.log(745.0)  # mu below e^-745: the last node
N_NODES = 4096
_SAFETY = 1e-6  # the inner bounds are shrunk by this relative margin (float32 rounding)


@dataclass(frozen=True)
class RegionTable:
    """Row 0: mu = 1; row k + 1: node k at v_k = V_MIN + k h (mu decreasing with k)."""

    log_lo: Tensor  # (N + 1,) float64 log r_lo at the rows (-inf where r_lo = 0)
    log_hi: Tensor  # (N + 1,) float64 log r_hi (inf where r_hi = inf)
    inner_lo: dict[torch.dtype, Tensor]  # (N + 1,) r_lo * (1 + safety), per dtype
    inner_hi: dict[torch.dtype, Tensor]  # (N + 1,) r_hi * (1 - safety), per dtype
    step: float

    def position(self, log_mu: Tensor) -> Tensor:
        """Fractional row of each token: in [0, N]; row 0 for mu = 1 (any float dtype)."""
        v = torch.log(-log_mu)  # -inf at mu = 1
        return ((v - V_MIN) / self.step).clamp_(-1.0, N_NODES - 1.0).add_(1.0)

    def inner(self, log_mu: Tensor) -> tuple[Tensor, Tensor]:
        """Inner region per token (a sub-interval of its exact region), in log_mu's dtype."""
        idx = self.position(log_mu).floor_().to(torch.int64)
        # float32 and float64 only (the loss upcasts other dtypes to float32 for this test)
        lo = _on(self.inner_lo[log_mu.dtype], log_mu.device)
        hi = _on(self.inner_hi[log_mu.dtype], log_mu.device)
        return lo[idx], hi[idx]

    def guess(self, log_mu: Tensor, side: str) -> Tensor:
        """Starting log-ratio for the exact solve: interpolation between the rows (float64)."""
        pos = self.position(log_mu.to(torch.float64))
        k = pos.floor().clamp_(max=N_NODES - 1.0)
        w = pos - k
        k = k.to(torch.int64)
        tab = _on(self.log_hi if side == "hi" else self.log_lo, log_mu.device)
        a, b = tab[k], tab[k + 1]
        g = a + w * (b - a)
        return torch.where(torch.isfinite(g), g, torch.where(torch.isfinite(a), a, b))


_DEVICE_COPIES: dict[tuple[int, torch.device], Tensor] = {}


def _on(x: Tensor, device: torch.device) -> Tensor:
    """The (small, cached) table ``x`` on ``device``; tables are built on the CPU."""
    if x.device == device:
        return x
    key = (id(x), device)
    if key not in _DEVICE_COPIES:
        _DEVICE_COPIES[key] = x.to(device)
    return _DEVICE_COPIES[key]


@functools.lru_cache(maxsize=64)
def region_table(divergence: str, estimator: str, delta: float) -> RegionTable:
    h = (V_MAX - V_MIN) / (N_NODES - 1)
    v = V_MIN + h * torch.arange(N_NODES, dtype=torch.float64)
    log_mu = torch.cat([torch.zeros(1, dtype=torch.float64), -torch.exp(v)])
    lo, hi = region_from_log_mu(divergence, estimator, delta, log_mu)
    lo = torch.as_tensor(lo, dtype=torch.float64).expand(log_mu.shape)
    hi = torch.as_tensor(hi, dtype=torch.float64).expand(log_mu.shape)
    # Monotone in mu (docs/conventions.md); enforce it against rounding so the inner test stays safe.
    lo = torch.cummax(lo.flip(0), 0).values.flip(0)
    hi = torch.cummin(hi.flip(0), 0).values.flip(0)
    in_lo = (lo * (1.0 + _SAFETY)).clamp(max=1.0)
    in_hi = (hi * (1.0 - _SAFETY)).clamp(min=1.0)
    return RegionTable(
        log_lo=torch.log(lo),
        log_hi=torch.log(hi),
        inner_lo={
            torch.float64: in_lo,
            torch.float32: _round(in_lo, torch.float32, up=True),
        },
        inner_hi={
            torch.float64: in_hi,
            torch.float32: _round(in_hi, torch.float32, up=False),
        },
        step=h,
    )


def _round(x: Tensor, dtype: torch.dtype, up: bool) -> Tensor:
    """x in ``dtype``, rounded up (or down) so the inner region never grows."""
    y = x.to(dtype)
    bad = (y.to(torch.float64) < x) if up else (y.to(torch.float64) > x)
    nxt = torch.nextafter(y, torch.full_like(y, math.inf if up else -math.inf))
    return torch.where(bad, nxt, y)
