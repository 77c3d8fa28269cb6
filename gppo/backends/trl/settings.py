"""The ``trl:`` section of a grid spec: one cell trained by TRL's ``GRPOTrainer``.

Defaults are the CPU testbed's RL settings (``backend: local``): G = 8 samples at temperature 1,
32 prompts per step, 8 mini-batch updates per step, one epoch, token-mean, AdamW lr 1e-4 constant,
weight decay 0, gradient clip 1, no KL, no entropy bonus, float32, no dropout, no gradient
checkpointing (TRL's own defaults differ: bf16, gradient checkpointing, a shuffled dataset).
One *step* here is one generation batch and its updates, as in the testbed and in verl (TRL's own
``global_step`` counts optimiser updates: ``minibatches * ppo_epochs`` per step).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TrlSettings(BaseModel):
    """Validated ``trl:`` section (unknown keys refused)."""

    model_config = ConfigDict(extra="forbid")

    testbed: bool = Field(
        True,
        description="train the CPU testbed's exported base on its tasks, scored by its evaluator",
    )
    domain: Literal["math"] = "math"
    steps: int = Field(60, ge=1, description="generation batches (each: rollouts + updates)")
    prompts_per_step: int = Field(32, ge=1)
    group_size: int = Field(8, ge=2, description="G: samples per prompt")
    minibatches: int = Field(8, ge=1, description="optimiser updates per step and epoch")
    ppo_epochs: int = Field(1, ge=1, description="TRL's num_iterations")
    lr: float = Field(1e-4, gt=0)
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0, description="optimiser updates of linear warm-up")
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float | None = Field(1.0, gt=0)
    temperature: float = Field(1.0, gt=0)
    max_new_tokens: int | None = Field(None, ge=1, description="None: the testbed domain's budget")
    dtype: Literal["float32", "bfloat16"] = "float32"
    gradient_checkpointing: bool = False
    use_vllm: bool = Field(False, description="generate with vLLM (a GPU, vLLM installed)")
    vllm_mode: Literal["colocate", "server"] = "colocate"
    num_gpus: int = Field(0, ge=0, description="0: CPU; 1: one CUDA GPU")
    num_threads: int = Field(1, ge=1, description="torch threads of the cell (CPU)")
    eval_seed: int = Field(1234, description="the testbed evaluator's seed (avg@k)")
    save_every: int = Field(10, ge=1, description="steps between checkpoints (resume)")
    checkpoint_dir: str = Field(
        "~/.cache/gppo-sweep/trl-checkpoints",
        description="cells' TRL checkpoints (a retried attempt resumes from its cell's latest)",
    )

    @model_validator(mode="after")
    def _check(self) -> TrlSettings:
        if not self.testbed:
            raise ValueError(
                "testbed: false is not supported yet: the trl backend trains the CPU testbed's "
                "exported base (set testbed: true)"
            )
        if (self.prompts_per_step * self.group_size) % self.minibatches:
            raise ValueError(
                f"minibatches: {self.minibatches} must divide prompts_per_step * group_size "
                f"({self.prompts_per_step * self.group_size} samples per step)"
            )
        if self.num_gpus > 1:
            raise ValueError("num_gpus: at most 1 (one process; multi-GPU TRL is not wired yet)")
        if self.use_vllm and self.num_gpus == 0:
            raise ValueError("use_vllm: true needs num_gpus: 1 (vLLM generation on a GPU)")
        return self

    @property
    def updates_per_step(self) -> int:
        """TRL optimiser steps (its ``global_step``) per generation batch."""
        return self.minibatches * self.ppo_epochs

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.group_size
