"""Vectorised, safeguarded root finding for the proximal-region bounds without a closed form.

Every bound solves one monotone equation h(t) = 0 in the log-ratio t = log r, per token, on a
bracket [inner, outer] with h(inner) <= 0 < h(outer) (h is nan or +inf where the generator
overflows, which counts as "outside"). The iteration is Newton's method in t, replaced by a
bisection step whenever the Newton step leaves the current bracket or is not finite (rtsafe of
Numerical Recipes), on whole tensors: no Python loop over tokens. It stops when every element
has moved by less than ``tol`` (absolute in t, i.e. relative in r) or its bracket is that narrow.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .divergences import Divergence
from .estimators import binary_estimate, log1mexp

Tensor = torch.Tensor

#: Far end of the search in t = log r (float64 overflows at ~709; nan/inf there counts as outside).
T_FAR = 740.0
_TOL = 1e-12
_MAX_ITER = 200


def rtsafe(
    h: Callable[..., tuple[Tensor, Tensor]],
    inner: Tensor,
    outer: Tensor,
    x0: Tensor | None = None,
    params: tuple[Tensor, ...] = (),
    tol: float = _TOL,
    max_iter: int = _MAX_ITER,
) -> Tensor:
    """Root of h in the bracket between ``inner`` (h <= 0) and ``outer`` (h > 0), elementwise.

    ``h(x, *params)`` returns (value, derivative); ``params`` are per-element tensors (same
    shape as ``inner``) handed to h alongside x. ``x0`` is the starting point (clamped into the
    bracket; one unit of log-ratio beyond ``inner`` by default). Elements that have converged
    leave the active set, so the cost follows the slowest few only in the number of iterations.
    Returns x (1-d, flattened) with |x - root| <~ tol (1 + |x|).
    """
    x_in, x_out = inner.reshape(-1).clone(), outer.reshape(-1).clone()
    params = tuple(p.reshape(-1) for p in params)
    if x0 is None:
        x0 = torch.where(x_out >= x_in, x_in + 1.0, x_in - 1.0)
    lo, hi = torch.minimum(x_in, x_out), torch.maximum(x_in, x_out)
    result = torch.minimum(torch.maximum(x0.reshape(-1), lo), hi)
    active = torch.nonzero(hi > lo).squeeze(1)  # zero-width brackets are solved already
    x = result[active]
    dx_old = torch.full_like(x, math.inf)  # the first Newton step is free
    x_in, x_out = x_in[active], x_out[active]
    ps = tuple(p[active] for p in params)
    for _ in range(max_iter):
        if active.numel() == 0:
            break
        v, dv = h(x, *ps)
        inside = v <= 0  # nan (overflow) counts as outside
        x_in = torch.where(inside, x, x_in)
        x_out = torch.where(inside, x_out, x)
        lo, hi = torch.minimum(x_in, x_out), torch.maximum(x_in, x_out)
        step = v / dv
        newton = x - step
        scale = tol * (1.0 + x.abs())
        small = step.abs() <= scale  # converged (False for nan)
        # NR's rtsafe: Newton only inside the bracket and while it at least halves the step.
        ok = small | ((newton > lo) & (newton < hi) & (step.abs() <= 0.5 * dx_old))
        x_new = torch.where(ok, newton, 0.5 * (lo + hi))
        dx_old = torch.where(ok, (x_new - x).abs(), 0.5 * (hi - lo))
        done = small | ((hi - lo) <= scale)
        result[active] = x_new
        keep = torch.nonzero(~done).squeeze(1)
        if keep.numel() < active.numel():
            active, x, dx_old = active[keep], x_new[keep], dx_old[keep]
            x_in, x_out = x_in[keep], x_out[keep]
            ps = tuple(p[keep] for p in ps)
        else:
            x = x_new
    return result


def solve_abs(div: Divergence, e: Tensor, side: str, x0: Tensor | None = None) -> Tensor:
    """Bound of {r : |f(r)| <= e} on ``side`` ("lo" or "hi") of r = 1, as r (float64 tensor).

    The component containing r = 1: on each side |f| is split into its monotone pieces with
    ``div.argmin`` (f <= 0 between 1 and argmin, then increasing away from it).
    """
    e = e.to(torch.float64)
    am = div.argmin
    ln_am = math.log(am) if am > 0 else -math.inf
    sign = 1.0 if side == "hi" else -1.0
    far = sign * T_FAR
    zeros = torch.zeros_like(e)
    # Stage A: the piece between 1 and argmin where f <= 0 (only if argmin lies on this side).
    if (side == "hi" and am > 1.0) or (side == "lo" and am < 1.0):
        end_a = max(-T_FAR, min(T_FAR, ln_am))
        f_end = float(div.f(torch.tensor(end_a, dtype=torch.float64)))
        crosses_a = (-f_end - e) > 0  # -f reaches e before argmin
        sgn = torch.where(crosses_a, -torch.ones_like(e), torch.ones_like(e))
        inner = torch.where(crosses_a, zeros, torch.full_like(e, end_a))
        outer = torch.where(crosses_a, torch.full_like(e, end_a), torch.full_like(e, far))
    else:
        sgn = torch.ones_like(e)
        inner, outer = zeros, torch.full_like(e, far)

    def h(x: Tensor, sgn: Tensor, e: Tensor) -> tuple[Tensor, Tensor]:
        return sgn * div.f(x) - e, sgn * div.df(x)

    sgn, inner, outer, e = torch.broadcast_tensors(sgn, inner, outer, e)
    v_out, _ = h(outer, sgn, e)
    never = v_out <= 0  # stays inside up to the far end: r_lo = 0 / r_hi = inf
    inner = torch.where(never, outer, inner)  # nothing to solve there
    x0 = None if x0 is None else x0.to(torch.float64).expand(e.shape)
    t = rtsafe(h, inner, outer, x0, params=(sgn, e)).reshape(e.shape)
    r = torch.exp(t)
    edge = 0.0 if side == "lo" else math.inf
    return torch.where(never, torch.full_like(r, edge), r)


def solve_binary(
    div: Divergence, delta: float, log_mu: Tensor, side: str, x0: Tensor | None = None
) -> Tensor:
    """Bound of {r : binary D(r; mu) <= delta} on ``side`` of r = 1, as r (float64 tensor).

    Binary D is convex in r with its minimum 0 at r = 1, so each side is one monotone piece.
    The low side is solved in t = log r. On the high side, tokens whose bound has pi = mu r
    <= 1/2 are solved in t on [0, log(1/(2 mu))]; the others use the symmetry
    D(r; mu) = D(q; 1 - mu), q = (1 - mu r)/(1 - mu), and solve for log q (a low-side solve at
    1 - mu), so the steep end r -> 1/mu (q -> 0) is the flat far end of that solve and r keeps
    its relative accuracy. ``x0`` is a starting log-ratio (e.g. the token's own).
    """
    log_mu = log_mu.to(torch.float64)
    if x0 is not None:
        x0 = x0.to(torch.float64).expand(log_mu.shape)
    if side == "lo":
        return torch.exp(_binary_low(div, delta, log_mu, x0))
    log_nu = log1mexp(log_mu)  # log(1 - mu)
    t_half = -log_mu - math.log(2.0)  # pi = 1/2
    d_half, _ = binary_estimate(div, t_half, log_mu)
    in_t = (t_half > 0) & (d_half > delta)  # the bound has pi < 1/2: solve in t
    lm = torch.where(in_t, log_mu, log_nu)
    inner = torch.zeros_like(log_mu)
    outer = torch.where(in_t, t_half, torch.full_like(log_mu, -T_FAR))
    if x0 is not None:  # the token's own t, or its log q = log(1 - mu r) - log(1 - mu)
        xq = log1mexp(torch.clamp(log_mu + x0, max=0.0)) - log_nu
        xq = torch.nan_to_num(xq, nan=-T_FAR, neginf=-T_FAR)
        x0 = torch.where(in_t, x0, xq)
    x = _solve_d(div, delta, lm, inner, outer, x0)
    never = torch.isneginf(x)
    from_q = torch.exp(log1mexp(log_nu + x) - log_mu)  # r = (1 - (1 - mu) q) / mu
    r_hi = torch.where(in_t, torch.exp(x), from_q)
    r_hi = torch.where(never, torch.exp(-log_mu), r_hi)
    return torch.where(log_mu >= 0, torch.ones_like(r_hi), r_hi)  # mu = 1: r <= 1/mu = 1


def _binary_low(div: Divergence, delta: float, log_mu: Tensor, x0: Tensor | None) -> Tensor:
    """log r_lo of the binary region (-inf where D(r -> 0) <= delta)."""
    outer = torch.full_like(log_mu, -T_FAR)
    return _solve_d(div, delta, log_mu, torch.zeros_like(log_mu), outer, x0)


def _solve_d(
    div: Divergence, delta: float, log_mu: Tensor, inner: Tensor, outer: Tensor, x0: Tensor | None
) -> Tensor:
    """x in [inner, outer] with binary D(x; log_mu) = delta; -inf where D(outer) <= delta."""

    def h(x: Tensor, lm: Tensor) -> tuple[Tensor, Tensor]:
        d, dd = binary_estimate(div, x, lm)
        return d - delta, dd

    v_out, _ = h(outer, log_mu)
    never = v_out <= 0
    inner = torch.where(never, outer, inner)  # nothing to solve there
    t = rtsafe(h, inner, outer, x0, params=(log_mu,)).reshape(log_mu.shape)
    return torch.where(never, torch.full_like(t, -math.inf), t)
