"""The verl plugin: registers policy-loss mode ``gppo`` and its config class inside verl.

How it reaches every process that computes a loss (each is enough on its own):

1. ``verl.plugins`` entry point ``gppo = "gppo.backends.verl.plugin"`` (pyproject.toml): verl's
   ``__init__`` loads it in every process that imports verl, when gppo-sweep is installed there
   (failures are only logged at debug level by verl, hence 2 and 3);
2. ``VERL_USE_EXTERNAL_MODULES=gppo.backends.verl.plugin`` in the job's runtime env (set by the
   backend; Ray propagates it to every actor): verl's ``__init__`` imports it and fails loudly;
3. ``actor_rollout_ref.actor.policy_loss._target_=gppo.backends.verl.plugin.GPPOPolicyLossConfig``:
   building the actor config in a worker imports this module.

verl calls a policy loss as ``fn(old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode, config, rollout_is_weights)`` with ``config`` the actor config; tensors are (B, T).
We compute the per-token GPPO loss (the paper's Eq. 11, docs/conventions.md "The objective":
−min(r·A, clip(r, r_lo, r_hi)·A), dual clip for A < 0), weight it by ``rollout_is_weights`` when given, and aggregate with verl's
own ``agg_loss(..., **config.global_batch_info)`` so data-parallel scaling is verl's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gppo.backends.verl import hooks

_CPU_RUN = hooks.cpu_run()
if _CPU_RUN:  # before verl asks for its platform; a GPU run never loads the CPU mode
    from gppo.backends.verl.cpu import activate_if_requested

    activate_if_requested()

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss  # noqa: E402
from verl.workers.config import PolicyLossConfig  # noqa: E402

from gppo.backends.verl import compat  # noqa: E402
from gppo.objectives import defaults  # noqa: E402

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from verl.workers.config import ActorConfig

compat.trl_only_with_a_value_head()  # verl's engine next to TRL 1.16 (the trl extra)
# GPT-2 (the testbed's base): loaded with its LM head, saved as a Hugging Face model. The second
# imports verl's FSDP engine, which reads the device when imported: only once the platform is
# settled (a CPU run, or a machine with CUDA), never in a process that installs the CPU platform
# later (the in-process checks and tests).
compat.causal_lm_for_lm_head_models()
if _CPU_RUN or torch.cuda.is_available():
    compat.save_hf_model_of_lm_head_models()

__all__ = ["GPPOPolicyLossConfig", "compute_policy_loss_gppo"]

LOSS_MODE = "gppo"


@dataclass
class GPPOPolicyLossConfig(PolicyLossConfig):
    """verl's PolicyLossConfig plus the GPPO fields (verl refuses unknown fields on its own class).

    Args:
        divergence: f-divergence name (``tv``, ``chi2``, ``kl``, ``hellinger``, extensions).
        estimator: per-token estimator (``mc``, ``atomic``, ``binary``).
        delta: proximal radius δ; ``None`` calibrates it as |f(r_min)|.
        r_min: calibration ratio (docs/conventions.md "Calibration"), used when ``delta`` is
            None.
        ratio_bound_low, ratio_bound_high: the fixed limits every per-token region is intersected
            with (the paper's (0.5, 10)); ``None`` disables a side.
        dual_clip: dual-clip constant c for A < 0 (``None`` disables).
    """

    loss_mode: str = LOSS_MODE
    divergence: str = "tv"
    estimator: str = "mc"
    delta: float | None = None
    r_min: float = defaults.R_MIN
    ratio_bound_low: float | None = defaults.RATIO_BOUNDS[0]
    ratio_bound_high: float | None = defaults.RATIO_BOUNDS[1]
    dual_clip: float | None = defaults.DUAL_CLIP

    def __post_init__(self) -> None:
        from gppo.errors import UnknownNameError
        from gppo.objectives.checks import (
            check_delta,
            check_dual_clip,
            check_r_min,
            check_ratio_bounds,
        )
        from gppo.objectives.divergences import canonical_divergence
        from gppo.objectives.estimators import get_estimator

        for field_name, check in (
            ("divergence", canonical_divergence),
            ("estimator", get_estimator),
        ):
            try:
                check(getattr(self, field_name))
            except UnknownNameError as exc:  # the registries' one wording, under the field
                raise ValueError(f"policy_loss.{field_name}: {exc}") from None
        rules = [(self.r_min, check_r_min), (self.ratio_bounds, check_ratio_bounds)]
        rules += [(self.dual_clip, check_dual_clip)]
        if self.delta is not None:  # None: calibrated from r_min
            rules.append((self.delta, check_delta))
        for value, rule in rules:  # the objectives library's rules and wording
            try:
                rule(value)
            except ValueError as exc:
                raise ValueError(f"policy_loss: {exc}") from None

    @property
    def ratio_bounds(self) -> tuple[float, float] | None:
        """The (low, high) pair the objectives library takes (open sides become 0 / +inf)."""
        lo, hi = self.ratio_bound_low, self.ratio_bound_high
        if lo is None and hi is None:
            return None
        return (0.0 if lo is None else lo, float("inf") if hi is None else hi)

    def loss_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``gppo.objectives`` for this config."""
        return {
            "divergence": self.divergence,
            "estimator": self.estimator,
            "delta": self.delta,
            "r_min": self.r_min,
            "ratio_bounds": self.ratio_bounds,
            "dual_clip": self.dual_clip,
        }


@register_policy_loss(LOSS_MODE)
def compute_policy_loss_gppo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = defaults.LOSS_AGG_MODE,
    config: DictConfig | ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """GPPO policy loss in verl's calling convention; tensors are (B, T).

    Returns ``(loss, metrics)``: the loss aggregated by verl's ``agg_loss`` with the global batch
    info of the step, and the objectives library's diagnostics prefixed ``actor/`` (verl logs
    them per step; :mod:`gppo.backends.verl.metrics_map` maps them to ``train/<key>``).
    """
    from gppo.objectives.losses import gppo_token_loss

    if config is None:
        raise ValueError("gppo loss: verl passed no actor config")
    policy_loss = config.policy_loss
    if not isinstance(policy_loss, GPPOPolicyLossConfig):
        raise TypeError(
            "gppo loss: actor_rollout_ref.actor.policy_loss must be built from "
            "_target_=gppo.backends.verl.plugin.GPPOPolicyLossConfig, got "
            f"{type(policy_loss).__name__}"
        )
    loss_mat, metrics = gppo_token_loss(
        old_log_prob, log_prob, advantages, response_mask, **policy_loss.loss_kwargs()
    )
    if rollout_is_weights is not None:
        loss_mat = loss_mat * rollout_is_weights
    loss = agg_loss(
        loss_mat=loss_mat,
        loss_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
        **config.global_batch_info,
    )
    return loss, {f"actor/{key}": float(value) for key, value in metrics.items()}
