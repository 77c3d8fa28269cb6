"""The cell's loss, from the objectives' method registry (the same losses as the verl path)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from gppo.backends.local.train import LossFn


def make_loss(method: str, loss_params: Mapping[str, Any]) -> tuple[LossFn, str]:
    """``(loss_fn, loss_agg_mode)`` for a cell: ``get_method(method)`` with resolved params.

    ``loss_fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode=...)`` returns
    ``(loss, metrics)``; ``loss_agg_mode`` is taken out of the params (default token-mean).
    """
    from gppo.objectives.methods import get_method

    m = get_method(method)
    params = dict(loss_params)
    agg = str(params.pop("loss_agg_mode", "token-mean"))
    resolved = m.resolve(params)

    def loss_fn(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = agg,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return m.loss(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            loss_agg_mode=loss_agg_mode,
            **resolved,
        )

    return loss_fn, agg
