"""Loss aggregation over the response mask, exactly as verl 0.9.1's ``core_algos.agg_loss``.

Modes (``loss_mat``, ``loss_mask``: (B, T)):

* ``token-mean``: sum over valid tokens / number of valid tokens (``batch_num_tokens``)
* ``token-sum``: sum over valid tokens
* ``seq-mean-token-sum``: per-sequence token sum, mean over non-empty sequences
* ``seq-mean-token-sum-norm``: the same divided by ``loss_scale_factor`` (default T)
* ``seq-mean-token-mean``: per-sequence token mean (``/(count + 1e-8)``), mean over non-empty
  sequences

``dp_size``, ``batch_num_tokens``, ``global_batch_size`` and ``loss_scale_factor`` are verl's
``config.global_batch_info`` (data-parallel normalisation); the defaults give the local value.
"""

from __future__ import annotations

from typing import TypedDict

import torch

Tensor = torch.Tensor


class GlobalBatchInfo(TypedDict, total=False):
    """verl's ``config.global_batch_info``: :func:`agg_loss`'s keyword arguments past the mode."""

    dp_size: int
    batch_num_tokens: int | Tensor | None
    global_batch_size: int | Tensor | None
    loss_scale_factor: float | None


AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
    "token-sum",
)


def check_agg_mode(loss_agg_mode: object) -> str:
    if loss_agg_mode not in AGG_MODES:
        raise ValueError(f"loss_agg_mode must be one of {list(AGG_MODES)}, got {loss_agg_mode!r}")
    return loss_agg_mode


def masked_sum(values: Tensor, mask: Tensor, axis: int | None = None) -> Tensor:
    """verl's masked_sum: values outside the mask (even nan) contribute 0.

    The same value as verl's where(mask, values, 0) * mask; the torch.where (slow on CPU) is
    only taken when some value is not finite. That shows in the sum itself, so no separate
    isfinite pass over (B, T) is needed: a nan or inf anywhere in ``values`` (also where the
    mask is 0: inf * 0 = nan) makes ``(values * mask).sum()`` non-finite. A finite sum is
    therefore the fast path's exact answer, and a sum that overflowed from finite values is the
    same inf on the slow path.
    """
    out = (values * mask).sum(axis)
    if bool(torch.isfinite(out).all()):
        return out
    return (torch.where(mask.bool(), values, 0.0) * mask).sum(axis)


def agg_loss(
    loss_mat: Tensor,
    loss_mask: Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | Tensor | None = None,
    global_batch_size: int | Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> Tensor:
    """Aggregate a (B, T) per-token loss to a scalar, as verl's ``agg_loss`` does."""
    check_agg_mode(loss_agg_mode)
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
            batch_num_tokens = loss_mask.sum()
        return masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)
        seq_mask = (torch.sum(loss_mask, dim=-1) > 0).to(seq_losses.dtype)
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError("global_batch_size is required when dp_size > 1")
            global_batch_size = seq_mask.sum()
        loss = masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
        if loss_agg_mode == "seq-mean-token-sum-norm":
            if loss_scale_factor is None:
                loss_scale_factor = loss_mask.shape[-1]
            loss = loss / loss_scale_factor
        return loss
    # seq-mean-token-mean
    count = torch.sum(loss_mask, dim=-1)
    seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (count + 1e-8)
    seq_mask = (count > 0).to(seq_losses.dtype)
    if global_batch_size is None:
        if dp_size > 1:
            raise ValueError("global_batch_size is required when dp_size > 1")
        global_batch_size = seq_mask.sum()
    return masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
