"""``LocalSettings``: the ``local:`` section of a grid spec. Defaults = the quick-start budget.

The base-model fields and the RL defaults are the testbed's own (:mod:`gppo.testbed.settings`):
this section adds what only our loop has (evaluation cadence, threads).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gppo.store.cost import DRIVES_COST, NO_COST
from gppo.testbed import cpu_kernels as ck
from gppo.testbed.settings import RL, BaseModelSettings


class LocalSettings(BaseModelSettings):
    """Settings of the CPU testbed (unknown keys are rejected).

    The warm start ("base model") depends only on the base-model fields it inherits
    (:class:`~gppo.testbed.settings.BaseModelSettings`), so every cell of a sweep shares one base.
    """

    # RL (GRPO-style)
    steps: Annotated[int, DRIVES_COST] = Field(
        RL.steps, ge=0, description="RL iterations (rollout + updates); MLflow step"
    )
    prompts_per_step: Annotated[int, DRIVES_COST] = Field(RL.prompts_per_step, ge=1)
    group_size: Annotated[int, DRIVES_COST] = Field(
        RL.group_size, ge=2, description="G: rollouts per prompt"
    )
    minibatches: Annotated[int, DRIVES_COST] = Field(
        RL.minibatches, ge=1, description="optimiser updates per iteration"
    )
    ppo_epochs: Annotated[int, DRIVES_COST] = Field(RL.ppo_epochs, ge=1)
    lr: Annotated[float, NO_COST] = Field(RL.lr, gt=0)
    weight_decay: Annotated[float, NO_COST] = Field(RL.weight_decay, ge=0)
    grad_clip: Annotated[float | None, NO_COST] = Field(RL.grad_clip, gt=0)
    temperature: Annotated[float, DRIVES_COST] = Field(RL.temperature, gt=0)
    # evaluation
    eval_every: Annotated[int | None, DRIVES_COST] = Field(None, ge=1)
    eval_seed: Annotated[int, NO_COST] = RL.eval_seed
    eval_prompts: Annotated[int | None, DRIVES_COST] = Field(
        None, ge=1, description="cap per benchmark (None: all 64)"
    )
    # runtime
    num_threads: Annotated[int, DRIVES_COST] = Field(RL.num_threads, ge=1)
    cpu_kernels: Annotated[ck.Mode, DRIVES_COST] = Field(ck.DEFAULT, description=ck.DESCRIPTION)
