"""A cell's policy loss, from the method registry: what every backend's trainer calls.

A shared backend module: the ``local`` loop, TRL's trainer and both backends' pre-flight checks
build the loss of a cell here (verl's plugin, inside verl's worker, calls the same objectives:
:func:`gppo.objectives.losses.gppo_token_loss`), so one method name gives one loss everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from gppo.objectives.defaults import LOSS_AGG_MODE

#: ``loss_fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode=...)``, each
#: tensor (B, T), returning ``(scalar loss, {diagnostic: value})``
LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]


def make_loss(method: str, loss_params: Mapping[str, object]) -> tuple[LossFn, str]:
    """``(loss_fn, loss_agg_mode)`` for a cell: ``get_method(method)`` with resolved params.

    ``loss_fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode=...)`` returns
    ``(loss, metrics)``; ``loss_agg_mode`` is taken out of the params (default:
    :data:`gppo.objectives.defaults.LOSS_AGG_MODE`).
    """
    from gppo.objectives.methods import get_method

    m = get_method(method)
    params = dict(loss_params)
    agg = str(params.pop("loss_agg_mode", LOSS_AGG_MODE))
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
