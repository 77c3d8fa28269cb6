"""Baselines beyond the grid: GSPO, GMPO, SAPO, CISPO, Clip-Cov (docs/conventions.md "Baselines").

Each follows verl 0.9.1's registered policy loss of the same rule (``gspo``, ``geo_mean``,
``sapo``, ``cispo``, ``clip_cov``) formula for formula, so that our values and gradients agree
with verl's on the same tensors (tests/objectives/test_obj_verl_equivalence.py). Defaults are the
papers' (``DEFAULTS``). All take verl's (old_log_prob, log_prob, advantages, response_mask) (B, T)
and return (loss, metrics) with the subset of the GPPO diagnostic keys that applies
(``ratio_mean``/``ratio_max`` are of the token ratio exp(log_prob - old_log_prob)).

Where verl fixes the aggregation, so do we: GMPO is a mean over sequences of the
sequence-level objective and SAPO always aggregates ``seq-mean-token-mean`` (as verl and the
papers do), whatever ``loss_agg_mode`` says.

Precision: like the GPPO loss (and verl's losses), every baseline computes in float32 (float64
stays float64) with autocast off, whatever the input dtype (e.g. bf16 log-probs under verl's
autocast), and returns a float32 loss; gradients reach ``log_prob`` in its own dtype.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from .aggregation import GlobalBatchInfo, agg_loss, check_agg_mode, masked_sum
from .checks import check_same_shape
from .defaults import LOSS_AGG_MODE
from .losses import LOG_RATIO_CLAMP, full_precision, work_dtype

Tensor = torch.Tensor
_F = TypeVar("_F", bound=Callable[..., Any])


def _baseline(name: str) -> Callable[[_F], _F]:
    """A baseline loss: its paper's hyper-parameters from :data:`DEFAULTS` (the one place they
    are written; a keyword given overrides one), run on its four (B, T) tensors cast to
    :func:`work_dtype` with autocast off. The cast is differentiable, so the gradient reaches the
    caller's ``log_prob`` (in its dtype)."""

    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(
            old_log_prob: Tensor,
            log_prob: Tensor,
            advantages: Tensor,
            response_mask: Tensor,
            **kw: Any,
        ) -> tuple[Tensor, dict[str, float]]:
            _prep(old_log_prob, log_prob, advantages, response_mask)
            dtype = work_dtype(log_prob.dtype) if log_prob.is_floating_point() else torch.float32
            with full_precision(log_prob.device):
                return fn(
                    old_log_prob.to(dtype),
                    log_prob.to(dtype),
                    advantages.to(dtype),
                    response_mask,
                    **{**DEFAULTS[name], **kw},
                )

        return wrapper  # type: ignore[return-value]  # wraps() keeps fn's signature

    return decorate


DEFAULTS: dict[str, dict[str, Any]] = {
    # GSPO (Zheng et al. 2025): sequence ratio, tiny clip range.
    "gspo": {"clip_ratio_low": 3e-4, "clip_ratio_high": 4e-4},
    # GMPO (Zhao et al. 2025): token log-ratios clipped to +-0.4 before the geometric mean.
    "gmpo": {"clip_ratio_low": 0.4, "clip_ratio_high": 0.4},
    # SAPO (Gao et al. 2025): sigmoid gate temperatures.
    "sapo": {"tau_pos": 1.0, "tau_neg": 1.05},
    # CISPO (MiniMax-M1): no lower bound on the IS weight (low = 10 -> 1 - 10 < 0), upper 1.2 as
    # in verl's example (the paper tunes eps_high; override with clip_ratio_high).
    "cispo": {"clip_ratio_low": 10.0, "clip_ratio_high": 0.2},
    # Clip-Cov (Cui et al. 2025): PPO clip at ratio 1 (r in [0, 2]), cut the gradient of a
    # random 2e-4 share of tokens whose centred covariance lies in [1, 5].
    "clip_cov": {
        "clip_ratio_low": 1.0,
        "clip_ratio_high": 1.0,
        "clip_cov_ratio": 2e-4,
        "clip_cov_lb": 1.0,
        "clip_cov_ub": 5.0,
    },
}


def _mmean(x: Tensor, mask: Tensor) -> Tensor:
    """verl's masked_mean: sum(x mask) / (sum(mask) + 1e-8)."""
    return masked_sum(x, mask) / (mask.sum() + 1e-8)


def _metrics(
    t: Tensor, mask: Tensor, low: Tensor | None, high: Tensor | None, **extra: Tensor
) -> dict[str, float]:
    with torch.no_grad():
        t = t.detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        r = torch.exp(t)
        # _mmean's value, for the finite (B, T) values here: mask.sum() once, and no
        # isfinite pass per mean (masked_sum's check costs more than the mean itself on CPU)
        n = mask.sum() + 1e-8

        def mean(x: Tensor) -> Tensor:
            return (x * mask).sum() / n

        vals = {
            "approx_kl": mean(-t),
            "ratio_mean": mean(r),
            "abs_log_ratio": mean(t.abs()),
            "ratio_max": torch.where(mask.bool(), r, 0.0).max() if r.numel() else r.sum(),
        }
        if low is not None:
            vals["clip_frac_low"] = mean(low.to(t.dtype))
        if high is not None:
            vals["clip_frac_high"] = mean(high.to(t.dtype))
        vals.update(extra)
        keys = list(vals)
        numbers = torch.stack([v.to(torch.float64).reshape(()) for v in vals.values()]).tolist()
    return dict(zip(keys, numbers, strict=True))


def _prep(
    old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor
) -> None:
    check_same_shape(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
    )


@_baseline("gspo")
def gspo_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    loss_agg_mode: str = LOSS_AGG_MODE,
    clip_ratio_low: float,
    clip_ratio_high: float,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GSPO: s_i = exp(mean_t log r), token-level s_i,t = sg(s_i) pi / sg(pi), PPO clip on it."""
    _prep(old_log_prob, log_prob, advantages, response_mask)
    check_agg_mode(loss_agg_mode)
    t = log_prob - old_log_prob
    seq_len = torch.sum(response_mask, dim=-1).clamp(min=1)
    t_seq = torch.sum(t * response_mask, dim=-1) / seq_len
    log_s = log_prob - log_prob.detach() + t_seq.detach().unsqueeze(-1)
    s = torch.exp(torch.clamp(log_s, max=10.0))
    pg1 = -advantages * s
    pg2 = -advantages * torch.clamp(s, 1 - clip_ratio_low, 1 + clip_ratio_high)
    loss_mat = torch.maximum(pg1, pg2)
    loss = agg_loss(loss_mat, response_mask, loss_agg_mode, **(global_batch_info or {}))
    clipped = pg2 > pg1
    return loss, _metrics(t, response_mask, clipped & (advantages < 0), clipped & (advantages > 0))


@_baseline("gmpo")
def gmpo_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    loss_agg_mode: str = LOSS_AGG_MODE,
    clip_ratio_low: float,
    clip_ratio_high: float,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GMPO: exp(mean_t sgn(A) min(sgn(A) t, sgn(A) clip(t, -low, high))) x mean_t A, mean over
    sequences (``loss_agg_mode`` and ``global_batch_info`` are not used, as in verl)."""
    _prep(old_log_prob, log_prob, advantages, response_mask)
    check_agg_mode(loss_agg_mode)
    t = log_prob - old_log_prob
    sgn = torch.sign(advantages)
    t_clamp = torch.clamp(t, -clip_ratio_low, clip_ratio_high)
    t_min = sgn * torch.min(sgn * t, sgn * t_clamp)
    n = response_mask.sum(dim=-1)
    ratio = torch.exp((t_min * response_mask).sum(dim=-1) / (n + 1e-8))
    adv_seq = (advantages * response_mask).sum(dim=-1) / (n + 1e-8)
    loss = torch.mean(-adv_seq * ratio)
    clipped = torch.ne(t, t_clamp)
    return loss, _metrics(t, response_mask, clipped & (advantages < 0), clipped & (advantages > 0))


@_baseline("sapo")
def sapo_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    loss_agg_mode: str = LOSS_AGG_MODE,
    tau_pos: float,
    tau_neg: float,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """SAPO: loss = -sigmoid(tau (r - 1)) 4/tau A, tau = tau_pos if A > 0 else tau_neg;
    always ``seq-mean-token-mean`` (as verl)."""
    _prep(old_log_prob, log_prob, advantages, response_mask)
    check_agg_mode(loss_agg_mode)
    t = log_prob - old_log_prob
    r = torch.exp(torch.clamp(t, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP))
    tp = torch.as_tensor(tau_pos, dtype=advantages.dtype, device=advantages.device)
    tn = torch.as_tensor(tau_neg, dtype=advantages.dtype, device=advantages.device)
    taus = torch.where(advantages > 0, tp, tn)
    gates = torch.sigmoid(taus * (r - 1.0)) * (4.0 / taus)
    loss_mat = -gates * advantages
    loss = agg_loss(loss_mat, response_mask, "seq-mean-token-mean", **(global_batch_info or {}))
    return loss, _metrics(t, response_mask, None, None)


@_baseline("cispo")
def cispo_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    loss_agg_mode: str = LOSS_AGG_MODE,
    clip_ratio_low: float,
    clip_ratio_high: float,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """CISPO: loss = -sg(clip(r, 1 - low, 1 + high)) A log pi (every token keeps a gradient)."""
    _prep(old_log_prob, log_prob, advantages, response_mask)
    check_agg_mode(loss_agg_mode)
    t = log_prob - old_log_prob
    r = torch.exp(torch.clamp(t, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP))
    w = torch.clamp(r, 1 - clip_ratio_low, 1 + clip_ratio_high).detach()
    loss_mat = -w * advantages * log_prob
    loss = agg_loss(loss_mat, response_mask, loss_agg_mode, **(global_batch_info or {}))
    return loss, _metrics(t, response_mask, r < 1 - clip_ratio_low, r > 1 + clip_ratio_high)


class _KnownGrad(torch.autograd.Function):
    """A per-token loss ``value`` (B, T) computed without autograd, whose derivative with respect
    to ``log_prob`` is the elementwise ``grad`` (B, T): backward is one multiply by a saved
    tensor instead of the graph of every intermediate (exp, clamp, products, maximum, mask)."""

    @staticmethod
    def forward(
        ctx: Any, log_prob: torch.Tensor, value: torch.Tensor, grad: torch.Tensor
    ) -> torch.Tensor:
        ctx.save_for_backward(grad)
        return value

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (grad,) = ctx.saved_tensors
        return grad_out * grad, None, None


@_baseline("clip_cov")
def clip_cov_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    loss_agg_mode: str = LOSS_AGG_MODE,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_cov_ratio: float,
    clip_cov_lb: float,
    clip_cov_ub: float,
    generator: torch.Generator | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clip-Cov: PPO clip, and no gradient for a random ``clip_cov_ratio`` share of the
    unclipped tokens whose (A - mean A)(log pi - mean log pi) lies in (lb, ub).

    The random choice uses ``torch.randperm`` with ``generator`` (the global RNG when None, as
    verl does, so seeding the global RNG reproduces verl's choice).
    """
    _prep(old_log_prob, log_prob, advantages, response_mask)
    check_agg_mode(loss_agg_mode)
    if not clip_cov_ratio > 0:
        raise ValueError(f"clip_cov_ratio must be > 0, got {clip_cov_ratio!r}")
    with torch.no_grad():  # the loss and its gradient are computed here; autograd: _KnownGrad
        t = log_prob - old_log_prob
        ratio = torch.exp(t)
        neg_adv = -advantages
        pg1 = neg_adv * ratio
        pg2 = neg_adv * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
        valid = response_mask > 0
        clipped = pg2 > pg1
        n_tokens = response_mask.sum()
        denominator = n_tokens + 1e-8  # verl's masked_mean, its sum(mask) computed once
        cov = (advantages - masked_sum(advantages, response_mask) / denominator) * (
            log_prob - masked_sum(log_prob, response_mask) / denominator
        )
        cov.masked_fill_(~valid | clipped, -torch.inf)  # one pass, not two index_puts
        clip_num = max(int(clip_cov_ratio * n_tokens.item()), 1)
        # cov is -inf off the candidates, so the window alone selects them
        idx = torch.nonzero((cov < clip_cov_ub) & (cov > clip_cov_lb))
        if len(idx) > 0:
            perm = torch.randperm(len(idx), generator=generator)
            idx = idx[perm[: min(clip_num, len(idx))]]
        corr = torch.ones_like(advantages)
        corr[idx[:, 0], idx[:, 1]] = 0
        # share of masked tokens left without gradient: the chosen ones are all valid
        cov_clip_frac = response_mask[idx[:, 0], idx[:, 1]].sum() / denominator
        # d(-A r)/d log_prob = -A r = pg1 where the unclipped term is the max (a tie is the
        # same value: verl's gradient splits it in halves between the two equal terms), 0 where
        # the clamped, constant one is
        value = torch.maximum(pg1, pg2) * corr
        grad = pg1.masked_fill_(clipped, 0.0).mul_(corr)
    loss_mat = _KnownGrad.apply(log_prob, value, grad)
    loss = agg_loss(loss_mat, response_mask, loss_agg_mode, **(global_batch_info or {}))
    return loss, _metrics(
        t,
        response_mask,
        clipped & (advantages < 0),
        clipped & (advantages > 0),
        cov_clip_frac=cov_clip_frac,
    )
