"""Calibration delta = |f(r_min)| and the per-token proximal region [r_lo, r_hi] (the paper's
Eq. 10; docs/conventions.md "Calibration", "Proximal region").

R(delta) is the interval of ratios r containing 1 on which the estimate D(r) <= delta (the
component containing 1 where the set is not connected, only for ``rkl``). The bounds depend only
on (divergence, estimator, delta, mu). Cells with a closed form (docs/conventions.md) use it; the others
(kl-binary and every extension cell) use the vectorised safeguarded Newton solver of
:mod:`.solver` in float64. r_lo >= 0, r_hi may be +inf, binary r_hi <= 1/mu, 1 always inside.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import numpy as np

from .checks import check_delta, check_r_min
from .defaults import R_MIN
from .divergences import get_divergence
from .estimators import get_estimator
from .solver import solve_abs, solve_side

Tensor = torch.Tensor
Bound = Tensor | float
ClosedForm = Callable[[float, Tensor], tuple[Bound, Bound]]

_CLOSED: dict[tuple[str, str], ClosedForm] = {}


def closed_form(div: str, est: str) -> Callable[[ClosedForm], ClosedForm]:
    """Register the closed form of cell (div, est): fn(delta, log_mu) -> (r_lo, r_hi).

    ``log_mu`` is a tensor (any float dtype); mc forms may return Python floats. Tensors
    returned are new (not ``log_mu``, not each other): callers may clamp them in place.
    """

    def deco(fn: ClosedForm) -> ClosedForm:
        _CLOSED[(div, est)] = fn
        return fn

    return deco


def has_closed_form(divergence: str, estimator: str) -> bool:
    return (divergence, estimator) in _CLOSED


def calibrate_delta(divergence: str, r_min: float = R_MIN) -> float:
    """delta = |f(r_min)| (the paper's §4.1, docs/conventions.md "Calibration"); every estimator of a
    divergence reuses it.

    tv: 0.2, chi2: 0.04, hellinger: (1 - sqrt(0.8))^2 ~ 0.011146, kl: -log 0.8 ~ 0.22314.
    """
    div = get_divergence(divergence)
    r = check_r_min(r_min)
    delta = abs(div.scalar(r))
    if not (math.isfinite(delta) and delta > 0):
        raise ValueError(f"calibration gives delta = {delta} for {divergence!r} at r_min = {r}")
    return delta


# ---- closed forms (e = delta for mc, delta / mu for atomic) ----------------------------------
# Tensor forms work in place on fresh tensors (the same arithmetic, fewer passes over (B, T)).
def _e(delta: float, est: str, log_mu: Tensor) -> Bound:
    return delta if est == "mc" else torch.neg(log_mu).exp_().mul_(delta)


def _sqrt_(x: Bound) -> Bound:
    return math.sqrt(x) if isinstance(x, float) else x.sqrt_()


def _pos_(x: Bound) -> Bound:
    return max(0.0, x) if isinstance(x, float) else x.clamp_(min=0.0)


def _one_plus_(x: Bound) -> Bound:
    return 1.0 + x if isinstance(x, float) else x.add_(1.0)


def _exp_(x: Bound) -> Bound:
    return x.exp_() if isinstance(x, Tensor) else (math.exp(x) if x < 709.0 else math.inf)


def _square_(x: Bound) -> Bound:
    return x * x if isinstance(x, float) else x.square_()


def _abs_forms(est: str) -> None:
    @closed_form("tv", est)
    def _tv(delta: float, log_mu: Tensor) -> tuple[Bound, Bound]:
        e = _e(delta, est, log_mu)
        return _pos_(1.0 - e), _one_plus_(e)

    @closed_form("chi2", est)
    def _chi2(delta: float, log_mu: Tensor) -> tuple[Bound, Bound]:
        s = _sqrt_(_e(delta, est, log_mu))
        return _pos_(1.0 - s), _one_plus_(s)

    @closed_form("kl", est)
    def _kl(delta: float, log_mu: Tensor) -> tuple[Bound, Bound]:
        e = _e(delta, est, log_mu)
        return _exp_(-e), _exp_(e)

    @closed_form("hellinger", est)
    def _hellinger(delta: float, log_mu: Tensor) -> tuple[Bound, Bound]:
        s = _sqrt_(_e(delta, est, log_mu))
        return _square_(_pos_(1.0 - s)), _square_(_one_plus_(s))


_abs_forms("mc")
_abs_forms("atomic")


@closed_form("tv", "binary")
def _tv_binary(delta: float, log_mu: Tensor) -> tuple[Tensor, Tensor]:
    # |pi - mu| <= delta / 2 (DPPO with tau = delta / 2).
    inv_mu = torch.neg(log_mu).exp_()
    k = inv_mu * (0.5 * delta)
    lo = (1.0 - k).clamp_(min=0.0)
    return lo, torch.minimum(k.add_(1.0), inv_mu, out=k)


@closed_form("chi2", "binary")
def _chi2_binary(delta: float, log_mu: Tensor) -> tuple[Tensor, Tensor]:
    # (1 - mu) / mu = expm1(-log mu): exact as mu -> 1 (the region closes to 1).
    k = torch.neg(log_mu)
    inv_mu = torch.exp(k)
    k = k.expm1_().mul_(delta).sqrt_()
    lo = (1.0 - k).clamp_(min=0.0)
    return lo, torch.minimum(k.add_(1.0), inv_mu, out=k)


@closed_form("hellinger", "binary")
def _hellinger_binary(delta: float, log_mu: Tensor) -> tuple[Tensor, Tensor]:
    inv_mu = torch.neg(log_mu).exp_()
    if delta >= 2.0:  # binary Hellinger never exceeds 2: every ratio with mu r <= 1 is inside
        return torch.zeros_like(inv_mu), inv_mu
    c = 1.0 - 0.5 * delta
    s = math.sqrt(delta * (1.0 - 0.25 * delta))
    ks = torch.neg(log_mu).expm1_().sqrt_().mul_(s)
    # c - ks <= 0 exactly when mu <= delta (1 - delta/4): then r_lo = 0.
    lo = (c - ks).clamp_(min=0.0).square_()
    # sqrt(mu) >= c: r_hi = 1/mu (lifted past 1/mu, then capped by it)
    hi = ks.add_(c).square_().masked_fill_(log_mu >= 2.0 * math.log(c), torch.finfo(ks.dtype).max)
    return lo, torch.minimum(hi, inv_mu, out=hi)


# ---- the region ------------------------------------------------------------------------------
def region_from_log_mu(
    divergence: str, estimator: str, delta: float, log_mu: Tensor
) -> tuple[Bound, Bound]:
    """(r_lo, r_hi) from log mu, unvalidated (internal; ``log_mu <= 0``).

    Closed forms are evaluated in ``log_mu``'s dtype (mc ones return Python floats); solved
    cells in float64.
    """
    if (divergence, estimator) in _CLOSED:
        return _CLOSED[(divergence, estimator)](delta, log_mu)
    if estimator == "mc":  # mu-independent: one scalar solve
        return mc_scalar_bounds(divergence, delta)
    div, est, lm = get_divergence(divergence), get_estimator(estimator), log_mu.to(torch.float64)
    return solve_side(div, est, delta, lm, "lo"), solve_side(div, est, delta, lm, "hi")


@functools.lru_cache(maxsize=256)
def mc_scalar_bounds(divergence: str, delta: float) -> tuple[float, float]:
    """mc bounds as floats (a single solve, cached)."""
    if (divergence, "mc") in _CLOSED:
        lo, hi = _CLOSED[(divergence, "mc")](delta, torch.zeros((), dtype=torch.float64))
        return float(lo), float(hi)
    div = get_divergence(divergence)
    e = torch.tensor([delta], dtype=torch.float64)
    return float(solve_abs(div, e, "lo")[0]), float(solve_abs(div, e, "hi")[0])


def check_mu(mu: object) -> Tensor:
    if not isinstance(mu, torch.Tensor):
        raise TypeError(
            f"mu must be a torch.Tensor of probabilities in (0, 1], got {type(mu).__name__}"
        )
    if not mu.is_floating_point():
        raise TypeError(
            f"mu must be a floating-point tensor of probabilities in (0, 1], got {mu.dtype}"
        )
    if mu.numel() and not bool(((mu > 0) & (mu <= 1)).all()):
        bad = mu[~((mu > 0) & (mu <= 1))]
        raise ValueError(
            f"mu must lie in (0, 1] (behaviour probabilities); got {bad.numel()} value(s) outside, "
            f"e.g. {float(bad.flatten()[0])!r}"
        )
    return mu


def proximal_region(
    divergence: str, estimator: str, delta: float, mu: Tensor
) -> tuple[Tensor, Tensor]:
    """Per-token proximal region (r_lo, r_hi) of cell (divergence, estimator) at threshold delta.

    Args:
        divergence: a name of :func:`~gppo.objectives.divergences.known_divergences` or
            ``alpha:<a>``.
        estimator: ``mc``, ``atomic`` or ``binary``.
        delta: the threshold (> 0), e.g. :func:`calibrate_delta`.
        mu: behaviour probabilities in (0, 1], any shape (e.g. (B, T)).

    Returns:
        (r_lo, r_hi), float64 tensors of ``mu``'s shape: r_lo >= 0, r_hi may be +inf, binary
        r_hi <= 1/mu, and r_lo <= 1 <= r_hi. Closed forms (docs/conventions.md) where given; otherwise a
        vectorised safeguarded Newton solve in float64, accurate to ~1e-12 relative.
    """
    get_divergence(divergence)
    get_estimator(estimator)
    d = check_delta(delta)
    mu = check_mu(mu)
    log_mu = torch.log(mu.detach().to(torch.float64))
    lo, hi = region_from_log_mu(divergence, estimator, d, log_mu)
    shape = mu.shape
    lo_t = torch.as_tensor(lo, dtype=torch.float64, device=mu.device).expand(shape).clone()
    hi_t = torch.as_tensor(hi, dtype=torch.float64, device=mu.device).expand(shape).clone()
    return lo_t, hi_t


def clip_interval(
    divergence: str,
    estimator: str,
    delta: float,
    mu: Tensor | np.ndarray | Sequence[float],
    ratio_bounds: tuple[float, float] | None = None,
) -> tuple[Tensor, Tensor]:
    """The clip interval the loss uses per token: the proximal region intersected with
    ``ratio_bounds`` (r_lo <- max(r_lo, lo), r_hi <- min(r_hi, hi); docs/conventions.md
    "Dual clip").

    Args:
        divergence, estimator, delta: as for :func:`proximal_region`.
        mu: behaviour probabilities in (0, 1], a tensor or array of any shape or a sequence of
            floats.
        ratio_bounds: ``(lo, hi)`` with 0 <= lo < 1 < hi, or None for the bare region.

    Returns:
        (r_lo, r_hi), float64 tensors of ``mu``'s shape.
    """
    if not isinstance(mu, torch.Tensor):
        mu = torch.as_tensor(mu, dtype=torch.float64)
    lo, hi = proximal_region(divergence, estimator, delta, mu)
    if ratio_bounds:
        lo, hi = lo.clamp(min=ratio_bounds[0]), hi.clamp(max=ratio_bounds[1])
    return lo, hi


@functools.lru_cache(maxsize=256)
def log_mu_thresholds(
    divergence: str, estimator: str, delta: float, b_lo: float, b_hi: float
) -> tuple[float, float]:
    """(l_lo, l_hi) with r_lo(mu) < b_lo iff log mu < l_lo and r_hi(mu) > b_hi iff log mu < l_hi.

    Regions widen monotonically as mu falls (docs/conventions.md), so whether ``ratio_bounds``
    cut a token's
    region is a threshold on log mu; found once per cell by multisection on [-745, 0].
    """

    def lo_cut(lm: Tensor) -> Tensor:
        lo, _ = region_from_log_mu(divergence, estimator, delta, lm)
        return torch.as_tensor(lo, dtype=torch.float64).expand(lm.shape) < b_lo

    def hi_cut(lm: Tensor) -> Tensor:
        _, hi = region_from_log_mu(divergence, estimator, delta, lm)
        return torch.as_tensor(hi, dtype=torch.float64).expand(lm.shape) > b_hi

    return _threshold(lo_cut), _threshold(hi_cut)


def _threshold(pred: Callable[[Tensor], Tensor], rounds: int = 8, n: int = 65) -> float:
    """Sup of {l in [-745, 0] : pred(l)} for a predicate true below a point (monotone)."""
    a, b = -745.0, 0.0
    ends = pred(torch.tensor([a, b], dtype=torch.float64))
    if bool(ends[1]):
        return math.inf
    if not bool(ends[0]):
        return -math.inf
    for _ in range(rounds):
        grid = torch.linspace(a, b, n, dtype=torch.float64)
        ok = pred(grid)
        i = int(torch.nonzero(ok).max())  # ok[0] holds (a is inside), ok[-1] does not
        a, b = float(grid[i]), float(grid[min(i + 1, n - 1)])
        if b - a < 1e-12:
            break
    return b
