"""TRL's own clipped loss and our tv/mc (δ = ε, no dual clip) are the same loss: values and
gradients on the same batch, through each trainer's ``_compute_loss`` (the model's real forward).
TRL's token-level ``loss_type`` (``bnpo``) is our ``token-mean``; its per-sequence one (``grpo``)
our ``seq-mean-token-mean`` (as tests/objectives/test_obj_verl_equivalence.py does for verl)."""

from __future__ import annotations

import pytest
import torch

from .conftest import make_trainer

EPS = 0.2


def _inputs(trainer):
    """A batch of 16 rows: left-padded prompts, right-padded completions, advantages of both
    signs, π_old shifted from the current policy so that ratios fall both sides of the clip."""
    tok = trainer.processing_class
    g = torch.Generator().manual_seed(3)
    prompts = ["12+7=", "3+4=", "25+61=", "8+9="] * 4
    p = tok(prompts, return_tensors="pt", padding=True)
    comp = torch.randint(2, 20, (16, 5), generator=g)
    cmask = torch.ones(16, 5, dtype=torch.long)
    cmask[::3, 3:] = 0
    ids = torch.cat([p.input_ids, comp], 1)
    mask = torch.cat([p.attention_mask, cmask], 1)
    with torch.no_grad():
        logp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 5)
    old = logp + 0.3 * torch.randn(logp.shape, generator=g)
    adv = torch.randn(16, generator=g)
    return {
        "prompt_ids": p.input_ids,
        "prompt_mask": p.attention_mask,
        "completion_ids": comp,
        "completion_mask": cmask,
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": cmask.sum(),
    }


def _value_and_grads(trainer, inputs):
    trainer.model.zero_grad(set_to_none=True)
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = [p.grad.detach().clone() for p in trainer.model.parameters() if p.grad is not None]
    return loss.detach(), grads


@pytest.mark.slow
@pytest.mark.parametrize(
    ("loss_type", "agg"), [("bnpo", "token-mean"), ("grpo", "seq-mean-token-mean")]
)
def test_trls_clipped_loss_is_our_tv_mc(base_dir, tmp_path, loss_type, agg):
    from gppo.backends.cell_loss import make_loss
    from gppo.backends.trl.trainer import GppoGRPOTrainer

    stock, _ = make_trainer(base_dir, tmp_path / "stock", loss_type=loss_type, epsilon=EPS)
    params = {
        "divergence": "tv",
        "estimator": "mc",
        "delta": EPS,
        "dual_clip": None,
        "loss_agg_mode": agg,
    }
    loss_fn, mode = make_loss("gppo", params)
    ours, _ = make_trainer(
        base_dir, tmp_path / "ours", cls=GppoGRPOTrainer, loss_fn=loss_fn, loss_agg_mode=mode
    )
    inputs = _inputs(stock)
    v_trl, g_trl = _value_and_grads(stock, inputs)
    v_ours, g_ours = _value_and_grads(ours, inputs)
    ratio = torch.exp(
        stock._get_per_token_logps_and_entropies(
            stock.model,
            torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
            5,
        )[0].detach()
        - inputs["old_per_token_logps"]
    )
    assert (ratio > 1 + EPS).any() and (ratio < 1 - EPS).any()  # the clip is exercised
    torch.testing.assert_close(v_ours, v_trl, rtol=1e-5, atol=1e-7)
    assert len(g_ours) == len(g_trl) > 0
    for a, b in zip(g_ours, g_trl, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    assert abs(float(v_trl)) > 0  # a real loss, not a zero that would match anything


@pytest.mark.slow
def test_a_steps_metrics_are_reduced_over_its_updates_as_the_testbed_reduces_them(
    base_dir, tmp_path
):
    """Two updates of one step, the second further off-policy: the step's ``ratio_max`` is the
    larger of the two (as the testbed's), every other diagnostic their mean."""
    from gppo.backends.cell_loss import make_loss
    from gppo.backends.trl.trainer import GppoGRPOTrainer

    loss_fn, mode = make_loss("gppo", {"divergence": "tv", "estimator": "mc", "delta": EPS})
    seen: list[tuple[int, dict[str, float]]] = []
    trainer, _ = make_trainer(
        base_dir, tmp_path, cls=GppoGRPOTrainer, loss_fn=loss_fn, loss_agg_mode=mode,
        on_step=lambda step, values: seen.append((step, values)),
    )  # fmt: skip
    per_update = []
    for shift in (0.1, 1.0):
        inputs = _inputs(trainer)
        inputs["old_per_token_logps"] = inputs["old_per_token_logps"] * shift
        _value_and_grads(trainer, inputs)
        per_update.append({k: v[-1] for k, v in trainer._acc.items()})
    trainer.step_done(7)
    (step, values), = seen  # fmt: skip
    assert step == 7
    maxes = [u["ratio_max"] for u in per_update]
    assert maxes[0] != maxes[1]
    assert values["ratio_max"] == max(maxes)
    kls = [u["approx_kl"] for u in per_update]
    assert values["approx_kl"] == pytest.approx(sum(kls) / 2)
    assert trainer._acc == {}  # the next step starts anew
