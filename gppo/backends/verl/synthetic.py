"""Synthetic RL batches laid out exactly as verl 0.9's trainer hands them to its workers.

verl's ``RayPPOTrainer._update_actor`` turns the rollout into a left/right padded ``TensorDict``
(``prompts`` left-padded (B, P), ``responses`` right-padded (B, R), ``input_ids`` (B, P + R),
``attention_mask``, ``position_ids``, ``response_mask``, ``old_log_probs``, ``advantages`` (B, R),
optional ``rollout_is_weights`` (B, R), ``temperature``), converts it with verl's own
``left_right_2_no_padding`` (nested, no-padding ``input_ids``/``position_ids``, ``loss_mask``),
and adds ``global_batch_size`` (the mini-batch size in sequences) as non-tensor data. The engine
then sets ``batch_num_tokens`` and ``dp_size`` and calls ``ppo_loss(config, model_output, data)``
per micro-batch, where ``model_output["log_probs"]`` is a nested (B, j) tensor over the *whole*
sequence (prompt and response), shifted by one token.

:func:`synthetic_batch` builds that batch with verl's utilities; :func:`nested_log_probs` builds
the model output a log pi (B, R) stands for; :func:`call_ppo_loss` runs verl's own ``ppo_loss``;
:func:`aggregate_metrics` reduces the per-micro-batch metrics the way verl's engine and worker do
(``append_to_dict`` -> ``Metric.aggregate_dp`` -> ``reduce_metrics``). Nothing here is a stand-in
for verl: every layout step is verl's function. verl is imported lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

Tensor = torch.Tensor


@dataclass(frozen=True)
class SyntheticTokens:
    """The padded (B, R) view of a synthetic batch (what gppo.objectives takes).

    ``old_log_prob``, ``log_prob``, ``advantages``, ``response_mask`` (float 0/1) and
    ``rollout_is_weights`` (or None) are float32 (B, R); ``log_prob`` is a plain tensor (not a
    leaf of the nested model output).
    """

    old_log_prob: Tensor
    log_prob: Tensor
    advantages: Tensor
    response_mask: Tensor
    rollout_is_weights: Tensor | None


def synthetic_tokens(
    batch_size: int = 6,
    response_len: int = 10,
    *,
    seed: int = 0,
    spread: float = 0.05,
    is_weights: bool = False,
) -> SyntheticTokens:
    """Response-side tensors with ratios near 1 (|log pi - log mu| ~ ``spread``), varied mu,
    responses of different lengths and a few masked tokens inside responses (tool output)."""
    g = torch.Generator().manual_seed(seed)
    b, r = batch_size, response_len
    u = torch.rand(b, r, generator=g)
    old = torch.where(
        u < 0.4, -0.05 * torch.rand(b, r, generator=g), -5 * torch.rand(b, r, generator=g)
    )
    new = (old + spread * torch.randn(b, r, generator=g)).clamp(max=0.0)
    adv = torch.randn(b, 1, generator=g).expand(b, r).clone()
    lengths = torch.randint(max(1, r // 3), r + 1, (b,), generator=g)
    mask = (torch.arange(r)[None, :] < lengths[:, None]).float()
    if r > 4:
        mask[1, 2:4] = 0.0  # tokens inside a response that carry no loss (e.g. tool output)
    weights = (0.5 + torch.rand(b, r, generator=g)) if is_weights else None
    old, new, adv = old * mask, new * mask, adv * mask  # verl pads with zeros
    return SyntheticTokens(old, new, adv, mask, None if weights is None else weights * mask)


def _response_lengths(mask: Tensor) -> Tensor:
    """Length of each right-padded response: index of its last 1 + 1 (masked tokens inside count)."""
    idx = torch.arange(mask.shape[1]).expand_as(mask)
    return torch.where(mask > 0, idx + 1, 0).amax(dim=1).clamp(min=1)


def synthetic_batch(
    tokens: SyntheticTokens,
    *,
    prompt_len: int = 5,
    vocab_size: int = 64,
    seed: int = 0,
    global_batch_size: int | None = None,
    temperature: float = 1.0,
) -> Any:
    """verl's no-padding actor batch (a ``TensorDict``) for ``tokens``, via verl's own
    ``left_right_2_no_padding``. Prompts are left-padded to ``prompt_len`` (at least 1 token
    each); ``global_batch_size`` defaults to B (one mini-batch, one data-parallel rank)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    g = torch.Generator().manual_seed(seed + 1)
    b, r = tokens.response_mask.shape
    resp_len = _response_lengths(tokens.response_mask)
    prompt_lens = torch.randint(1, prompt_len + 1, (b,), generator=g)
    prompt_mask = (torch.arange(prompt_len)[None, :] >= prompt_len - prompt_lens[:, None]).long()
    resp_attn = (torch.arange(r)[None, :] < resp_len[:, None]).long()
    prompts = torch.randint(1, vocab_size, (b, prompt_len), generator=g) * prompt_mask
    responses = torch.randint(1, vocab_size, (b, r), generator=g) * resp_attn
    attention_mask = torch.cat([prompt_mask, resp_attn], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0) * attention_mask
    fields: dict[str, Any] = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": tokens.response_mask * resp_attn,
        "old_log_probs": tokens.old_log_prob,
        "advantages": tokens.advantages,
        "temperature": torch.full((b,), float(temperature)),
    }
    if tokens.rollout_is_weights is not None:
        fields["rollout_is_weights"] = tokens.rollout_is_weights
    data = tu.get_tensordict(fields)
    data = left_right_2_no_padding(data)
    tu.assign_non_tensor(
        data, global_batch_size=b if global_batch_size is None else global_batch_size
    )
    return data


def nested_log_probs(log_prob: Tensor, data: Any) -> Tensor:
    """The flat (total_nnz,) model-output values whose response slice is ``log_prob`` (B, R).

    The inverse of verl's ``no_padding_2_padding``: position ``offset_i - len_i - 1 + t`` of
    sequence i holds response token t's log-prob (the model predicts token t from the one
    before); prompt positions hold 0. Differentiable in ``log_prob``.
    """
    offsets = data["input_ids"].offsets()
    resp_len = _response_lengths(data["response_mask"].float())
    index, rows, cols = [], [], []
    for i in range(log_prob.shape[0]):
        n = int(resp_len[i])
        end = int(offsets[i + 1]) - 1
        index.append(torch.arange(end - n, end))
        rows.append(torch.full((n,), i))
        cols.append(torch.arange(n))
    idx = torch.cat(index)
    flat = torch.zeros(int(offsets[-1]), dtype=log_prob.dtype)
    return flat.index_put((idx,), log_prob[torch.cat(rows), torch.cat(cols)])


def as_model_output(values: Tensor, data: Any) -> dict[str, Tensor]:
    """``{"log_probs": nested (B, j)}`` as the engine's ``prepare_model_outputs`` returns it."""
    return {
        "log_probs": torch.nested.nested_tensor_from_jagged(
            values, offsets=data["input_ids"].offsets()
        )
    }


def set_engine_batch_info(data: Any, *, dp_size: int = 1, other_ranks_tokens: int = 0) -> None:
    """What ``FSDPEngine.forward_backward_batch`` sets before the micro-batches: ``batch_num_tokens``
    (the ``loss_mask`` sum all-reduced over the DP group; ``other_ranks_tokens`` stands for the
    other ranks' share) and ``dp_size``."""
    from verl.utils import tensordict_utils as tu

    n = int(data["loss_mask"].sum()) + other_ranks_tokens
    tu.assign_non_tensor(data, batch_num_tokens=n, dp_size=dp_size)


def call_ppo_loss(
    actor_config: Any, model_output: dict[str, Tensor], data: Any
) -> tuple[Tensor, dict]:
    """verl's own worker loss, ``verl.workers.utils.losses.ppo_loss`` (loss, {name: Metric})."""
    from verl.workers.utils.losses import ppo_loss

    return ppo_loss(actor_config, model_output, data)


def micro_batches(
    data: Any, micro_batch_size: int | None = None, max_token_len: int | None = None
) -> list:
    """verl's ``prepare_micro_batches`` split (fixed size, or dynamic by token budget)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.utils import prepare_micro_batches

    if max_token_len is not None:
        tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=max_token_len)
    else:
        tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro_batch_size)
    batches, _ = prepare_micro_batches(data, dp_group=None, same_micro_num_in_dp=False)
    return list(batches)


def aggregate_metrics(per_micro_batch: list[dict[str, Any]]) -> dict[str, float]:
    """The values verl logs for one mini-batch on one DP rank: per-micro-batch ``{name: Metric |
    value}`` merged by verl's ``append_to_dict`` (the engine's ``postprocess_batch_func``), then
    :func:`reduce_gathered` of ``{name: [merged]}`` (what ``allgather_dict_into_dict`` gives at
    world size 1)."""
    from verl.utils.py_functional import append_to_dict

    merged: dict[str, Any] = {}
    for metrics in per_micro_batch:
        append_to_dict(merged, metrics)
    return reduce_gathered({key: [val] for key, val in merged.items()})


def reduce_gathered(gathered: dict[str, list[Any]]) -> dict[str, float]:
    """verl's worker and trainer reduction of DP-gathered metrics (``{name: [per rank]}``):
    ``Metric.aggregate_dp`` or a flattened list (``TrainingWorker.train_mini_batch``), then
    ``reduce_metrics`` (the trainer)."""
    from itertools import chain

    from verl.utils.metric import Metric, reduce_metrics

    out: dict[str, Any] = {}
    for key, val in gathered.items():
        if isinstance(val[0], Metric):
            out[key] = [Metric.aggregate_dp(val)]
        else:
            out[key] = list(chain.from_iterable(val))
    return {k: float(v) for k, v in reduce_metrics(out).items()}
