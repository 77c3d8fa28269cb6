"""verl's FSDP training engine, for real, on CPU: ``FSDPEngineWithLMHead`` on a tiny
random Qwen2 (built from a transformers config), one gloo rank, verl's ``ppo_loss`` with loss
mode ``gppo``. A step moves the parameters; micro-batching (fixed and dynamic batch size) gives
the whole-batch gradient; the engine's loss is gppo.objectives' loss on the engine's own
log-probs; the metrics verl reduces include our clip diagnostics; under the engine's bf16
autocast the log-probs reach the loss in bf16 and the loss is float32."""

from __future__ import annotations

import functools

import pytest
import torch

from gppo.backends.verl import enginecheck as ec
from gppo.backends.verl.metrics_map import DIAGNOSTIC_KEYS
from gppo.objectives import gppo_policy_loss


def _actor(math_actors, cell_id):
    return math_actors[cell_id]


@pytest.fixture(scope="session")
def fp32_engine(process_group, tiny_model_dir):
    return ec.build_engine_for_tests(tiny_model_dir, "fp32")


@pytest.fixture(scope="session")
def bf16_engine(process_group, tiny_model_dir):
    return ec.build_engine_for_tests(tiny_model_dir, "bf16")


@pytest.mark.parametrize("cell_id", ["kl-binary-s0", "tv-mc-s0"])
def test_micro_batched_step_equals_whole_batch(fp32_engine, math_actors, cell_id):
    cell, actor = _actor(math_actors, cell_id)
    data = ec.engine_batch(fp32_engine, seed=1, spread=1.0)
    whole = ec.engine_step(fp32_engine, data, actor, take_step=False)
    assert whole.n_micro == 1 and ec.grad_abs_sum(whole.grads) > 0
    # the engine's loss is our loss on the engine's own log-probs (float32 end to end)
    tokens = data.select("old_log_probs", "advantages", "response_mask").to_padded_tensor()
    log_pi = ec.model_log_probs(fp32_engine, data.clone())
    p = cell.loss_params
    ours, metrics = gppo_policy_loss(
        tokens["old_log_probs"],
        log_pi,
        tokens["advantages"],
        tokens["response_mask"].float(),
        divergence=p["divergence"],
        estimator=p["estimator"],
        delta=p["delta"],
        ratio_bounds=tuple(p["ratio_bounds"]),
        dual_clip=p["dual_clip"],
    )
    assert whole.loss == pytest.approx(float(ours), abs=1e-6)
    assert metrics["clip_frac_low"] + metrics["clip_frac_high"] > 0  # the batch clips
    for split in ({"micro_batch_size": 2}, {"max_token_len": 48}):
        part = ec.engine_step(fp32_engine, data, actor, take_step=False, **split)
        assert part.n_micro > 1, split
        assert part.loss == pytest.approx(whole.loss, abs=1e-6), split
        assert ec.relative_grad_error(part.grads, whole.grads) < 1e-5, split
        for key in DIAGNOSTIC_KEYS:  # reduced by verl: the mean over micro-batches
            assert f"actor/{key}" in part.metrics, key
        assert part.metrics["actor/pg_loss"] == pytest.approx(whole.loss, abs=1e-6)
    assert whole.metrics["actor/clip_frac_low"] == pytest.approx(metrics["clip_frac_low"])
    assert whole.metrics["actor/clip_frac_high"] == pytest.approx(metrics["clip_frac_high"])


def test_bf16_step_moves_parameters_with_a_float32_loss(bf16_engine, math_actors):
    from verl.workers.utils.losses import ppo_loss

    _, actor = _actor(math_actors, "kl-binary-s0")
    seen = []

    def recording_loss(config, model_output, data, dp_group=None):
        loss, metrics = ppo_loss(config, model_output, data, dp_group)
        seen.append((model_output["log_probs"].dtype, loss.dtype))
        return loss, metrics

    data = ec.engine_batch(bf16_engine, seed=2, spread=1.0)
    whole = ec.engine_step(bf16_engine, data, actor, take_step=False)
    step = ec.engine_step(
        bf16_engine, data, actor, micro_batch_size=2, loss=functools.partial(recording_loss)
    )
    assert seen and all(s == (torch.bfloat16, torch.float32) for s in seen), seen
    assert step.n_micro == 4 and step.max_param_change is not None and step.max_param_change > 0
    # bf16 autocast: the micro-batched gradient equals the whole batch's to bf16 precision
    assert ec.relative_grad_error(step.grads, whole.grads) < 5e-2
    assert step.metrics["actor/clip_frac_low"] + step.metrics["actor/clip_frac_high"] > 0
    after = ec.engine_step(bf16_engine, data, actor, take_step=False)
    assert after.loss != whole.loss  # the parameters moved
