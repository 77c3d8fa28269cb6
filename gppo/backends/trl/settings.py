"""The ``trl:`` section of a grid spec: one cell trained by TRL's ``GRPOTrainer``.

Defaults are the CPU testbed's RL settings (:data:`gppo.testbed.settings.RL`, as ``backend:
local``'s): G = 8 samples at temperature 1, 32 prompts per step, 8 mini-batch updates per step,
one epoch, token-mean, AdamW lr 1e-4 constant, weight decay 0, gradient clip 1, no KL, no entropy
bonus, float32, no dropout, no gradient checkpointing (TRL's own defaults differ: bf16, gradient checkpointing, a shuffled dataset).
One *step* here is one generation batch and its updates, as in the testbed and in verl (TRL's own
``global_step`` counts optimiser updates: ``minibatches * ppo_epochs`` per step).

Two routes. ``testbed: true`` (the default) trains the CPU testbed's exported base on its tasks
(``warmstart_target`` picks a member of the base family: :mod:`gppo.testbed.hf_assets`).
``testbed: false`` trains a Hugging Face model of your own (``model_path``) on data written by
``gppo-sweep data prepare -b trl`` (verl's parquet schema, so a spec's ``model_path``,
``train_file``, ``val_files``, ``max_prompt_length`` and ``domain`` mean the same under ``verl:``
and ``trl:``), rewarded and scored by :func:`gppo.backends.rewards.compute_score`
(:mod:`gppo.backends.trl.realmodel`).

Processes. ``num_gpus: 0`` trains on the CPU, ``num_gpus: 1`` on one CUDA GPU, both in one
process. ``num_gpus: N`` (N > 1) runs the cell as N data-parallel processes under
``accelerate launch`` (one per GPU; TRL's ``GRPOTrainer`` splits each step's samples across
them), and ``num_processes: N`` with ``num_gpus: 0`` does the same on a CPU (gloo): each step's
``prompts_per_step * group_size`` samples must split evenly into ``minibatches`` updates on every
process. Only the first process evaluates and logs.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from gppo.store.cost import DRIVES_COST, NO_COST
from gppo.testbed import cpu_kernels as ck
from gppo.testbed.settings import (
    EVAL_TEMPERATURE,
    RL,
    BaseModelSettings,
    ChoosesABase,
    base_settings,
)

#: ``max_new_tokens`` of a ``testbed: false`` cell that sets none.
DEFAULT_MAX_NEW_TOKENS = 1024
#: settings of the ``testbed: false`` route only (refused beside ``testbed: true``, not ignored)
OWN_MODEL_ONLY = ("max_prompt_length", "chat_template", "eval_prompts", "eval_batch_size")


class TrlSettings(ChoosesABase):
    """Validated ``trl:`` section (unknown keys refused)."""

    model_config = ConfigDict(extra="forbid")

    testbed: Annotated[bool, DRIVES_COST] = Field(
        True,
        description="train the CPU testbed's exported base on its tasks, scored by its evaluator",
    )
    domain: Annotated[Literal["math", "code"], DRIVES_COST] = "math"
    #: ``testbed: false``: local directory of a Hugging Face causal LM and its tokenizer.
    model_path: Annotated[str | None, DRIVES_COST] = Field(None, min_length=1)
    #: ``testbed: false``: training parquet written by ``gppo-sweep data prepare -b trl``.
    train_file: Annotated[str | None, DRIVES_COST] = Field(None, min_length=1)
    #: ``testbed: false``: one parquet per evaluation benchmark, keyed by benchmark (data_source).
    val_files: Annotated[dict[str, str], DRIVES_COST] = Field(default_factory=dict)
    #: ``testbed: false``: prompts longer than this (tokens, chat template applied) are left out
    #: of training and evaluation, as verl's ``filter_overlong_prompts`` does.
    max_prompt_length: Annotated[int, DRIVES_COST] = Field(2048, ge=1)
    #: ``testbed: false``: render each prompt's chat messages with the tokenizer's chat template
    #: (TRL's conversational format); false: the messages' contents joined as plain text.
    chat_template: Annotated[bool, DRIVES_COST] = True
    #: ``testbed: false``: rows of each benchmark scored (None: all of them).
    eval_prompts: Annotated[int | None, DRIVES_COST] = Field(None, ge=1)
    #: ``testbed: false``: sequences one evaluation ``generate`` call samples.
    eval_batch_size: Annotated[int, DRIVES_COST] = Field(64, ge=1)
    #: ``testbed: true``: the base of the testbed's family to train, picked by its warm-start
    #: target (``base-math-target0.03`` for 0.03; :mod:`gppo.testbed.shipped`); None: the default
    warmstart_target: Annotated[float | None, DRIVES_COST] = Field(None, gt=0, le=1)
    # the testbed's RL defaults (gppo.testbed.settings.RL)
    steps: Annotated[int, DRIVES_COST] = Field(
        RL.steps, ge=1, description="generation batches (each: rollouts + updates)"
    )
    prompts_per_step: Annotated[int, DRIVES_COST] = Field(RL.prompts_per_step, ge=1)
    group_size: Annotated[int, DRIVES_COST] = Field(
        RL.group_size, ge=2, description="G: samples per prompt"
    )
    minibatches: Annotated[int, DRIVES_COST] = Field(
        RL.minibatches, ge=1, description="optimiser updates per step and epoch"
    )
    ppo_epochs: Annotated[int, DRIVES_COST] = Field(
        RL.ppo_epochs, ge=1, description="TRL's num_iterations"
    )
    lr: Annotated[float, NO_COST] = Field(RL.lr, gt=0)
    lr_schedule: Annotated[Literal["constant", "linear", "cosine"], NO_COST] = "constant"
    warmup_steps: Annotated[int, NO_COST] = Field(
        0, ge=0, description="optimiser updates of linear warm-up"
    )
    weight_decay: Annotated[float, NO_COST] = Field(RL.weight_decay, ge=0)
    grad_clip: Annotated[float | None, NO_COST] = Field(RL.grad_clip, gt=0)
    temperature: Annotated[float, DRIVES_COST] = Field(RL.temperature, gt=0)
    #: the evaluation's sampling temperature (avg@k, both routes), as verl's ``val_temperature``
    #: (same name, same default: a section moves between ``verl:`` and ``trl:``)
    val_temperature: Annotated[float, DRIVES_COST] = Field(EVAL_TEMPERATURE, gt=0)
    max_new_tokens: Annotated[int | None, DRIVES_COST] = Field(
        None, ge=1, description="None: the testbed domain's budget, or 1024 for testbed: false"
    )
    dtype: Annotated[Literal["float32", "bfloat16"], DRIVES_COST] = "float32"
    gradient_checkpointing: Annotated[bool, DRIVES_COST] = False
    use_vllm: Annotated[bool, DRIVES_COST] = Field(
        False, description="generate with vLLM (a GPU, vLLM installed)"
    )
    vllm_mode: Annotated[Literal["colocate", "server"], DRIVES_COST] = "colocate"
    #: ``vllm_mode: server``: the base URL of a running ``trl vllm-serve`` (e.g.
    #: ``http://localhost:8000``), TRL's ``vllm_server_base_url``.
    vllm_server_url: Annotated[str | None, DRIVES_COST] = Field(None, min_length=1)
    num_gpus: Annotated[int, DRIVES_COST] = Field(
        0, ge=0, description="0: CPU; N: N CUDA GPUs, one data-parallel process on each"
    )
    num_processes: Annotated[int, DRIVES_COST] = Field(
        1, ge=1, description="num_gpus: 0: data-parallel CPU processes (gloo); else num_gpus"
    )
    num_threads: Annotated[int, DRIVES_COST] = Field(
        RL.num_threads, ge=1, description="torch threads of the cell (CPU)"
    )
    cpu_kernels: Annotated[ck.Mode, DRIVES_COST] = Field(ck.DEFAULT, description=ck.DESCRIPTION)
    eval_seed: Annotated[int, NO_COST] = Field(
        RL.eval_seed, description="the evaluation's sampling seed (avg@k)"
    )
    save_every: Annotated[int, DRIVES_COST] = Field(
        10, ge=1, description="steps between checkpoints (resume)"
    )
    checkpoint_dir: Annotated[str | None, NO_COST] = Field(
        None,
        min_length=1,
        description="cells' TRL checkpoints (a retried attempt resumes from its cell's latest); "
        "None: the cache root's checkpoints/trl (gppo.backends.checkpoints)",
    )

    @model_validator(mode="after")
    def _check(self) -> TrlSettings:
        self._check_route()
        if (self.prompts_per_step * self.group_size) % self.minibatches:
            raise ValueError(
                f"minibatches: {self.minibatches} must divide prompts_per_step * group_size "
                f"({self.prompts_per_step * self.group_size} samples per step)"
            )
        if self.num_gpus and self.num_processes not in (1, self.num_gpus):
            raise ValueError(
                f"num_processes: {self.num_processes} is for num_gpus: 0 (CPU); with num_gpus: "
                f"{self.num_gpus} the cell runs one process per GPU (leave num_processes out)"
            )
        n = self.processes
        if n > 1 and self.samples_per_step % (self.minibatches * n):
            field = "num_gpus" if self.num_gpus else "num_processes"
            raise ValueError(
                f"prompts_per_step * group_size ({self.samples_per_step} samples per step) must "
                f"divide across minibatches: {self.minibatches} x {field}: {n} (processes)"
            )
        self._check_vllm()
        return self

    def _check_vllm(self) -> None:
        if not self.use_vllm:
            given = self._changed("vllm_mode", "vllm_server_url")
            if given:
                raise ValueError(f"{', '.join(given)} needs use_vllm: true")
            return
        if self.num_gpus == 0:
            raise ValueError("use_vllm: true needs num_gpus >= 1 (vLLM generation on a GPU)")
        if (self.vllm_mode == "server") != (self.vllm_server_url is not None):
            raise ValueError(
                "vllm_mode: server needs vllm_server_url (a running `trl vllm-serve`), and "
                "vllm_server_url needs vllm_mode: server"
            )

    def _check_route(self) -> None:
        own = [k for k in ("model_path", "train_file", "val_files") if getattr(self, k)]
        if self.testbed:
            if own:
                raise ValueError(
                    f"testbed: true trains the testbed's base on its tasks; drop {', '.join(own)} "
                    "(or set testbed: false)"
                )
            if self.domain != "math":
                raise ValueError("domain: 'code' needs testbed: false (the testbed is math only)")
            given = self._changed(*OWN_MODEL_ONLY)
            if given:
                raise ValueError(
                    f"{', '.join(given)} needs testbed: false (the testbed's prompts and its "
                    "evaluator are its own: whole benchmarks, plain-text prompts)"
                )
            return
        if self.warmstart_target is not None:
            raise ValueError(
                "warmstart_target picks a base of the testbed's family: it needs testbed: true "
                "(testbed: false trains model_path)"
            )
        missing = [k for k in ("model_path", "train_file", "val_files") if k not in own]
        if missing:
            raise ValueError(
                f"testbed: false needs {', '.join(missing)} (a Hugging Face model directory and "
                "parquet files from `gppo-sweep data prepare -b trl`)"
            )

    def _changed(self, *names: str) -> list[str]:
        """Those of ``names`` set to other than their default (a cell's settings arrive as a full
        dump, so what was set cannot be told from ``model_fields_set``)."""
        fields = type(self).model_fields
        return [n for n in names if getattr(self, n) != fields[n].default]

    @property
    def completion_length(self) -> int:
        """Tokens each completion may have (``max_new_tokens``, or its route's default)."""
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        if self.testbed:
            from gppo.testbed.tasks import get_domain

            return get_domain(self.domain).max_new_tokens
        return DEFAULT_MAX_NEW_TOKENS

    @property
    def base(self) -> BaseModelSettings:
        """``testbed: true``: the testbed base this cell trains (picked by ``warmstart_target``)."""
        return base_settings(self.domain, self.warmstart_target)

    @property
    def updates_per_step(self) -> int:
        """TRL optimiser steps (its ``global_step``) per generation batch."""
        return self.minibatches * self.ppo_epochs

    @property
    def processes(self) -> int:
        """Data-parallel training processes: one per GPU, or ``num_processes`` on a CPU."""
        return self.num_gpus or self.num_processes

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.group_size
