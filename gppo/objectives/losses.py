"""The GPPO clipped surrogate (the paper's Eq. 11, docs/conventions.md "The objective"), in verl's calling
convention.

Per token (r = exp(clamp(log_prob - old_log_prob, -20, 20)), as verl clamps the log-ratio):

    J = min(r A, clip(r, r_lo, r_hi) A)           (the paper's clipped objective)
    loss = -J, and for A < 0 with ``dual_clip = c``: loss = min(-J, -c A)

where [r_lo, r_hi] is the cell's proximal region (:func:`~.regions.proximal_region`) intersected
with ``ratio_bounds`` (r_lo <- max(r_lo, b_lo), r_hi <- min(r_hi, b_hi)). The gradient w.r.t.
log pi is -A r where the unclipped branch is active, else 0. This is one reading of the paper's
ambiguous "dual clipping ... with lower and upper bounds of 0.5 and 10": two separate, optional
knobs (``ratio_bounds``, ``dual_clip``; either may be None).

Speed: the surrogate is computed without autograd and a custom autograd function multiplies
the incoming gradient by the saved per-token coefficient dloss/dlog_prob, so one (B, T) tensor
is kept for backward. mc bounds are scalars. Atomic/binary closed forms are evaluated in the
input dtype. Cells without a closed form (kl-binary, extensions) test each token against a
tabulated inner region (a function of mu only, :mod:`.tables`) and solve the exact float64 bound
only for the tokens outside it on the side their advantage uses (a few per cent at most).

Precision: whatever the input dtype (bf16 log-probs under verl's autocast, fp16, float32), the
loss is computed and returned in float32 (float64 stays float64), with autocast disabled inside,
as verl's own losses promote to float32; the gradient comes back in ``log_prob``'s dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .aggregation import agg_loss, check_agg_mode
from .checks import check_dual_clip, check_ratio_bounds, check_same_shape
from .divergences import get_divergence
from .estimators import get_estimator
from .regions import (
    calibrate_delta,
    check_delta,
    check_r_min,
    has_closed_form,
    log_mu_thresholds,
    mc_scalar_bounds,
    region_from_log_mu,
)
from .solver import solve_abs, solve_binary
from .tables import region_table

Tensor = torch.Tensor

LOG_RATIO_CLAMP = 20.0
#: (name, lower, upper) buckets of mu, the same as gppo.metrics.MU_BUCKETS (objectives imports
#: nothing of ours, so the values are repeated here and pinned by a test).
MU_BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("mu_lt_0.01", 0.0, 0.01),
    ("mu_0.01_0.1", 0.01, 0.1),
    ("mu_0.1_0.5", 0.1, 0.5),
    ("mu_ge_0.5", 0.5, 1.0),
)
_NONE, _LOW, _HIGH, _DUAL = 0, 1, 2, 3


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a loss computes in: float32, or float64 for float64 input."""
    return torch.promote_types(dtype, torch.float32)


def full_precision(device: torch.device) -> torch.autocast:
    """Autocast off for ``device``'s type (a loss must not run in bf16 under the model's autocast)."""
    try:
        return torch.autocast(device_type=device.type, enabled=False)
    except RuntimeError:  # a device type autocast does not know (meta): nothing to turn off
        return torch.autocast(device_type="cpu", enabled=False)


@dataclass(frozen=True)
class _Plan:
    divergence: str
    estimator: str
    delta: float
    b_lo: float  # ratio_bounds (0, inf when None)
    b_hi: float
    dual: float | None


def _rho(r: Tensor, adv: Tensor, lo: Tensor | float, hi: Tensor | float, c: float | None) -> Tensor:
    """The ratio the objective uses: min(r, hi) for A >= 0, min(max(r, lo), c) for A < 0.

    One tensor clamp with per-token limits picked by exact arithmetic (x * 1 = x, x * 0 = 0 on
    finite x): ``torch.where`` costs ~10 elementwise passes on CPU.
    """
    big = torch.finfo(r.dtype).max
    pos = (adv >= 0).to(r.dtype)
    neg = 1.0 - pos
    lo_sel = neg * lo  # r_lo for A < 0, 0 (no limit) for A >= 0
    hi = torch.clamp(hi, max=big) if isinstance(hi, Tensor) else min(hi, big)
    hi_sel = torch.maximum(pos * hi, neg * (big if c is None else c))  # r_hi, or c for A < 0
    return torch.clamp(r, min=lo_sel, max=hi_sel)


def _bounds(plan: _Plan, log_mu: Tensor) -> tuple[Tensor | float, Tensor | float]:
    """Intersected (r_lo, r_hi): floats for mc, tensors in the input dtype for closed forms."""
    if plan.estimator == "mc":
        lo, hi = mc_scalar_bounds(plan.divergence, plan.delta)
        return max(lo, plan.b_lo), min(hi, plan.b_hi)
    lo, hi = region_from_log_mu(plan.divergence, plan.estimator, plan.delta, log_mu)
    lo = torch.as_tensor(lo, dtype=log_mu.dtype).clamp(min=plan.b_lo)
    hi = torch.as_tensor(hi, dtype=log_mu.dtype).clamp(max=plan.b_hi)
    return lo, hi


def _fix_solved(plan: _Plan, rho: Tensor, r: Tensor, adv: Tensor, log_mu: Tensor) -> None:
    """Cells without closed form: exact bounds for the tokens that can be clipped (in place).

    Only the bound on the side the objective uses can matter (r_hi for A > 0, r_lo for A < 0).
    A token inside the tabulated inner region (:mod:`.tables`) is inside its own region; the
    others get the exact bound from the float64 solver, started from the table's interpolation.
    """
    table = region_table(plan.divergence, plan.estimator, plan.delta)
    work = torch.float64 if r.dtype == torch.float64 else torch.float32
    lm_w = log_mu.to(work)
    in_lo, in_hi = table.inner(lm_w)
    r_w = r.to(work)
    out_hi = (r_w > in_hi) & (adv > 0)
    out_lo = (r_w < in_lo) & (adv < 0)
    flat = rho.view(-1)
    r_flat, adv_flat, lm_flat = r.reshape(-1), adv.reshape(-1), log_mu.reshape(-1)
    for side, out in (("hi", out_hi), ("lo", out_lo)):
        cand = torch.nonzero(out.reshape(-1)).squeeze(1)
        if cand.numel() == 0:
            continue
        lc = lm_flat[cand].to(torch.float64)
        bound = solve_region_side(plan, lc, side, x0=table.guess(lc, side)).to(r.dtype)
        rc, ac = r_flat[cand], adv_flat[cand]
        if side == "hi":
            flat[cand] = _rho(rc, ac, plan.b_lo, bound.clamp_(max=plan.b_hi), plan.dual)
        else:
            flat[cand] = _rho(rc, ac, bound.clamp_(min=plan.b_lo), plan.b_hi, plan.dual)


def solve_region_side(plan: _Plan, log_mu: Tensor, side: str, x0: Tensor | None = None) -> Tensor:
    """Exact r_lo or r_hi (float64) of a solved cell at the given log mu (1-d)."""
    div = get_divergence(plan.divergence)
    est = get_estimator(plan.estimator)
    if est.kind == "bernoulli":
        return solve_binary(div, plan.delta, log_mu, side, x0=x0)
    assert est.weight is not None
    return solve_abs(div, plan.delta / est.weight(log_mu), side, x0=x0)


def _surrogate(
    plan: _Plan, old_log_prob: Tensor, log_prob: Tensor, adv: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """(per-token loss, dloss/dlog_prob, metrics), all without autograd, in :func:`work_dtype`."""
    dtype = work_dtype(log_prob.dtype)
    old = old_log_prob.to(dtype)
    adv = adv.to(dtype)
    t = log_prob.to(dtype) - old
    in_range = None
    if t.numel():
        t_min, t_max = torch.aminmax(t)
        if float(t_min) < -LOG_RATIO_CLAMP or float(t_max) > LOG_RATIO_CLAMP:
            in_range = t.abs() <= LOG_RATIO_CLAMP  # verl's clamp passes no gradient beyond
            t.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    r = torch.exp(t)
    log_mu = old.clamp(max=0.0)  # log-probs a rounding error above 0 mean mu = 1
    if plan.estimator == "mc" or has_closed_form(plan.divergence, plan.estimator):
        lo, hi = _bounds(plan, log_mu)
        rho = _rho(r, adv, lo, hi, plan.dual)
    else:
        rho = _rho(r, adv, plan.b_lo, plan.b_hi, plan.dual)
        _fix_solved(plan, rho, r, adv, log_mu)
    loss = torch.mul(adv, rho).neg_()
    above = rho > r  # clipped up to r_lo (only A < 0 can be)
    below = rho < r  # clipped down to r_hi (A >= 0) or to the dual clip c (A < 0)
    unclipped = ~(above | below)
    if in_range is not None:
        unclipped &= in_range
    grad = loss * unclipped
    metrics = _metrics(plan, t, r, adv, mask, log_mu, above, below)
    return loss, grad, metrics


def _metrics(
    plan: _Plan,
    t: Tensor,
    r: Tensor,
    adv: Tensor,
    mask: Tensor,
    log_mu: Tensor,
    above: Tensor,
    below: Tensor,
) -> dict[str, float]:
    """Mask-weighted diagnostics (docs/conventions.md "Diagnostics"; MLflow names in gppo/metrics.py), one
    host sync.

    Per token a uint8 code = 4 bucket + state (1 clipped low: A < 0, r < r_lo; 2 clipped high:
    A > 0, r > r_hi; 3 dual clip: A < 0, r > c) + 16 (ratio_bounds cut the region), counted by
    one bincount weighted by the mask.
    """
    m = mask.reshape(-1).to(t.dtype)
    code = (log_mu >= math.log(MU_BUCKETS[1][1])).to(torch.uint8)
    for _, edge, _ in MU_BUCKETS[2:]:
        code += log_mu >= math.log(edge)
    code *= 4
    code += above
    code.add_(below & (adv > 0), alpha=_HIGH)
    code.add_(below & (adv < 0), alpha=_DUAL)
    n_b = len(MU_BUCKETS)
    if plan.b_lo > 0 or plan.b_hi < math.inf:
        if plan.estimator == "mc":
            lo, hi = mc_scalar_bounds(plan.divergence, plan.delta)
            l_act = math.inf if (lo < plan.b_lo or hi > plan.b_hi) else -math.inf
        else:
            l_act = max(
                log_mu_thresholds(plan.divergence, plan.estimator, plan.delta, plan.b_lo, plan.b_hi)
            )
        if l_act == math.inf:
            code += 4 * n_b
        elif l_act > -math.inf:
            code.add_(log_mu < l_act, alpha=4 * n_b)
    counts = torch.bincount(code.reshape(-1), weights=m, minlength=8 * n_b)
    tf, rf = t.reshape(-1), r.reshape(-1)
    r_max = (rf * m).max() if m.numel() else torch.zeros((), dtype=t.dtype, device=t.device)
    extra = torch.stack([-torch.dot(tf, m), torch.dot(rf, m), r_max])
    v = torch.cat([counts.to(torch.float64), extra.to(torch.float64)]).tolist()
    c = [v[i] + v[i + 4 * n_b] for i in range(4 * n_b)]  # per (bucket, state), any bound flag
    active = sum(v[4 * n_b : 8 * n_b])
    total = sum(c)

    def frac(x: float, n: float) -> float:
        return x / n if n > 0 else 0.0

    out = {
        "clip_frac_low": frac(sum(c[4 * b + _LOW] for b in range(n_b)), total),
        "clip_frac_high": frac(sum(c[4 * b + _HIGH] for b in range(n_b)), total),
        "dual_clip_frac": frac(sum(c[4 * b + _DUAL] for b in range(n_b)), total),
        "bound_active_frac": frac(active, total),
        "approx_kl": frac(v[8 * n_b], total),
        "ratio_mean": frac(v[8 * n_b + 1], total),
        "ratio_max": v[8 * n_b + 2] if total > 0 else 0.0,
    }
    for b, (name, _, _) in enumerate(MU_BUCKETS):
        n = sum(c[4 * b : 4 * b + 4])
        low, high = c[4 * b + _LOW], c[4 * b + _HIGH]
        out[f"clip_frac/{name}"] = frac(low + high, n)
        out[f"clip_frac_low/{name}"] = frac(low, n)
        out[f"clip_frac_high/{name}"] = frac(high, n)
    return out


class _Surrogate(torch.autograd.Function):
    """Forward: the per-token loss; backward: grad_out * saved dloss/dlog_prob."""

    @staticmethod
    def forward(ctx, log_prob, old_log_prob, advantages, mask, plan, box):  # type: ignore[override]
        with full_precision(log_prob.device):
            loss, grad, metrics = _surrogate(plan, old_log_prob, log_prob, advantages, mask)
        box["metrics"] = metrics
        ctx.save_for_backward(grad)
        ctx.in_dtype = log_prob.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        (grad,) = ctx.saved_tensors
        with full_precision(grad.device):
            g = (grad_out.to(grad.dtype) * grad).to(ctx.in_dtype)
        return g, None, None, None, None, None


def make_plan(
    divergence: str,
    estimator: str,
    delta: float | None,
    r_min: float,
    ratio_bounds: Any,
    dual_clip: Any,
) -> _Plan:
    """Validate the hyper-parameters of a GPPO loss (clear ValueError / KeyError naming them)."""
    get_divergence(divergence)
    get_estimator(estimator)
    r_min = check_r_min(r_min)
    d = calibrate_delta(divergence, r_min) if delta is None else check_delta(delta)
    rb = check_ratio_bounds(ratio_bounds)
    b_lo, b_hi = (0.0, math.inf) if rb is None else rb
    return _Plan(divergence, estimator, d, b_lo, b_hi, check_dual_clip(dual_clip))


def gppo_token_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    divergence: str,
    estimator: str,
    delta: float | None = None,
    r_min: float = 0.8,
    ratio_bounds: tuple[float, float] | None = (0.5, 10.0),
    dual_clip: float | None = 10.0,
) -> tuple[Tensor, dict[str, float]]:
    """The per-token GPPO loss matrix (B, T) before aggregation, and the diagnostics.

    For callers that aggregate themselves (e.g. verl's ``agg_loss(loss_mat, response_mask,
    loss_agg_mode, **config.global_batch_info)``, after multiplying by rollout IS weights).
    Gradients flow to ``log_prob`` only. Values at masked positions are finite for finite inputs
    and must be masked by the caller. The matrix is float32 (float64 for float64 input) whatever
    the input dtype. Arguments as in :func:`gppo_policy_loss`.
    """
    check_same_shape(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
    )
    if not log_prob.is_floating_point():
        raise TypeError(f"log_prob must be a floating-point tensor, got {log_prob.dtype}")
    plan = make_plan(divergence, estimator, delta, r_min, ratio_bounds, dual_clip)
    old, adv, mask = old_log_prob.detach(), advantages.detach(), response_mask.detach()
    if log_prob.requires_grad and torch.is_grad_enabled():
        box: dict[str, Any] = {}
        loss = _Surrogate.apply(log_prob, old, adv, mask, plan, box)
        return loss, box["metrics"]
    with torch.no_grad(), full_precision(log_prob.device):
        loss, _, metrics = _surrogate(plan, old, log_prob, adv, mask)
    return loss, metrics


def gppo_policy_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    divergence: str,
    estimator: str,
    delta: float | None = None,
    r_min: float = 0.8,
    ratio_bounds: tuple[float, float] | None = (0.5, 10.0),
    dual_clip: float | None = 10.0,
    loss_agg_mode: str = "token-mean",
    global_batch_info: dict[str, Any] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The GPPO policy loss of one Divergence x Estimator cell (Eq. 11), verl's convention.

    Args:
        old_log_prob, log_prob, advantages, response_mask: (B, T) tensors (log mu, log pi, A,
            and the 0/1 response mask). Gradients flow to ``log_prob`` only.
        divergence: ``tv``, ``chi2``, ``kl``, ``hellinger``, ``rkl``, ``js`` or ``alpha:<a>``.
        estimator: ``mc``, ``atomic`` or ``binary``.
        delta: the region threshold; None calibrates it as |f(r_min)|.
        r_min: the calibration ratio in (0, 1) (used when ``delta`` is None).
        ratio_bounds: (b_lo, b_hi) intersected with every per-token region, or None.
        dual_clip: c > 1: for A < 0 the term is floored at c A (verl's ``clip_ratio_c``), or None.
        loss_agg_mode: ``token-mean``, ``seq-mean-token-mean``, ``seq-mean-token-sum``,
            ``seq-mean-token-sum-norm`` (or verl's ``token-sum``), as verl's ``agg_loss``.
        global_batch_info: verl's ``config.global_batch_info`` (dp_size, batch_num_tokens,
            global_batch_size, loss_scale_factor) passed to the aggregation; None = local batch.

    Returns:
        (loss, metrics): a 0-d float32 tensor (float64 for float64 input) and floats ``clip_frac_low``, ``clip_frac_high``,
        ``clip_frac[_low|_high]/<mu bucket>``, ``approx_kl``, ``ratio_mean``, ``ratio_max``,
        ``bound_active_frac``, ``dual_clip_frac``.
    """
    check_agg_mode(loss_agg_mode)
    loss_mat, metrics = gppo_token_loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        divergence=divergence,
        estimator=estimator,
        delta=delta,
        r_min=r_min,
        ratio_bounds=ratio_bounds,
        dual_clip=dual_clip,
    )
    with full_precision(loss_mat.device):
        loss = agg_loss(loss_mat, response_mask, loss_agg_mode, **(global_batch_info or {}))
    return loss, metrics
