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
input dtype, in place. Cells without a closed form (kl-binary, extensions) test each token
against a tabulated inner region (a function of mu only, looked up by the float32 bits of
-log mu: :class:`~.solver.InnerTable`) on the side its advantage uses, and solve the exact
float64 bound only for the tokens outside it (a few per cent at most). On CPU every pass over
(B, T) is memory-bound, so the code keeps passes, temporaries and mixed-dtype ops few (a
float * bool product or a bincount whose tokens share one bin are slow paths there).

Precision: whatever the input dtype (bf16 log-probs under verl's autocast, fp16, float32), the
loss is computed and returned in float32 (float64 stays float64), with autocast disabled inside,
as verl's own losses promote to float32; the gradient comes back in ``log_prob``'s dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .aggregation import GlobalBatchInfo, agg_loss, check_agg_mode
from .buckets import MU_BUCKETS
from .checks import (
    check_delta,
    check_dual_clip,
    check_r_min,
    check_ratio_bounds,
    check_same_shape,
)
from .defaults import DUAL_CLIP, LOSS_AGG_MODE, R_MIN, RATIO_BOUNDS
from .divergences import get_divergence
from .estimators import get_estimator
from .regions import (
    calibrate_delta,
    has_closed_form,
    log_mu_thresholds,
    mc_scalar_bounds,
    region_from_log_mu,
)
from .solver import inner_table, solve_side

Tensor = torch.Tensor

LOG_RATIO_CLAMP = 20.0
_NONE, _LOW, _HIGH, _DUAL = 0, 1, 2, 3
_LANES = 8  # of the metrics' bincount (8 * 32 bins fit a uint8 code)


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


def _rho(r: Tensor, pos: Tensor, lo: Tensor | float, hi: Tensor | float, c: float | None) -> Tensor:
    """The ratio the objective uses: min(r, hi) where A >= 0 (``pos``), clamp(r, lo, c) for A < 0.

    Bounds: two floats, or two (B, T) tensors of ``r``'s dtype that are overwritten (the
    result is one of them).
    """
    if isinstance(lo, Tensor) and isinstance(hi, Tensor):
        up = torch.minimum(r, hi, out=hi)
        down = torch.maximum(r, lo, out=lo)
        down = down if c is None else down.clamp_(max=c)
    else:
        up, down = torch.clamp(r, max=hi), torch.clamp(r, min=lo)
        down = down if c is None else down.clamp_(max=c)
    return torch.where(pos, up, down, out=down)


def _bounds(plan: _Plan, log_mu: Tensor) -> tuple[Tensor | float, Tensor | float]:
    """Intersected (r_lo, r_hi): floats for mc, new (B, T) tensors in log_mu's dtype otherwise."""
    if plan.estimator == "mc":
        lo, hi = mc_scalar_bounds(plan.divergence, plan.delta)
        return max(lo, plan.b_lo), min(hi, plan.b_hi)
    region = region_from_log_mu(plan.divergence, plan.estimator, plan.delta, log_mu)
    # (closed forms return new tensors; contiguous() copies an expanded scalar before writing)
    t_lo, t_hi = (torch.as_tensor(v, dtype=log_mu.dtype).expand(log_mu.shape) for v in region)
    return t_lo.contiguous().clamp_(min=plan.b_lo), t_hi.contiguous().clamp_(max=plan.b_hi)


def _fix_solved(plan: _Plan, rho: Tensor, r: Tensor, adv: Tensor, log_mu: Tensor) -> None:
    """Cells without closed form: exact bounds for the tokens that can be clipped (in place).

    ``rho`` (contiguous) holds the ratios clipped by ``ratio_bounds`` only. A token inside the
    tabulated inner region of its mu (:meth:`~.solver.InnerTable.outside`) on the side its
    advantage uses keeps it; the others (r_hi for A > 0, r_lo for A < 0) get the exact bound
    from the float64 solver, started from the table.
    """
    table = inner_table(plan.divergence, plan.estimator, plan.delta)
    out = table.outside(log_mu, r, adv, plan.b_lo, plan.b_hi)
    cand = torch.nonzero(out.reshape(-1)).squeeze(1)
    if cand.numel() == 0:
        return
    a_c = adv.reshape(-1)[cand]
    up = a_c > 0  # r_hi for A > 0, r_lo for A < 0 (A = 0: any ratio gives loss 0)
    sel = up | (a_c < 0)
    idx, up = cand[sel], up[sel]
    if idx.numel() == 0:
        return
    div, est = get_divergence(plan.divergence), get_estimator(plan.estimator)
    lm = log_mu.reshape(-1)[idx].to(torch.float64)
    bound = solve_side(div, est, plan.delta, lm, up, x0=table.guess(lm, up)).to(r.dtype)
    r_i = r.reshape(-1)[idx]
    v_lo = torch.maximum(r_i, bound.clamp(min=plan.b_lo))  # clamp(r, max(r_lo, b_lo), c)
    v_lo = v_lo if plan.dual is None else v_lo.clamp_(max=plan.dual)
    v_hi = torch.minimum(r_i, bound.clamp_(max=plan.b_hi))  # min(r, min(r_hi, b_hi))
    rho.view(-1)[idx] = torch.where(up, v_hi, v_lo)


def _surrogate(
    plan: _Plan, old_log_prob: Tensor, log_prob: Tensor, adv: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """(per-token loss, dloss/dlog_prob, metrics), all without autograd, in :func:`work_dtype`."""
    dtype = work_dtype(log_prob.dtype)
    old = old_log_prob.to(dtype)
    adv = adv.to(dtype)
    t = (log_prob.to(dtype) - old).contiguous()  # so are r and rho
    in_range = None
    if t.numel():
        t_min, t_max = torch.aminmax(t)
        if float(t_min) < -LOG_RATIO_CLAMP or float(t_max) > LOG_RATIO_CLAMP:
            in_range = t.abs() <= LOG_RATIO_CLAMP  # verl's clamp passes no gradient beyond
            t.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    r = torch.exp(t)
    pos = adv >= 0
    if plan.estimator == "mc" or has_closed_form(plan.divergence, plan.estimator):
        lo, hi = _bounds(plan, old if plan.estimator == "mc" else old.clamp(max=0.0))
        rho = _rho(r, pos, lo, hi, plan.dual)
    else:
        rho = _rho(r, pos, plan.b_lo, plan.b_hi, plan.dual)
        # log-probs a rounding error above 0 mean mu = 1
        _fix_solved(plan, rho, r, adv, old.clamp(max=0.0))
    above = rho > r  # clipped up to r_lo (only A < 0 can be)
    below = rho < r  # clipped down to r_hi (A >= 0) or to the dual clip c (A < 0)
    clipped = above | below
    if in_range is not None:
        clipped |= ~in_range
    loss = rho.mul_(adv).neg_()
    grad = loss.masked_fill(clipped, 0.0)
    metrics = _metrics(plan, t, r, adv, mask, old, pos, above, below)
    return loss, grad, metrics


def _metrics(
    plan: _Plan,
    t: Tensor,
    r: Tensor,
    adv: Tensor,
    mask: Tensor,
    log_mu: Tensor,
    pos: Tensor,
    above: Tensor,
    below: Tensor,
) -> dict[str, float]:
    """Mask-weighted diagnostics (docs/conventions.md "Diagnostics"; MLflow names in gppo/metrics.py), one
    host sync.

    Per token a uint8 code = 4 bucket + state (1 clipped low: A < 0, r < r_lo; 2 clipped high:
    A > 0, r > r_hi; 3 dual clip: A < 0, r > c) + 16 (ratio_bounds cut the region), counted by
    one bincount weighted by the mask. All tensors (B, T); ``log_mu`` may be the unclamped
    old log-probs (every edge it is compared with is < 0, so values above 0 count as 0);
    ``r`` (contiguous) is overwritten.
    """
    m = mask.reshape(-1).to(t.dtype)
    n_b = len(MU_BUCKETS)
    counts = _count_codes(_token_codes(plan, adv, log_mu, pos, above, below), m, 8 * n_b)
    tf, rf = t.reshape(-1), r.reshape(-1)
    sums = [-torch.dot(tf, m), torch.dot(rf, m), torch.dot(tf.abs(), m)]
    r_max = rf.mul_(m).max() if m.numel() else torch.zeros((), dtype=t.dtype, device=t.device)
    extra = torch.stack([*sums, r_max])
    return _diagnostics(torch.cat([counts.to(torch.float64), extra.to(torch.float64)]).tolist())


def _token_codes(
    plan: _Plan, adv: Tensor, log_mu: Tensor, pos: Tensor, above: Tensor, below: Tensor
) -> Tensor:
    """Per token (B, T), uint8: 4 x μ bucket + clip state (:func:`_metrics`), + 4 x buckets
    where ``ratio_bounds`` cut the token's region."""
    code = (log_mu >= math.log(MU_BUCKETS[1][1])).view(torch.uint8).mul(4)
    for _, edge, _ in MU_BUCKETS[2:]:
        code.add_(log_mu >= math.log(edge), alpha=4)
    code.add_(above)
    code.add_(below & (adv > 0), alpha=_HIGH)
    code.add_(below & ~pos, alpha=_DUAL)  # pos: A >= 0
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
    return code


def _count_codes(code: Tensor, m: Tensor, bins: int) -> Tensor:
    """Mask-weighted count of each code, shape (bins,): one bincount."""
    flat = code.reshape(-1)
    if flat.numel() % _LANES:
        return torch.bincount(flat, weights=m, minlength=bins)
    # one serial accumulator per bin is slow when most tokens share a bin: 8 lanes each
    lanes = torch.arange(0, bins * _LANES, bins, dtype=torch.uint8, device=flat.device)
    flat = flat.view(-1, _LANES).add_(lanes).view(-1)
    return torch.bincount(flat, weights=m, minlength=bins * _LANES).view(_LANES, bins).sum(0)


def _diagnostics(v: list[float]) -> dict[str, float]:
    """The host-side numbers (the code counts, then -sum t, sum r, sum |t|, max r) as the
    named diagnostics."""
    n_b = len(MU_BUCKETS)
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
        "abs_log_ratio": frac(v[8 * n_b + 2], total),
        "ratio_max": v[8 * n_b + 3] if total > 0 else 0.0,
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
    def forward(
        ctx: Any,
        log_prob: torch.Tensor,
        old_log_prob: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        plan: Any,
        box: dict[str, Any],
    ) -> torch.Tensor:
        with full_precision(log_prob.device):
            loss, grad, metrics = _surrogate(plan, old_log_prob, log_prob, advantages, mask)
        box["metrics"] = metrics
        ctx.save_for_backward(grad)
        ctx.in_dtype = log_prob.dtype
        return loss

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
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
    r_min: float = R_MIN,
    ratio_bounds: tuple[float, float] | None = RATIO_BOUNDS,
    dual_clip: float | None = DUAL_CLIP,
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
    r_min: float = R_MIN,
    ratio_bounds: tuple[float, float] | None = RATIO_BOUNDS,
    dual_clip: float | None = DUAL_CLIP,
    loss_agg_mode: str = LOSS_AGG_MODE,
    global_batch_info: GlobalBatchInfo | None = None,
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
