"""The `gppo` loss as verl's workers see it: resolved through verl's get_policy_loss_fn, called
with a real verl actor config built from a cell's overrides, equals gppo.objectives directly
(values and gradients), including verl's data-parallel scaling and rollout IS weights."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from gppo.backends.verl.overrides import cell_overrides
from gppo.backends.verl.settings import VerlSettings
from gppo.backends.verl.validate import compose, validate
from gppo.objectives import agg_loss, gppo_policy_loss, gppo_token_loss


def _batch(seed: int, b: int = 6, t: int = 9):
    g = torch.Generator().manual_seed(seed)
    mu = torch.rand(b, t, generator=g).clamp(1e-4, 0.999)
    old = mu.log()
    new = (old + 0.6 * torch.randn(b, t, generator=g)).clamp(max=0.0)
    adv = torch.randn(b, 1, generator=g).expand(b, t).clone()
    mask = torch.ones(b, t, dtype=torch.bool)
    for i in range(b):
        mask[i, 3 + (i % 5) :] = False
    mask[-1] = False  # an empty sequence, as verl can get
    weights = torch.rand(b, t, generator=g) * 2
    return old, new, adv, mask, weights


def _verl_call(actor, old, new, adv, mask, weights=None):
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    log_prob = new.clone().requires_grad_(True)
    fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
    loss, metrics = fn(
        old_log_prob=old,
        log_prob=log_prob,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=actor.loss_agg_mode,
        config=actor,
        rollout_is_weights=weights,
    )
    loss.backward()
    return loss.detach(), log_prob.grad, metrics


def _ours(cell, old, new, adv, mask, agg, info):
    p = cell.loss_params
    log_prob = new.clone().requires_grad_(True)
    loss, metrics = gppo_policy_loss(
        old,
        log_prob,
        adv,
        mask,
        divergence=p["divergence"],
        estimator=p["estimator"],
        delta=p["delta"],
        ratio_bounds=None if p["ratio_bounds"] is None else tuple(p["ratio_bounds"]),
        dual_clip=p["dual_clip"],
        loss_agg_mode=agg,
        global_batch_info=info,
    )
    loss.backward()
    return loss.detach(), log_prob.grad, metrics


def _set_batch_info(actor, info):
    """What verl's ppo_loss does before calling the policy loss (workers/utils/losses.py)."""
    actor.global_batch_info.clear()
    actor.global_batch_info.update(info)


@pytest.mark.slow  # 12 Hydra compositions, about 15 s
def test_gppo_loss_through_verl_equals_objectives(all_paper_cells, composed):
    grid = [c for c in all_paper_cells["paper-math"] if c.method == "gppo"]
    assert len(grid) == 12
    for i, cell in enumerate(grid):
        actor = composed["paper-math", cell.id][3]["actor"]
        old, new, adv, mask, _ = _batch(i)
        n_tok = int(mask.sum())
        for info in (
            {"dp_size": 1, "batch_num_tokens": None, "global_batch_size": None},
            {"dp_size": 4, "batch_num_tokens": 3 * n_tok, "global_batch_size": 20},
        ):
            _set_batch_info(actor, {**info, "loss_scale_factor": actor.loss_scale_factor})
            v_loss, v_grad, v_metrics = _verl_call(actor, old, new, adv, mask)
            o_loss, o_grad, o_metrics = _ours(
                cell, old, new, adv, mask, "token-mean", dict(actor.global_batch_info)
            )
            torch.testing.assert_close(v_loss, o_loss, rtol=0, atol=0)
            torch.testing.assert_close(v_grad, o_grad, rtol=0, atol=0)
            assert v_metrics == {f"actor/{k}": v for k, v in o_metrics.items()}
        assert torch.count_nonzero(v_grad) > 0


def test_rollout_is_weights_and_other_cell_settings(all_paper_cells):
    base = next(c for c in all_paper_cells["paper-math"] if c.id == "kl-binary-s0")
    params = {**base.loss_params, "ratio_bounds": None, "dual_clip": None, "delta": 0.1}
    params["loss_agg_mode"] = "seq-mean-token-sum-norm"
    cell = replace(base, loss_params=params)
    actor = validate(compose(cell_overrides(cell, VerlSettings.model_validate(cell.settings))))[
        "actor"
    ]
    assert actor.policy_loss.ratio_bound_low is None and actor.policy_loss.dual_clip is None
    assert actor.loss_agg_mode == "seq-mean-token-sum-norm"
    old, new, adv, mask, weights = _batch(7)
    info = {
        "dp_size": 2,
        "batch_num_tokens": 40,
        "global_batch_size": 11,
        "loss_scale_factor": None,
    }
    _set_batch_info(actor, info)
    v_loss, v_grad, _ = _verl_call(actor, old, new, adv, mask, weights)
    log_prob = new.clone().requires_grad_(True)
    mat, _ = gppo_token_loss(
        old,
        log_prob,
        adv,
        mask,
        divergence="kl",
        estimator="binary",
        delta=0.1,
        ratio_bounds=None,
        dual_clip=None,
    )
    want = agg_loss(mat * weights, mask, "seq-mean-token-sum-norm", **info)
    want.backward()
    torch.testing.assert_close(v_loss, want.detach(), rtol=0, atol=0)
    torch.testing.assert_close(v_grad, log_prob.grad, rtol=0, atol=0)


@pytest.mark.slow
def test_entry_point_and_env_var_register_the_loss():
    from importlib.metadata import entry_points

    eps = {ep.name: ep for ep in entry_points(group="verl.plugins")}
    assert eps["gppo"].value == "gppo.backends.verl.plugin"
    assert hasattr(eps["gppo"].load(), "GPPOPolicyLossConfig")
    # a fresh worker-like process, entry points off: VERL_USE_EXTERNAL_MODULES alone suffices
    env = {
        **os.environ,
        "VERL_USE_EXTERNAL_PLUGINS": "none",
        "VERL_USE_EXTERNAL_MODULES": "gppo.backends.verl.plugin",
    }
    code = (
        "import sys, verl\n"
        "from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY\n"
        "assert 'gppo' in POLICY_LOSS_REGISTRY, sorted(POLICY_LOSS_REGISTRY)\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_plugin_config_refuses_bad_fields():
    from gppo.backends.verl.plugin import GPPOPolicyLossConfig

    with pytest.raises(
        ValueError, match=r"^policy_loss.divergence: unknown divergence 'kll'; known: tv,"
    ):
        GPPOPolicyLossConfig(divergence="kll")
    with pytest.raises(ValueError, match="dual_clip must be None or a number > 1"):
        GPPOPolicyLossConfig(dual_clip=0.5)
    with pytest.raises(
        ValueError, match=r"^policy_loss.estimator: unknown estimator 'exact'; known: mc,"
    ):
        GPPOPolicyLossConfig(estimator="exact")
