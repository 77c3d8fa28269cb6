"""``LocalSettings``: the ``local:`` section of a grid spec. Defaults = the quick-start budget."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LocalSettings(BaseModel):
    """Settings of the CPU testbed (unknown keys are rejected).

    The warm start ("base model") depends only on the ``domain``, ``d_model``/``n_layers``/
    ``n_heads`` and ``warmstart_*`` fields, so every cell of a sweep shares one cached base model.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    domain: Literal["math", "code"] = "math"
    # policy
    d_model: int = Field(128, ge=16)
    n_layers: int = Field(2, ge=1)
    n_heads: int = Field(4, ge=1)
    # base model: supervised warm start on a noisy distribution, stopped on a validation target
    # (shipped with the package for the defaults, else built once and cached on disk)
    warmstart_steps: int = Field(
        30000, ge=0, description="the most supervised steps, restarts included"
    )
    warmstart_target: float | None = Field(
        None,
        gt=0,
        le=1,
        description="stop at the first check whose validation avg@k (domain mean) reaches this; "
        "None: the domain's (math 0.25, code 0.10); 1.0: run every step",
    )
    warmstart_check_every: int = Field(50, ge=1, description="steps between validation checks")
    warmstart_fine_check_every: int | None = Field(
        None,
        ge=1,
        description="steps between checks once validation reaches half the target; "
        "None: warmstart_check_every throughout",
    )
    warmstart_restart_after: int | None = Field(
        4000,
        ge=1,
        description="an attempt whose checks have not reached half the target in this many steps "
        "starts over from fresh weights; None: never",
    )
    warmstart_batch: int = Field(128, ge=1)
    warmstart_lr: float = Field(1e-3, gt=0, description="constant after a 50-step warm-up")
    warmstart_noise: float = Field(
        0.3, ge=0, le=1, description="share of training answers replaced by a plausible wrong one"
    )
    warmstart_seed: int = 0
    # RL (GRPO-style)
    steps: int = Field(60, ge=0, description="RL iterations (rollout + updates); MLflow step")
    prompts_per_step: int = Field(32, ge=1)
    group_size: int = Field(8, ge=2, description="G: rollouts per prompt")
    minibatches: int = Field(8, ge=1, description="optimiser updates per iteration")
    ppo_epochs: int = Field(1, ge=1)
    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float | None = Field(1.0, gt=0)
    temperature: float = Field(1.0, gt=0)
    # evaluation
    eval_every: int | None = Field(None, ge=1)
    eval_seed: int = 1234
    eval_prompts: int | None = Field(None, ge=1, description="cap per benchmark (None: all 64)")
    # runtime
    num_threads: int = Field(1, ge=1)
    cache_dir: str | None = Field(
        None, description="warm-start cache (None: $GPPO_CACHE_DIR or ~/.cache/gppo-sweep/local)"
    )

    @model_validator(mode="after")
    def _heads_divide_width(self) -> LocalSettings:
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must divide d_model ({self.d_model})")
        return self
