"""``LocalSettings``: the ``local:`` section of a grid spec. Defaults = the quick-start budget.

The base-model fields and the RL defaults are the testbed's own (:mod:`gppo.testbed.settings`):
this section adds what only our loop has (evaluation cadence, threads).
"""

from __future__ import annotations

from pydantic import Field

from gppo.testbed import cpu_kernels as ck
from gppo.testbed.settings import RL, BaseModelSettings


class LocalSettings(BaseModelSettings):
    """Settings of the CPU testbed (unknown keys are rejected).

    The warm start ("base model") depends only on the base-model fields it inherits
    (:class:`~gppo.testbed.settings.BaseModelSettings`), so every cell of a sweep shares one base.
    """

    # RL (GRPO-style)
    steps: int = Field(RL.steps, ge=0, description="RL iterations (rollout + updates); MLflow step")
    prompts_per_step: int = Field(RL.prompts_per_step, ge=1)
    group_size: int = Field(RL.group_size, ge=2, description="G: rollouts per prompt")
    minibatches: int = Field(RL.minibatches, ge=1, description="optimiser updates per iteration")
    ppo_epochs: int = Field(RL.ppo_epochs, ge=1)
    lr: float = Field(RL.lr, gt=0)
    weight_decay: float = Field(RL.weight_decay, ge=0)
    grad_clip: float | None = Field(RL.grad_clip, gt=0)
    temperature: float = Field(RL.temperature, gt=0)
    # evaluation
    eval_every: int | None = Field(None, ge=1)
    eval_seed: int = RL.eval_seed
    eval_prompts: int | None = Field(None, ge=1, description="cap per benchmark (None: all 64)")
    # runtime
    num_threads: int = Field(RL.num_threads, ge=1)
    cpu_kernels: ck.Mode = Field(ck.DEFAULT, description=ck.DESCRIPTION)
