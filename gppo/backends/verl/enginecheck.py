"""One training step of verl's FSDP engine with verl's ``ppo_loss`` and our loss.

What verl's actor worker does for one mini-batch, with verl's own objects: the batch from
:mod:`.synthetic` (verl's no-padding layout), ``engine.train_mode()``, ``optimizer_zero_grad``,
``forward_backward_batch(data, loss_function=partial(ppo_loss, actor_config))`` (which sets
``batch_num_tokens``/``dp_size`` and splits micro-batches with ``prepare_micro_batches``), then
``optimizer_step``; the metrics are reduced as the worker reduces them
(:func:`.synthetic.aggregate_metrics`, plus ``allgather_dict_into_dict`` over the DP group).

Old log-probs are the model's own (one forward-only pass, as verl's ``compute_log_prob``) plus a
little noise, so ratios sit near 1 and some tokens clip: with random old log-probs a tiny random
model puts every token outside the region and every gradient is zero.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gppo.backends.verl import synthetic as sy

Tensor = torch.Tensor


@dataclass
class StepResult:
    """What one engine step gave: the summed micro-batch loss, the gradient of every parameter
    (name -> full float32 tensor, before the optimiser step), the reduced metrics (verl's names),
    the number of micro-batches, and the largest parameter change made by ``optimizer_step``
    (None when the step was not taken)."""

    loss: float
    grads: dict[str, Tensor]
    metrics: dict[str, float]
    n_micro: int
    max_param_change: float | None


def _device() -> str:
    from verl.utils.device import get_device_name

    return get_device_name()


def _full(t: Tensor) -> Tensor:
    """A (possibly FSDP2-sharded DTensor) tensor as one float32 CPU tensor."""
    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    return full.detach().float().cpu().clone()


def params(engine: Any) -> dict[str, Tensor]:
    return {n: _full(p) for n, p in engine.module.named_parameters()}


def _set_split(data: Any, micro_batch_size: int | None, max_token_len: int | None) -> None:
    from verl.utils import tensordict_utils as tu

    tu.assign_non_tensor(data, use_remove_padding=True, calculate_entropy=False)
    if max_token_len is not None:
        tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=max_token_len)
    else:
        tu.assign_non_tensor(
            data, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro_batch_size or len(data)
        )


def model_log_probs(engine: Any, data: Any) -> Tensor:
    """The engine's log pi of every response token, padded (B, R) float32 (forward only)."""
    from verl.workers.utils.padding import no_padding_2_padding

    _set_split(data, len(data), None)
    with engine.eval_mode(), torch.no_grad():
        out = engine.forward_backward_batch(data, loss_function=None, forward_only=True)
    nested = out["model_output"]["log_probs"]
    return no_padding_2_padding(nested.cpu(), data).float()


def engine_batch(
    engine: Any,
    *,
    batch_size: int = 8,
    response_len: int = 12,
    prompt_len: int = 6,
    vocab_size: int = 64,
    seed: int = 0,
    spread: float = 0.05,
) -> Any:
    """A no-padding actor batch whose old log-probs are the engine's log pi plus N(0, spread²)."""
    tokens = sy.synthetic_tokens(batch_size, response_len, seed=seed)
    data = sy.synthetic_batch(tokens, prompt_len=prompt_len, vocab_size=vocab_size, seed=seed)
    current = model_log_probs(engine, data.clone())
    g = torch.Generator().manual_seed(seed + 7)
    mask = data["response_mask"].float()
    old = (current + spread * torch.randn(current.shape, generator=g)) * mask
    data["old_log_probs"] = old
    return data


def engine_step(
    engine: Any,
    data: Any,
    actor_config: Any,
    *,
    micro_batch_size: int | None = None,
    max_token_len: int | None = None,
    take_step: bool = True,
    loss: Any = None,
) -> StepResult:
    """One mini-batch: zero grads, ``forward_backward_batch`` with verl's ``ppo_loss``, the
    gradients, then (``take_step``) ``optimizer_step``. ``micro_batch_size`` (fixed split) or
    ``max_token_len`` (dynamic batch size); neither = the whole batch at once. ``loss`` replaces
    ``ppo_loss`` (same signature), e.g. to record what reaches it."""
    from verl.utils.torch_functional import allgather_dict_into_dict
    from verl.workers.utils.losses import ppo_loss

    data = data.clone()
    _set_split(data, micro_batch_size, max_token_len)
    loss_fn = functools.partial(loss or ppo_loss, actor_config)
    before = params(engine) if take_step else None
    with engine.train_mode():
        engine.optimizer_zero_grad()
        out = engine.forward_backward_batch(data, loss_function=loss_fn)
        grads = {
            n: _full(p.grad) if p.grad is not None else torch.zeros_like(_full(p))
            for n, p in engine.module.named_parameters()
        }
        change = None
        if take_step:
            engine.optimizer_step()
            after = params(engine)
            assert before is not None
            change = max(float((after[n] - before[n]).abs().max()) for n in after)
    gathered = allgather_dict_into_dict(out["metrics"], group=engine.get_data_parallel_group())
    return StepResult(
        loss=float(sum(out["loss"])),
        grads=grads,
        metrics=sy.reduce_gathered(gathered),
        n_micro=len(out["loss"]),
        max_param_change=change,
    )


def build_engine_for_tests(model_dir: Path, param_dtype: str) -> Any:
    """:func:`.engine.build_engine` with the defaults the checks use."""
    from gppo.backends.verl.engine import build_engine

    return build_engine(model_dir, param_dtype=param_dtype)


def relative_grad_error(a: dict[str, Tensor], b: dict[str, Tensor]) -> float:
    """max over parameters of |a - b| / max(|b|), the micro- vs whole-batch comparison."""
    worst = 0.0
    for name, gb in b.items():
        scale = float(gb.abs().max())
        if scale > 0:
            worst = max(worst, float((a[name] - gb).abs().max()) / scale)
    return worst


def grad_abs_sum(grads: dict[str, Tensor]) -> float:
    return sum(float(g.abs().sum()) for g in grads.values())
