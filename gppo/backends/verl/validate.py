"""Check overrides against verl's own config, the way ``verl.trainer.main_ppo`` loads it.

:func:`compose` composes verl's shipped ``ppo_trainer`` Hydra config with the overrides (what
``@hydra.main(config_path="config", config_name="ppo_trainer")`` does), and :func:`validate`
then runs the checks verl runs before it starts Ray and the workers:

* ``verl.utils.config.validate_config`` (what ``main_ppo.main`` calls; it builds the actor config
  dataclass, so our ``GPPOPolicyLossConfig`` is instantiated through its ``_target_``);
* conversion of the rollout (and its checkpoint engine) and algorithm sections into their
  dataclasses (what the trainer and the workers do first, each with ``__post_init__`` checks).

Every failure becomes one :class:`VerlConfigError` line. verl is imported here, lazily.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omegaconf import DictConfig

from gppo.errors import BackendError


class VerlConfigError(BackendError):
    """An override that verl's config refuses (the message is one line)."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:500] + ("..." if len(text) > 500 else "")


@functools.lru_cache(maxsize=1)
def verl_config_dir() -> str:
    """The directory of verl's shipped trainer configs (``verl/trainer/config``)."""
    import verl.trainer.main_ppo as main_ppo

    return os.path.join(os.path.dirname(main_ppo.__file__), "config")


def compose(overrides: Sequence[str]) -> DictConfig:
    """verl's ``ppo_trainer`` config with ``overrides`` applied (an OmegaConf DictConfig)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
            return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))
    except Exception as exc:  # hydra's own errors name the bad override
        raise VerlConfigError(f"verl config: {_one_line(exc)}") from None


def _build(cfg: Any) -> dict[str, Any]:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    import gppo.backends.verl.plugin  # noqa: F401  (the `gppo` loss mode and its config class)

    try:
        validate_config(
            config=cfg,
            use_reference_policy=need_reference_policy(cfg),
            use_critic=need_critic(cfg),
        )
        return {
            "actor": omega_conf_to_dataclass(cfg.actor_rollout_ref.actor),
            "rollout": omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout),
            "checkpoint_engine": omega_conf_to_dataclass(
                cfg.actor_rollout_ref.rollout.checkpoint_engine
            ),
            "algorithm": omega_conf_to_dataclass(cfg.algorithm),
        }
    except Exception as exc:
        raise VerlConfigError(f"verl config: {type(exc).__name__}: {_one_line(exc)}") from None


def validate(cfg: DictConfig) -> dict[str, Any]:
    """Run verl's pre-flight checks on a composed config; returns the built dataclasses."""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    # verl prints its verdict to stdout and warns about the critic: keep stdout clean (for
    # `gppo-sweep plan --json`); failures still raise.
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = _build(cfg)
    mode = built["actor"].policy_loss.loss_mode
    if mode not in POLICY_LOSS_REGISTRY:
        raise VerlConfigError(
            f"verl config: unknown policy loss mode {mode!r}; known: "
            f"{', '.join(sorted(POLICY_LOSS_REGISTRY))}"
        )
    if mode == "gppo":
        from gppo.backends.verl.plugin import GPPOPolicyLossConfig

        if not isinstance(built["actor"].policy_loss, GPPOPolicyLossConfig):
            raise VerlConfigError(
                "verl config: loss_mode gppo needs actor_rollout_ref.actor.policy_loss._target_="
                "gppo.backends.verl.plugin.GPPOPolicyLossConfig"
            )
    return built


@functools.lru_cache(maxsize=256)
def compose_and_validate(overrides: tuple[str, ...]) -> tuple[DictConfig, dict[str, Any]]:
    """``(composed config, built dataclasses)``, cached per override tuple (treat as read-only)."""
    cfg = compose(overrides)
    return cfg, validate(cfg)


def check_overrides(overrides: tuple[str, ...]) -> None:
    """Compose and validate; raises :class:`VerlConfigError` with one line."""
    compose_and_validate(tuple(overrides))
