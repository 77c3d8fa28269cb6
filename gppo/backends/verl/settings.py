"""The ``verl:`` section of a grid spec: where the model and data live and the paper's training setup.

Defaults are the paper's setup (Qwen3-8B-Base; group size 8; 128 prompts x 8 = 1024 rollouts per
step; mini-batch 16 prompts, so 8 updates per step; 20k-token responses; AdamW, lr 1e-6 constant;
token-mean; no KL term; avg@8 validation; 8 GPUs per cell). Model and data are local paths on
the cluster's shared filesystem: nothing is downloaded at run time.

Benchmarks are the ``data_source`` names that ``gppo-sweep data prepare`` writes (one parquet file
per benchmark); they are also the names of the eval metrics (``eval/<benchmark>/avg_at_8``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from gppo.backends.verl.smoke import SMOKE_SOURCE, SmokeAssets, assets_root
from gppo.store.cost import DRIVES_COST, NO_COST
from gppo.testbed import cpu_kernels as ck
from gppo.testbed.hf_assets import TestbedAssets
from gppo.testbed.settings import EVAL_TEMPERATURE, RL, ChoosesABase


class VerlSettings(ChoosesABase):
    """Everything about a verl cell that is not the loss (the loss comes from the Cell)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    domain: Annotated[Literal["math", "code"], DRIVES_COST] = "math"
    #: CPU mode (smoke runs and pre-flight on a laptop or in CI, not training): verl's trainer
    #: and vLLM's CPU build on CPUs, as :data:`gppo.backends.verl.cpu.CPU_MODE` sets them up
    #: (environment, overrides, Python, the local Ray head's fake GPUs). Needs the CPU
    #: environment (``scripts/verl-cpu-env.sh``).
    cpu: Annotated[bool, DRIVES_COST] = False
    #: ``cpu: true``: the kernels of the cell's CPU processes (:mod:`gppo.testbed.cpu_kernels`;
    #: vLLM's own CPU kernels are not among them); ignored on GPUs.
    cpu_kernels: Annotated[ck.Mode, DRIVES_COST] = Field(ck.DEFAULT, description=ck.DESCRIPTION)
    #: Train the smoke assets the project builds (a tiny random Qwen2 and arithmetic data with
    #: the ``smoke`` reward, :mod:`gppo.backends.verl.smoke`; on a CPU or a GPU) instead of ``model_path``,
    #: ``train_file`` and ``val_files``, which must then be left out.
    smoke_assets: Annotated[bool, DRIVES_COST] = False
    #: Train the CPU testbed's base model of ``domain`` (the shipped one, exported as a GPT-2 Hugging
    #: Face model) on the testbed's own training prompts, benchmarks and exact 0/1 reward, and
    #: score the base and the final policy with the testbed's own evaluator (avg@k, seed
    #: ``eval_seed``), so the rows line up with ``backend: local`` cells
    #: (:mod:`gppo.testbed.hf_assets`). ``model_path``, ``train_file`` and ``val_files`` must
    #: then be left out.
    testbed: Annotated[bool, DRIVES_COST] = False
    #: ``testbed: true``: the base of the testbed's family to train, picked by its warm-start
    #: target (:mod:`gppo.testbed.shipped`); None: the domain's default base.
    warmstart_target: Annotated[float | None, DRIVES_COST] = Field(None, gt=0, le=1)
    #: The testbed evaluator's seed (``testbed: true``; the testbed's, RL.eval_seed).
    eval_seed: Annotated[int, NO_COST] = RL.eval_seed
    #: When verl runs its own validation (vLLM samples, ``val_files``): ``all`` at step 0, every
    #: ``eval_every`` steps and at the end; ``final`` at the end only; ``none`` never. A cell's
    #: scores come from it unless ``testbed: true`` (then it is a second number,
    #: ``verl_val/...``), so ``final`` and ``none`` need ``testbed: true``.
    verl_validation: Annotated[Literal["all", "final", "none"], DRIVES_COST] = "all"
    #: Local path (on every node) of the base model, e.g. /shared/models/Qwen3-8B-Base.
    model_path: Annotated[str | None, DRIVES_COST] = Field(None, min_length=1)
    #: Training parquet written by ``gppo-sweep data prepare`` (DAPO-Math-17k / Eurus-Code-25k).
    train_file: Annotated[str | None, DRIVES_COST] = Field(None, min_length=1)
    #: One parquet file per evaluation benchmark, keyed by benchmark (= data_source) name.
    val_files: Annotated[dict[str, str], DRIVES_COST] = Field(default_factory=dict)

    # --- cluster shape -----------------------------------------------------------------------
    nnodes: Annotated[int, DRIVES_COST] = Field(1, ge=1)
    gpus_per_node: Annotated[int, DRIVES_COST] = Field(8, ge=1)
    #: vLLM tensor parallel size of the rollout engine.
    rollout_tp: Annotated[int, DRIVES_COST] = Field(2, ge=1)
    rollout_gpu_memory_utilization: Annotated[float, DRIVES_COST] = Field(0.6, gt=0.0, le=1.0)
    #: Ulysses sequence parallel size of the actor (long responses: 2-4 on 80 GB GPUs).
    sequence_parallel: Annotated[int, DRIVES_COST] = Field(1, ge=1)
    #: Token budget per GPU for dynamic micro-batching (default: one full sequence x 2).
    max_token_len_per_gpu: Annotated[int | None, DRIVES_COST] = Field(None, ge=1)
    #: Precision of the actor's parameters and compute (FSDP mixed precision) and of the vLLM
    #: rollout engine. bfloat16 is verl's default; float32 is what a parity run with the testbed
    #: needs (both sides then sample and score the same distribution).
    dtype: Annotated[Literal["bfloat16", "float32"], DRIVES_COST] = "bfloat16"
    #: verl's packed (padding-free) forward; off keeps verl on its padded path (models without
    #: verl's remove-padding patches, e.g. the testbed's GPT-2).
    use_remove_padding: Annotated[bool, DRIVES_COST] = True
    gradient_checkpointing: Annotated[bool, DRIVES_COST] = True
    #: vLLM's concurrent sequences per engine step (None: vLLM's default; CPU mode: 16).
    rollout_max_num_seqs: Annotated[int | None, DRIVES_COST] = Field(None, ge=1)

    # --- the paper's training setup ----------------------------------------------------------
    prompts_per_step: Annotated[int, DRIVES_COST] = Field(128, ge=1)  # data.train_batch_size
    group_size: Annotated[int, DRIVES_COST] = Field(8, ge=1)  # rollout.n (1024 rollouts per step)
    mini_batch_prompts: Annotated[int, DRIVES_COST] = Field(
        16, ge=1
    )  # actor.ppo_mini_batch_size (8 updates per step)
    ppo_epochs: Annotated[int, DRIVES_COST] = Field(1, ge=1)
    #: Shuffle a step's rollouts before splitting them into mini-batches (verl's
    #: ``actor.shuffle``; the testbed's loop does). Off: each mini-batch holds whole groups in
    #: order, verl's default.
    shuffle_mini_batches: Annotated[bool, NO_COST] = False
    max_prompt_length: Annotated[int, DRIVES_COST] = Field(2048, ge=1)
    max_response_length: Annotated[int, DRIVES_COST] = Field(20480, ge=1)
    total_steps: Annotated[int, DRIVES_COST] = Field(400, ge=1)
    lr: Annotated[float, NO_COST] = Field(1e-6, gt=0.0)
    weight_decay: Annotated[float, NO_COST] = Field(0.01, ge=0.0)
    grad_clip: Annotated[float, NO_COST] = Field(1.0, gt=0.0)
    temperature: Annotated[float, DRIVES_COST] = Field(1.0, gt=0.0)
    val_temperature: Annotated[float, DRIVES_COST] = Field(EVAL_TEMPERATURE, gt=0.0)
    val_top_p: Annotated[float, DRIVES_COST] = Field(1.0, gt=0.0, le=1.0)
    #: Evaluate every N steps (verl's trainer.test_freq); the final step is always evaluated and
    #: step 0 (the base model) too.
    eval_every: Annotated[int, DRIVES_COST] = Field(50, ge=1)
    #: Checkpoint every N steps; a retried attempt resumes from the latest one.
    save_every: Annotated[int, DRIVES_COST] = Field(50, ge=1)
    max_checkpoints_to_keep: Annotated[int, NO_COST] = Field(1, ge=1)
    #: Base directory (shared by all nodes) for checkpoints; each cell gets its own sub-directory.
    #: None: ``checkpoints/verl`` under the launching machine's cache root
    #: (:func:`gppo.backends.checkpoints.checkpoint_root`): on a cluster, set a shared directory.
    checkpoint_dir: Annotated[str | None, NO_COST] = Field(None, min_length=1)
    #: How often (seconds) the cell's entrypoint copies verl's metrics onto ours in its MLflow run;
    #: the launcher sees progress (and stalls) through them.
    mirror_every_s: Annotated[float, NO_COST] = Field(60.0, gt=0)
    #: verl trainer.project_name (the MLflow run itself is the dispatcher's).
    project_name: Annotated[str, NO_COST] = "gppo"

    #: Python of the cluster's nodes (with gppo-sweep and verl installed) that runs the job.
    #: None: ``python`` on the nodes' PATH; in CPU mode, the launcher's own interpreter.
    python: Annotated[str | None, NO_COST] = Field(None, min_length=1)
    #: Extra environment for the job (exported into every Ray worker of the cell).
    env: Annotated[dict[str, str], DRIVES_COST] = Field(default_factory=dict)
    #: Raw Hydra overrides appended last, e.g. ["actor_rollout_ref.rollout.enforce_eager=true"].
    extra_overrides: Annotated[list[str], DRIVES_COST] = Field(default_factory=list)

    def idle_settings(self) -> tuple[str, ...]:
        """``cpu_kernels`` acts only with ``cpu: true``: a GPU cell's dump leaves it out, so its
        config hash and checkpoint folder stay what they were before CPU kernels were pinned
        (a relaunch after the upgrade reruns nothing)."""
        return () if self.cpu else ("cpu_kernels",)

    @model_validator(mode="after")
    def _check_paths(self) -> VerlSettings:
        given = [k for k in ("model_path", "train_file") if getattr(self, k)]
        if self.val_files:
            given.append("val_files")
        if self.smoke_assets and self.testbed:
            raise ValueError("smoke_assets and testbed are two sets of built assets; choose one")
        for flag in ("smoke_assets", "testbed"):
            if getattr(self, flag) and given:
                raise ValueError(
                    f"{flag}: true builds its own model and data; drop {', '.join(given)}"
                )
        missing = [k for k in ("model_path", "train_file", "val_files") if k not in given]
        if not (self.smoke_assets or self.testbed) and missing:
            raise ValueError(
                f"{', '.join(missing)} required (or smoke_assets: true for the built tiny model "
                "and data, or testbed: true for the CPU testbed's base and tasks)"
            )
        if self.verl_validation != "all" and not self.testbed:
            raise ValueError(
                f"verl_validation: {self.verl_validation!r} needs testbed: true (without it, "
                "verl's validation is the cell's evaluation at step 0 and at the end)"
            )
        if self.warmstart_target is not None and not self.testbed:
            raise ValueError("warmstart_target picks a testbed base: it needs testbed: true")
        if self.testbed:
            if self.domain != "math":
                raise ValueError(
                    "testbed: true is built for domain math only (the code domain's programs "
                    "are not exported to verl yet)"
                )
            from gppo.testbed.hf_assets import check_testbed_fits

            check_testbed_fits(
                self.domain, self.max_prompt_length, self.max_response_length, self.cpu
            )
        return self

    @model_validator(mode="after")
    def _check_shape(self) -> VerlSettings:
        if self.prompts_per_step % self.mini_batch_prompts:
            raise ValueError(
                f"prompts_per_step ({self.prompts_per_step}) must be a multiple of "
                f"mini_batch_prompts ({self.mini_batch_prompts})"
            )
        if (self.prompts_per_step * self.group_size) % (self.nnodes * self.gpus_per_node):
            raise ValueError(
                "prompts_per_step * group_size must be divisible by nnodes * gpus_per_node"
            )
        return self

    @property
    def assets(self) -> SmokeAssets | None:
        """The smoke assets this cell trains on (``smoke_assets: true``), else None."""
        return SmokeAssets(assets_root()) if self.smoke_assets else None

    @property
    def testbed_assets(self) -> TestbedAssets | None:
        """The CPU testbed's exported base and tasks (``testbed: true``), else None."""
        if not self.testbed:
            return None
        return TestbedAssets.for_domain(self.domain, self.warmstart_target)

    @property
    def model(self) -> str:
        """The base model's directory."""
        for assets in (self.assets, self.testbed_assets):
            if assets is not None:
                return str(assets.model_dir)
        return str(self.model_path)

    def train_for(self, seed: int) -> str:
        """The training parquet of a cell with this seed (the testbed's is per seed)."""
        assets = self.assets
        if assets is not None:
            return str(assets.train_file)
        testbed = self.testbed_assets
        if testbed is not None:
            return str(testbed.train_file(seed, self.total_steps * self.prompts_per_step))
        return str(self.train_file)

    @property
    def benchmark_files(self) -> dict[str, str]:
        """``{benchmark: parquet}`` of the evaluation sets."""
        assets = self.assets
        if assets is not None:
            return {SMOKE_SOURCE: str(assets.val_file)}
        testbed = self.testbed_assets
        if testbed is not None:
            return {b: str(testbed.benchmark_file(b)) for b in testbed.benchmarks}
        return dict(self.val_files)

    @property
    def n_gpus(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def token_budget(self) -> int:
        """Per-GPU token budget for verl's dynamic batch size (two full sequences by default)."""
        if self.max_token_len_per_gpu is not None:
            return self.max_token_len_per_gpu
        return 2 * (self.max_prompt_length + self.max_response_length)
