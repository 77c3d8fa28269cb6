"""Cell -> the Hydra overrides of one ``verl.trainer.main_ppo`` run (pure: no verl import; a CPU
cell adds the CPU mode's, :data:`gppo.backends.verl.cpu.CPU_OVERRIDES`).

The overrides are built as an ordered ``{key: python value}`` mapping and rendered into Hydra's
override grammar by :func:`render`, which quotes every string (no value from a spec can change
the meaning of another override). Keys that verl's config does not have are added with ``+``
(our policy-loss fields); everything else must already exist in verl's config, which
:mod:`gppo.backends.verl.validate` checks by composing and validating the result with verl's own
code before anything is submitted.

Loss selection (docs/conventions.md):
- grid cells (and the aliases grpo/dapo/dppo/ripo) use loss mode ``gppo`` with our
  ``GPPOPolicyLossConfig`` (divergence, estimator, δ or r_min, ratio bounds, dual clip);
- baselines use verl's own loss modes with their papers' defaults, which the Cell carries in
  ``loss_params`` (the objectives library's method defaults): GSPO -> ``gspo``,
  GMPO -> ``geo_mean``, SAPO -> ``sapo`` (τ are actor fields), CISPO -> ``cispo``,
  Clip-Cov -> ``clip_cov``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from gppo.backends.verl.settings import VerlSettings
from gppo.cell import Cell
from gppo.errors import BackendError
from gppo.objectives import defaults
from gppo.registry import LazyMapping

ACTOR = "actor_rollout_ref.actor"
POLICY_LOSS = f"{ACTOR}.policy_loss"
ROLLOUT = "actor_rollout_ref.rollout"
#: Our PolicyLossConfig subclass (defined in the plugin module, imported by Hydra in each worker).
GPPO_LOSS_TARGET = "gppo.backends.verl.plugin.GPPOPolicyLossConfig"
#: The custom reward function: benchmark names -> verl's own scorers (see reward.py).
REWARD_PATH = "pkg://gppo.backends.rewards"
REWARD_NAME = "compute_score"

#: Our baseline method name -> verl's registered loss mode (each method carries its own:
#: :func:`gppo.objectives.methods.verl_loss_modes`; built on first use, torch stays unimported).
BASELINE_LOSS_MODES: Mapping[str, str] = LazyMapping(
    lambda: {m: mode for m, mode in _verl_loss_modes().items() if m != "gppo"}
)


def _verl_loss_modes() -> dict[str, str]:
    from gppo.objectives.methods import verl_loss_modes

    return verl_loss_modes()


#: Baseline hyper-parameter (objectives-library name) -> verl config key.
BASELINE_PARAM_KEYS: dict[str, str] = {
    "clip_ratio_low": f"{ACTOR}.clip_ratio_low",
    "clip_ratio_high": f"{ACTOR}.clip_ratio_high",
    "clip_ratio": f"{ACTOR}.clip_ratio",
    "log_clip": f"{ACTOR}.clip_ratio",  # GMPO: symmetric log-space clip
    "tau_pos": f"{ACTOR}.tau_pos",
    "tau_neg": f"{ACTOR}.tau_neg",
    "clip_cov_ratio": f"{POLICY_LOSS}.clip_cov_ratio",
    "clip_cov_lb": f"{POLICY_LOSS}.clip_cov_lb",
    "clip_cov_ub": f"{POLICY_LOSS}.clip_cov_ub",
    "loss_agg_mode": f"{ACTOR}.loss_agg_mode",
    "dual_clip": f"{ACTOR}.clip_ratio_c",
}
#: GPPO loss parameter -> field of GPPOPolicyLossConfig (added with ``+``).
GPPO_PARAM_FIELDS = ("divergence", "estimator", "delta", "r_min", "dual_clip")


class OverrideError(BackendError):
    """A cell that cannot be expressed as verl overrides (one-line message)."""


def cell_checkpoint_dir(cell: Cell, settings: VerlSettings) -> str:
    """Per-cell checkpoint directory: stable across retries, new when the cell's settings change
    (:func:`gppo.backends.checkpoints.cell_checkpoint_dir`, resolved on the launching machine)."""
    from gppo.backends.checkpoints import cell_checkpoint_dir as cell_dir

    return str(cell_dir(cell, "verl", settings.checkpoint_dir))


def _loss_overrides(cell: Cell) -> dict[str, Any]:
    params = dict(cell.loss_params)
    out: dict[str, Any] = {}
    if cell.method == "gppo":  # a grid cell: our loss, our config class
        out[f"{POLICY_LOSS}._target_"] = GPPO_LOSS_TARGET
        out[f"{POLICY_LOSS}.loss_mode"] = "gppo"
        bounds = params.pop("ratio_bounds", defaults.RATIO_BOUNDS)
        low, high = (None, None) if bounds is None else (float(bounds[0]), float(bounds[1]))
        if "loss_agg_mode" in params:
            out[f"{ACTOR}.loss_agg_mode"] = params.pop("loss_agg_mode")
        unknown = sorted(set(params) - set(GPPO_PARAM_FIELDS))
        if unknown:
            raise OverrideError(
                f"cell {cell.id}: unknown gppo loss parameter(s) {', '.join(unknown)}; "
                f"known: {', '.join((*GPPO_PARAM_FIELDS, 'ratio_bounds', 'loss_agg_mode'))}"
            )
        for name in GPPO_PARAM_FIELDS:
            if name in params:
                value = params[name]
                out[f"+{POLICY_LOSS}.{name}"] = None if value is None else _plain(value)
        out[f"+{POLICY_LOSS}.ratio_bound_low"] = low
        out[f"+{POLICY_LOSS}.ratio_bound_high"] = high
        return out
    try:
        mode = BASELINE_LOSS_MODES[cell.method]
    except KeyError:
        raise OverrideError(
            f"cell {cell.id}: method {cell.method!r} has no verl loss; known: gppo (grid cells), "
            f"{', '.join(sorted(BASELINE_LOSS_MODES))}"
        ) from None
    out[f"{POLICY_LOSS}.loss_mode"] = mode
    params.pop("ratio_bounds", None)  # a GPPO-only knob (objective section applies to all)
    if params.get("dual_clip", 0) is None:
        params.pop("dual_clip")  # verl always applies clip_ratio_c; keep its default
    unknown = sorted(set(params) - set(BASELINE_PARAM_KEYS))
    if unknown:
        raise OverrideError(
            f"cell {cell.id}: unknown {cell.method} parameter(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(BASELINE_PARAM_KEYS))}"
        )
    for name, value in params.items():
        out[BASELINE_PARAM_KEYS[name]] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value) if isinstance(value, float) else value
    raise OverrideError(f"unsupported parameter value {value!r}")


def build_overrides(cell: Cell, settings: VerlSettings) -> dict[str, Any]:
    """All overrides of one cell, in a stable order, as ``{key: value}`` (``+key`` adds a key):
    verl's sections in turn (data, model and actor, rollout, reward and trainer), the cell's loss,
    then what the settings' modes change (float32, the testbed, validation, CPU)."""
    ov: dict[str, Any] = {
        # algorithm: GRPO advantages, no KL anywhere (the paper trains without a KL term)
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_in_reward": False,
        **_data_overrides(cell, settings),
        **_actor_overrides(cell, settings),
        **_rollout_overrides(cell, settings),
        **_trainer_overrides(cell, settings),
    }
    ov.update(_loss_overrides(cell))
    ov.update(_mode_overrides(settings))
    return ov


def _data_overrides(cell: Cell, s: VerlSettings) -> dict[str, Any]:
    """The training parquet of the cell's seed and one validation file per benchmark."""
    files = s.benchmark_files
    benchmarks = cell.benchmarks or tuple(files)
    missing = [b for b in benchmarks if b not in files]
    if missing:
        raise OverrideError(
            f"cell {cell.id}: no val_files entry for benchmark(s) {', '.join(missing)}; "
            f"configured: {', '.join(files)}"
        )
    return {
        "data.train_files": [s.train_for(cell.seed)],
        "data.val_files": [files[b] for b in benchmarks],
        "data.train_batch_size": s.prompts_per_step,
        "data.max_prompt_length": s.max_prompt_length,
        "data.max_response_length": s.max_response_length,
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.seed": cell.seed,
    }


def _actor_overrides(cell: Cell, s: VerlSettings) -> dict[str, Any]:
    """The model, the actor's optimiser and batch shape, and what its checkpoints keep."""
    return {
        "actor_rollout_ref.model.path": s.model,
        "actor_rollout_ref.model.use_remove_padding": s.use_remove_padding,
        "actor_rollout_ref.model.enable_gradient_checkpointing": s.gradient_checkpointing,
        f"{ACTOR}.optim.lr": s.lr,
        f"{ACTOR}.optim.lr_warmup_steps": 0,
        f"{ACTOR}.optim.lr_scheduler_type": "constant",
        f"{ACTOR}.optim.weight_decay": s.weight_decay,
        f"{ACTOR}.optim.clip_grad": s.grad_clip,
        f"{ACTOR}.ppo_mini_batch_size": s.mini_batch_prompts,
        f"{ACTOR}.ppo_epochs": s.ppo_epochs,
        f"{ACTOR}.shuffle": s.shuffle_mini_batches,
        f"{ACTOR}.use_dynamic_bsz": True,
        f"{ACTOR}.ppo_max_token_len_per_gpu": s.token_budget,
        f"{ACTOR}.ulysses_sequence_parallel_size": s.sequence_parallel,
        f"{ACTOR}.use_kl_loss": False,
        f"{ACTOR}.entropy_coeff": 0,
        f"{ACTOR}.loss_agg_mode": defaults.LOSS_AGG_MODE,
        f"{ACTOR}.clip_ratio_c": defaults.DUAL_CLIP,  # verl's own losses' dual clip: ours
        f"{ACTOR}.data_loader_seed": cell.seed,
        f"{ACTOR}.checkpoint.save_contents": [
            "model",
            "optimizer",
            "extra",
            # a testbed cell's final policy is scored from its Hugging Face export (yardstick.py)
            *(["hf_model"] if s.testbed else []),
        ],
    }


def _rollout_overrides(cell: Cell, s: VerlSettings) -> dict[str, Any]:
    """vLLM's sampling for training and for avg@k validation, and the reference's log-probs."""
    return {
        f"{ROLLOUT}.name": "vllm",
        f"{ROLLOUT}.n": s.group_size,
        f"{ROLLOUT}.temperature": s.temperature,
        f"{ROLLOUT}.tensor_model_parallel_size": s.rollout_tp,
        f"{ROLLOUT}.gpu_memory_utilization": s.rollout_gpu_memory_utilization,
        f"{ROLLOUT}.log_prob_use_dynamic_bsz": True,
        f"{ROLLOUT}.log_prob_max_token_len_per_gpu": s.token_budget,
        f"{ROLLOUT}.seed": cell.seed,
        f"{ROLLOUT}.val_kwargs.n": cell.eval_k,
        f"{ROLLOUT}.val_kwargs.do_sample": True,
        f"{ROLLOUT}.val_kwargs.temperature": s.val_temperature,
        f"{ROLLOUT}.val_kwargs.top_p": s.val_top_p,
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": True,
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": s.token_budget,
    }


def _trainer_overrides(cell: Cell, s: VerlSettings) -> dict[str, Any]:
    """The reward (benchmark data_source -> verl's scorer, with an exact-pass ``acc``) and the
    trainer: steps, eval cadence, checkpoint resume, MLflow logging."""
    return {
        "reward.custom_reward_function.path": REWARD_PATH,
        "reward.custom_reward_function.name": REWARD_NAME,
        "trainer.nnodes": s.nnodes,
        "trainer.n_gpus_per_node": s.gpus_per_node,
        "trainer.total_training_steps": s.total_steps,
        "trainer.total_epochs": 1000,  # bounded by total_training_steps
        "trainer.val_before_train": True,
        "trainer.test_freq": s.eval_every,
        "trainer.save_freq": s.save_every,
        "trainer.resume_mode": "auto",
        "trainer.default_local_dir": cell_checkpoint_dir(cell, s),
        "trainer.max_actor_ckpt_to_keep": s.max_checkpoints_to_keep,
        "trainer.project_name": s.project_name,
        "trainer.experiment_name": cell.id,
        "trainer.logger": ["console", "mlflow"],
    }


def _mode_overrides(s: VerlSettings) -> dict[str, Any]:
    """What the settings' modes change: float32, the testbed's own prompt order, less
    validation, the CPU run, vLLM's sequence cap."""
    ov: dict[str, Any] = {}
    if s.dtype == "float32":
        ov.update(FLOAT32_OVERRIDES)
    if s.testbed:
        # the testbed's training prompts in its own order (one parquet per seed: testbed.py)
        ov["data.shuffle"] = False
    if s.verl_validation != "all":
        ov["trainer.val_before_train"] = False
    if s.verl_validation == "none":
        ov["trainer.test_freq"] = -1
    if s.cpu:
        from gppo.backends.verl.cpu import CPU_MODE

        ov.update(CPU_MODE.overrides)
    if s.rollout_max_num_seqs is not None:
        ov[f"{ROLLOUT}.max_num_seqs"] = s.rollout_max_num_seqs
    return ov


#: ``dtype: float32``: the actor computes in float32 (FSDP mixed precision off: verl's default
#: param dtype is bf16, which also sets its autocast dtype, ``transformer_impl.py`` ``_build_fsdp_module``)
#: and vLLM samples in float32.
FLOAT32_OVERRIDES: dict[str, Any] = {
    f"+{ACTOR}.fsdp_config.mixed_precision.param_dtype": "fp32",
    f"+{ACTOR}.fsdp_config.mixed_precision.reduce_dtype": "fp32",
    f"+{ACTOR}.fsdp_config.mixed_precision.buffer_dtype": "fp32",
    f"{ROLLOUT}.dtype": "float32",
}


_BARE = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./-]*$")
_RESERVED_WORDS = {"null", "true", "false", "nan", "inf", "none"}


def _escape_quoted(text: str) -> str:
    """Escape for a single-quoted Hydra string; ``${`` is escaped so it is never interpolated."""
    # Hydra: backslashes are literal except right before a quote or at the end of the string.
    text = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text)
    return text.replace("'", "\\'").replace("${", "\\${")


def render_value(value: object) -> str:
    """A Python value in Hydra's override grammar (strings always quoted unless plainly safe)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise OverrideError(f"non-finite value {value!r} in overrides")
        text = repr(value)
        return text if ("." in text or "e" in text) else f"{text}.0"
    if isinstance(value, str):
        if _BARE.match(value) and value.lower() not in _RESERVED_WORDS:
            return value
        return "'" + _escape_quoted(value) + "'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(render_value(v) for v in value) + "]"
    raise OverrideError(f"cannot render {value!r} as a Hydra override value")


def render(overrides: Mapping[str, object]) -> list[str]:
    """``{key: value}`` -> ``["key=value", ...]`` in Hydra's grammar."""
    return [f"{key}={render_value(value)}" for key, value in overrides.items()]


def cell_overrides(cell: Cell, settings: VerlSettings) -> list[str]:
    """The rendered overrides of one cell, with the spec's raw ``extra_overrides`` appended."""
    return [*render(build_overrides(cell, settings)), *settings.extra_overrides]
