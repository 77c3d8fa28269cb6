"""Vectorised, safeguarded root finding for the proximal-region bounds without a closed form.

Every bound solves one monotone equation h(t) = 0 in the log-ratio t = log r, per token, on a
bracket [inner, outer] with h(inner) <= 0 < h(outer) (h is nan or +inf where the generator
overflows, which counts as "outside"). The iteration is Newton's method in t, replaced by a
bisection step whenever the Newton step leaves the current bracket or is not finite (rtsafe of
Numerical Recipes), on whole tensors: no Python loop over tokens. It stops when every element
has moved by less than ``tol`` (absolute in t, i.e. relative in r) or its bracket is that narrow.

:func:`inner_table` tabulates a cell's solved bounds once on a grid of mu whose row is read
off the float32 bits of -log mu (one shift per token): the loss's exact pre-test of which
tokens need a solve, and the starting points of those solves.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .divergences import Divergence, get_divergence
from .estimators import Estimator, binary_estimate, get_estimator, log1mexp

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


def solve_side(
    div: Divergence,
    est: Estimator,
    delta: float,
    log_mu: Tensor,
    side: str | Tensor,
    x0: Tensor | None = None,
) -> Tensor:
    """r_lo (``side="lo"``) or r_hi of cell (div, est) at threshold delta, as r (float64).

    ``log_mu``: float64, any shape (the result's); ``side``: "lo", "hi", or a bool tensor of
    that shape (True: r_hi) for a mix; ``x0``: starting log-ratios (same shape).
    """
    if est.kind == "bernoulli":
        return solve_binary(div, delta, log_mu, side, x0=x0)
    assert est.weight is not None
    e = delta / est.weight(log_mu)
    if isinstance(side, str):
        return solve_abs(div, e, side, x0=x0)
    out = torch.empty_like(e)
    for name, sel in (("hi", side), ("lo", ~side)):
        if bool(sel.any()):
            out[sel] = solve_abs(div, e[sel], name, x0=None if x0 is None else x0[sel])
    return out


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
    div: Divergence, delta: float, log_mu: Tensor, side: str | Tensor, x0: Tensor | None = None
) -> Tensor:
    """Bound of {r : binary D(r; mu) <= delta} on ``side`` of r = 1, as r (float64 tensor).

    Binary D is convex in r with its minimum 0 at r = 1, so each side is one monotone piece.
    The low side is solved in t = log r. On the high side, tokens whose bound has pi = mu r
    <= 1/2 are solved in t on [0, log(1/(2 mu))]; the others use the symmetry
    D(r; mu) = D(q; 1 - mu), q = (1 - mu r)/(1 - mu), and solve for log q (a low-side solve at
    1 - mu), so the steep end r -> 1/mu (q -> 0) is the flat far end of that solve and r keeps
    its relative accuracy. ``x0`` is a starting log-ratio (e.g. the token's own). ``side`` is
    "lo", "hi" or a bool tensor of ``log_mu``'s shape (True: hi): all three kinds of solve are
    D(x; l) = delta on a bracket from 0, so a mix runs as one (elementwise the same) solve.
    """
    log_mu = log_mu.to(torch.float64)
    if x0 is not None:
        x0 = x0.to(torch.float64).expand(log_mu.shape)
    if isinstance(side, str) and side == "lo":
        return torch.exp(_binary_low(div, delta, log_mu, x0))
    up = torch.ones_like(log_mu, dtype=torch.bool) if isinstance(side, str) else side
    log_nu = log1mexp(log_mu)  # log(1 - mu)
    t_half = -log_mu - math.log(2.0)  # pi = 1/2
    d_half, _ = binary_estimate(div, t_half, log_mu)
    in_t = (t_half > 0) & (d_half > delta)  # the bound has pi < 1/2: solve in t
    via_q = up & ~in_t  # r_hi solved for log q
    lm = torch.where(via_q, log_nu, log_mu)
    inner = torch.zeros_like(log_mu)
    outer = torch.where(up & in_t, t_half, torch.full_like(log_mu, -T_FAR))
    if x0 is not None:  # the token's own t, or its log q = log(1 - mu r) - log(1 - mu)
        xq = log1mexp(torch.clamp(log_mu + x0, max=0.0)) - log_nu
        xq = torch.nan_to_num(xq, nan=-T_FAR, neginf=-T_FAR)
        x0 = torch.where(via_q, xq, x0)
    x = _solve_d(div, delta, lm, inner, outer, x0)
    never = torch.isneginf(x)
    from_q = torch.exp(log1mexp(log_nu + x) - log_mu)  # r = (1 - (1 - mu) q) / mu
    r_hi = torch.where(in_t, torch.exp(x), from_q)
    r_hi = torch.where(never, torch.exp(-log_mu), r_hi)
    r_hi = torch.where(log_mu >= 0, torch.ones_like(r_hi), r_hi)  # mu = 1: r <= 1/mu = 1
    return r_hi if isinstance(side, str) else torch.where(up, r_hi, torch.exp(x))


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


# ---- inner regions by the float32 bits of -log mu: the loss's pre-test for solved cells -------
#: a token's row is the top 16 bits of -log mu as a float32 (sign 0, 8 exponent and 7 mantissa
#: bits): 128 rows an octave, one abs and one shift per token (no log, no clamp)
ROW_SHIFT = 16
N_ROWS = 1 << (31 - ROW_SHIFT)  # every non-negative float32, inf (row 0x7F80) and nan included
_INF_ROW = 0x7F80
_X_SMALL, _X_LARGE = 2.0**-40, 700.0  # rows solved; below: mu = 1's region; above: the last
_SAFETY = 1e-6  # inner bounds shrink by this relative margin (solver accuracy ~1e-12)


@dataclass(frozen=True, eq=False)
class InnerTable:
    """Row k: the region at x_k = -log mu, x_k the float32 with bits k << ROW_SHIFT.

    Regions widen as mu falls, so row k's region lies inside the region of every token with
    -log mu in [x_k, x_(k+1)): a token inside it is inside its own region, exactly.
    """

    x: Tensor  # (N_ROWS,) float64 x_k
    lo: Tensor  # (N_ROWS,) float64 r_lo at x_k
    hi: Tensor  # (N_ROWS,) float64 r_hi at x_k (may be inf)
    derived: dict = field(default_factory=dict)  # (dtype, device, b_lo, b_hi) -> tensors

    @staticmethod
    def rows(log_mu: Tensor) -> Tensor:
        """Row of each token: int32, ``log_mu``'s shape (float32 or float64, <= 0)."""
        x = log_mu.abs()  # -log mu, and +0.0 for log mu = -0.0
        if x.dtype == torch.float32:
            return x.view(torch.int32).bitwise_right_shift_(ROW_SHIFT)
        k = x.to(torch.float32).view(torch.int32).bitwise_right_shift_(ROW_SHIFT)
        return k.sub_(1).clamp_(min=0)  # the float32 rounding may go up: one row down is safe

    def outside(self, log_mu: Tensor, r: Tensor, adv: Tensor, b_lo: float, b_hi: float) -> Tensor:
        """Where a token may be clipped by its exact region on the side its advantage uses.

        (B, T) tensors of one float dtype; True where r > the inner r_hi (sign bit of A clear)
        or r < the inner r_lo (sign bit set: the row holds -r_lo, compared with -r). A side
        that ``[b_lo, b_hi]`` cuts anyway is open. False is exact: r is inside that side of
        the token's region intersected with ``[b_lo, b_hi]``.
        """
        key = (r.dtype, r.device, b_lo, b_hi)
        if key not in self.derived:
            lo = (self.lo * (1.0 + _SAFETY)).clamp(max=1.0)
            hi = (self.hi * (1.0 - _SAFETY)).clamp(min=1.0)
            lo, hi = lo.where(lo > b_lo, 0.0), hi.where(hi < b_hi, math.inf)
            lo[_INF_ROW + 1 :], hi[_INF_ROW + 1 :] = 1.0, 1.0  # nan rows: nothing is inside
            lo, hi = _round(lo, r.dtype, up=True), _round(hi, r.dtype, up=False)
            self.derived[key] = torch.cat([hi, -lo]).to(r.device)
        k = self.rows(log_mu)
        if adv.dtype == torch.float32:  # + N_ROWS where the sign bit is set
            k |= adv.view(torch.int32).bitwise_right_shift(31).bitwise_and_(N_ROWS)
        else:
            k |= torch.signbit(adv).to(torch.int32).mul_(N_ROWS)
        thr = self.derived[key].index_select(0, k.reshape(-1)).view(r.shape)
        return torch.copysign(r, adv) > thr

    def guess(self, log_mu: Tensor, up: Tensor) -> Tensor:
        """Starting log-ratio of the exact solves (float64 ``log_mu`` and bool ``up``, 1-d; up:
        r_hi, else r_lo): log of the bound, linear in x between the token's row and the next."""
        key = (None, log_mu.device, 0.0, 0.0)
        if key not in self.derived:
            tab = torch.log(torch.stack([self.lo, self.hi]))  # (2, N_ROWS)
            self.derived[key] = (self.x.to(log_mu.device), tab.view(-1).to(log_mu.device))
        xs, tab = self.derived[key]
        x, k = log_mu.abs(), self.rows(log_mu.float()).long().clamp_(max=_INF_ROW - 1)
        j = k + up.long() * N_ROWS
        a, b, xa = tab[j], tab[j + 1], xs[k]
        g = a + ((x - xa) / (xs[k + 1] - xa)).clamp_(0.0, 1.0) * (b - a)
        return torch.where(torch.isfinite(g), g, torch.where(torch.isfinite(a), a, b))


@functools.lru_cache(maxsize=64)
def inner_table(divergence: str, estimator: str, delta: float) -> InnerTable:
    """The :class:`InnerTable` of a cell without closed form, not mc (built once: ~6300
    float64 solves a side)."""
    k = torch.arange(N_ROWS, dtype=torch.int32)
    x = k.bitwise_left_shift(ROW_SHIFT).view(torch.float32).to(torch.float64)
    solved = (x >= _X_SMALL) & (x <= _X_LARGE)
    lm = torch.cat([torch.zeros(1, dtype=torch.float64), -x[solved]])  # mu = 1, then the rows
    div, est = get_divergence(divergence), get_estimator(estimator)
    lo, hi = solve_side(div, est, delta, lm, "lo"), solve_side(div, est, delta, lm, "hi")
    # Monotone in mu (docs/conventions.md); enforce it against rounding so the inner test stays safe.
    lo = torch.cummax(lo.flip(0), 0).values.flip(0)
    hi = torch.cummin(hi.flip(0), 0).values.flip(0)
    j = torch.cumsum(solved, 0)  # row k -> the last solved x_j <= x_k (0: the region at mu = 1)
    return InnerTable(x=x, lo=lo[j], hi=hi[j])


def _round(x: Tensor, dtype: torch.dtype, up: bool) -> Tensor:
    """float64 ``x`` in ``dtype``, rounded up (or down) so that the inner region never grows."""
    y = x.to(dtype)
    bad = (y.to(torch.float64) < x) if up else (y.to(torch.float64) > x)
    far = torch.full_like(y, math.inf if up else -math.inf)
    return torch.where(bad, torch.nextafter(y, far), y)
