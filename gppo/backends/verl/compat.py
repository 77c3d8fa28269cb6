"""What verl 0.9.1 needs to train a GPT-2 (``GPT2LMHeadModel``: the CPU testbed's base, exported),
and to build its engine next to TRL 1.16 (the ``trl`` backend's extra).

Work-arounds, each idempotent and harmless for every other model; the docstrings name the
upstream lines, so each can go when upstream changes.

**The actor's model class.** verl picks the Hugging Face auto class from the architecture's name
(``verl/utils/model.py:685`` ``_architecture_to_auto_class``, read by ``get_hf_auto_model_class``
at ``:714``): only names containing ``ForCausalLM`` get ``AutoModelForCausalLM``, anything else
``AutoModel``, which for GPT-2 is the headless ``GPT2Model``, and the actor's first forward fails
("'BaseModelOutputWithPastAndCrossAttentions' object has no attribute 'logits'",
``verl/workers/engine/fsdp/transformer_impl.py:1477``). :func:`causal_lm_for_lm_head_models` maps
``LMHeadModel`` names (GPT-2's, GPT-J's, ...) to ``AutoModelForCausalLM`` too; the verl plugin
applies it in every process that imports verl.

**The Hugging Face checkpoint.** verl's checkpoint manager picks the class it writes
``hf_model`` with by the same kind of name test (``verl/utils/checkpoint/fsdp_checkpoint_manager.py:431-442``)
and fails for ``GPT2LMHeadModel`` ("'GPT2Config' object is not subscriptable", raised while
formatting its own NotImplementedError). :func:`save_hf_model_of_lm_head_models` renames the live
config's architecture to one that contains ``ForCausalLM`` for the length of the save;
``save_pretrained`` then writes the model class's real name into ``config.json``.

**The rollout's weight sync.** verl patches every rollout model's weight loader for mixture-of-experts layers on each weight
sync (``verl/workers/rollout/vllm_rollout/utils.py``, ``monkey_patch_model`` and
``update_weights_from_ipc``, calling ``verl/utils/vllm/patch.py:77``
``patch_vllm_moe_model_weight_loader``), and that function raises "The provided model does not
have a valid 'model' or 'language_model' attribute" for any model that keeps its layers elsewhere:
vLLM's ``GPT2LMHeadModel`` keeps them in ``.transformer``. A model without either attribute has no
MoE layers for verl to patch, so :func:`tolerate_models_without_inner_model` makes the function
return for it and calls verl's own for every other model. Applied in vLLM's processes by the
``vllm.general_plugins`` hook (:func:`gppo.backends.verl.hooks.vllm_plugin`), on CPU and GPU alike,
before vLLM resolves verl's worker extension (``vllm/v1/worker/worker_base.py``, ``init_worker``).

**TRL without a value-head model.** Where TRL is installed, verl's ``apply_monkey_patch`` (every
engine build, ``verl/models/transformers/monkey_patch.py:352-360``) imports TRL's
``AutoModelForCausalLMWithValueHead`` (from ``trl.experimental.ppo``, else ``trl``) to patch its
``state_dict``; TRL 1.16 has it in neither place, so every actor build fails with an
ImportError. With no such class there is nothing to patch (and no value-head critic to build,
``verl/utils/model.py:654``): :func:`trl_only_with_a_value_head` makes verl's
``is_trl_available`` say whether TRL has the class.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

_ROLLOUT_UTILS = "verl.workers.rollout.vllm_rollout.utils"
_APPLIED = False


def causal_lm_for_lm_head_models() -> None:
    """``*LMHeadModel`` architectures load with ``AutoModelForCausalLM`` in verl's actor."""
    from transformers import AutoModelForCausalLM
    from verl.utils import model

    model._architecture_to_auto_class.setdefault("LMHeadModel", AutoModelForCausalLM)


def save_hf_model_of_lm_head_models() -> None:
    """verl's ``hf_model`` checkpoint of a ``*LMHeadModel`` (idempotent)."""
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    original = FSDPCheckpointManager.save_checkpoint
    if getattr(original, "_gppo_lm_head", False):
        return

    @functools.wraps(original)
    def save_checkpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
        model = getattr(self.model, "_fsdp_wrapped_module", self.model)
        config: Any = getattr(model, "config", None)
        archs = list(getattr(config, "architectures", None) or [])
        if not (archs and archs[0].endswith("LMHeadModel")):
            return original(self, *args, **kwargs)
        config.architectures = [f"{archs[0]}ForCausalLM", *archs[1:]]
        try:
            return original(self, *args, **kwargs)
        finally:
            config.architectures = archs

    save_checkpoint._gppo_lm_head = True  # type: ignore[attr-defined]  # our mark on the function
    FSDPCheckpointManager.save_checkpoint = save_checkpoint  # type: ignore[method-assign]  # the patch


def tolerate_models_without_inner_model() -> None:
    """Wrap verl's MoE weight-loader patch so that a model without ``.model`` or
    ``.language_model`` is left as it is (idempotent; a no-op where verl is not installed)."""
    global _APPLIED
    if _APPLIED:
        return
    try:
        from verl.utils.vllm import patch
    except ImportError:
        return
    original = patch.patch_vllm_moe_model_weight_loader

    @functools.wraps(original)
    def patch_vllm_moe_model_weight_loader(model: Any) -> Any:
        inner = getattr(model, "runnable", model)
        if getattr(inner, "model", None) is None and getattr(inner, "language_model", None) is None:
            return None  # no inner model, no MoE layers: nothing for verl to patch
        return original(model)

    patch.patch_vllm_moe_model_weight_loader = patch_vllm_moe_model_weight_loader
    utils: Any = sys.modules.get(_ROLLOUT_UTILS)  # imported before the hook ran: rebind it too
    if utils is not None:
        utils.patch_vllm_moe_model_weight_loader = patch_vllm_moe_model_weight_loader
    _APPLIED = True


_IMPORT_UTILS = "verl.utils.import_utils"
_MONKEY_PATCH = "verl.models.transformers.monkey_patch"


def trl_only_with_a_value_head() -> None:
    """verl sees TRL as installed only when TRL has ``AutoModelForCausalLMWithValueHead``
    (idempotent; checked on verl's first call, then cached as verl's own answer is)."""
    from verl.utils import import_utils

    original = import_utils.is_trl_available
    if getattr(original, "_gppo_value_head", False):
        return

    @functools.cache
    def is_trl_available() -> bool:
        if not original():
            return False
        import importlib.util

        try:
            if importlib.util.find_spec("trl.experimental.ppo") is not None:
                return True
        except ImportError:
            pass
        import trl

        return hasattr(trl, "AutoModelForCausalLMWithValueHead")

    is_trl_available._gppo_value_head = True  # type: ignore[attr-defined]  # our mark on it
    import_utils.is_trl_available = is_trl_available
    for name in (_MONKEY_PATCH, "verl.utils.model"):  # imported before: rebind their names too
        module: Any = sys.modules.get(name)
        if module is not None:
            module.is_trl_available = is_trl_available
