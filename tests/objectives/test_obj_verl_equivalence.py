"""Equivalence with verl 0.9.1's own policy losses (float64, values and gradients <= 1e-6).

verl's real functions are called with its real ActorConfig / PolicyLossConfig dataclasses.
"""

from __future__ import annotations

import math

import pytest
import torch
from objectives_helpers import AGG_MODES, make_batch
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import ActorConfig, PolicyLossConfig

from gppo.objectives import calibrate_delta, gppo_policy_loss
from gppo.objectives.baselines import (
    cispo_loss,
    clip_cov_loss,
    gspo_loss,
    sapo_loss,
)
from gppo.objectives.methods import get_method

TOL = {"rtol": 1e-6, "atol": 1e-9}


def _cfg(**kw: object) -> ActorConfig:
    policy_loss = kw.pop("policy_loss", None) or PolicyLossConfig()
    base = {"strategy": "fsdp", "rollout_n": 1, "ppo_micro_batch_size_per_gpu": 1}
    return ActorConfig(**base, policy_loss=policy_loss, **kw)  # type: ignore[arg-type]


def _value_grad(fn, new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
    lp = new.clone().requires_grad_(True)
    loss, metrics = fn(lp)
    loss.backward()
    return loss.detach(), lp.grad, metrics


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("c", [3.0, 10.0])
def test_tv_mc_is_vanilla(mode: str, c: float) -> None:
    """tv/mc at delta = eps is verl's vanilla PPO with dual clip c (clip_ratio_c)."""
    old, new, adv, mask = make_batch(b=8, t=64, seed=11, spread=0.5)
    eps = 0.2
    cfg = _cfg(clip_ratio=eps, clip_ratio_low=eps, clip_ratio_high=eps, clip_ratio_c=c)
    v, vg, vm = _value_grad(
        lambda lp: get_policy_loss_fn("vanilla")(old, lp, adv, mask, mode, cfg), new
    )
    # MC regions at the calibrated delta lie inside [0.5, 10], so ratio_bounds change nothing.
    for rb in (None, (0.5, 10.0)):
        o, og, om = _value_grad(
            lambda lp, rb=rb: gppo_policy_loss(
                old,
                lp,
                adv,
                mask,
                divergence="tv",
                estimator="mc",
                delta=eps,
                ratio_bounds=rb,
                dual_clip=c,
                loss_agg_mode=mode,
            ),
            new,
        )
        torch.testing.assert_close(o, v, **TOL)
        torch.testing.assert_close(og, vg, **TOL)
        # diagnostics: verl's pg_clipfrac = our low + high, pg_clipfrac_lower = dual_clip_frac
        assert om["clip_frac_low"] + om["clip_frac_high"] == pytest.approx(
            vm["actor/pg_clipfrac"], rel=1e-6
        )
        assert om["dual_clip_frac"] == pytest.approx(
            vm["actor/pg_clipfrac_lower"], rel=1e-6, abs=1e-12
        )
        assert om["approx_kl"] == pytest.approx(vm["actor/ppo_kl"], rel=1e-6)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_kl_mc_is_vanilla_with_asymmetric_clip(mode: str) -> None:
    """kl/mc is [e^-delta, e^delta]: vanilla with clip_ratio_low = 1 - e^-delta, high = e^delta - 1."""
    old, new, adv, mask = make_batch(b=8, t=64, seed=12, spread=0.5)
    d = calibrate_delta("kl")
    cfg = _cfg(
        clip_ratio=0.2,
        clip_ratio_low=1 - math.exp(-d),
        clip_ratio_high=math.exp(d) - 1,
        clip_ratio_c=10.0,
    )
    v, vg, _ = _value_grad(
        lambda lp: get_policy_loss_fn("vanilla")(old, lp, adv, mask, mode, cfg), new
    )
    o, og, _ = _value_grad(
        lambda lp: gppo_policy_loss(
            old, lp, adv, mask, divergence="kl", estimator="mc", loss_agg_mode=mode
        ),
        new,
    )
    torch.testing.assert_close(o, v, **TOL)
    torch.testing.assert_close(og, vg, **TOL)
    # the alias
    a, ag, _ = _value_grad(
        lambda lp: get_method("dapo").loss(old, lp, adv, mask, loss_agg_mode=mode), new
    )
    torch.testing.assert_close(a, v, **TOL)
    torch.testing.assert_close(ag, vg, **TOL)


def _dppo_batch(seed: int) -> tuple[torch.Tensor, ...]:
    # pi < 0.99 and mu < 0.99 so verl's 1e-8 in log((1 - mu + 1e-8)/(1 - pi + 1e-8)) is negligible
    old, new, adv, mask = make_batch(b=8, t=96, seed=seed, spread=0.6)
    return old.clamp(max=math.log(0.99)), new.clamp(max=math.log(0.99)), adv, mask


@pytest.mark.parametrize("mode", AGG_MODES)
def test_tv_binary_gradient_is_dppo_tv(mode: str) -> None:
    """tv/binary at delta = 2 tau has verl's dppo_tv gradient.

    By design the values differ: verl's dppo loss is the surrogate -A sg(r) log pi masked
    (its gradient is -A r on valid tokens), ours is the clipped objective -A clip(r). The
    gradients agree once verl's truncation (clip_ratio_c) is out of reach and our
    ratio_bounds / dual clip are off (DPPO has neither).
    """
    old, new, adv, mask = _dppo_batch(13)
    tau = 0.1
    cfg = _cfg(clip_ratio=tau, clip_ratio_low=tau, clip_ratio_high=tau, clip_ratio_c=1e9)
    _, vg, _ = _value_grad(
        lambda lp: get_policy_loss_fn("dppo_tv")(old, lp, adv, mask, mode, cfg), new
    )
    _, og, om = _value_grad(
        lambda lp: gppo_policy_loss(
            old,
            lp,
            adv,
            mask,
            divergence="tv",
            estimator="binary",
            delta=2 * tau,
            ratio_bounds=None,
            dual_clip=None,
            loss_agg_mode=mode,
        ),
        new,
    )
    torch.testing.assert_close(og, vg, **TOL)
    assert om["clip_frac_low"] + om["clip_frac_high"] > 0.01  # the test exercises clipping
    _, ag, _ = _value_grad(
        lambda lp: get_method("dppo").loss(
            old, lp, adv, mask, loss_agg_mode=mode, tau=tau, ratio_bounds=None, dual_clip=None
        ),
        new,
    )
    torch.testing.assert_close(ag, vg, **TOL)


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("tau", [0.05, 0.2])
def test_kl_binary_gradient_is_dppo_kl(mode: str, tau: float) -> None:
    """kl/binary at delta = tau has verl's dppo_kl gradient (values differ by design, as above)."""
    old, new, adv, mask = _dppo_batch(14)
    cfg = _cfg(clip_ratio=tau, clip_ratio_low=tau, clip_ratio_high=tau, clip_ratio_c=1e9)
    _, vg, _ = _value_grad(
        lambda lp: get_policy_loss_fn("dppo_kl")(old, lp, adv, mask, mode, cfg), new
    )
    _, og, om = _value_grad(
        lambda lp: gppo_policy_loss(
            old,
            lp,
            adv,
            mask,
            divergence="kl",
            estimator="binary",
            delta=tau,
            ratio_bounds=None,
            dual_clip=None,
            loss_agg_mode=mode,
        ),
        new,
    )
    torch.testing.assert_close(og, vg, **TOL)
    assert om["clip_frac_low"] + om["clip_frac_high"] > 0.01


@pytest.mark.parametrize("mode", AGG_MODES)
def test_gspo(mode: str) -> None:
    old, new, adv, mask = make_batch(b=8, t=64, seed=15, spread=0.02)
    cfg = _cfg(clip_ratio=0.2, clip_ratio_low=3e-4, clip_ratio_high=4e-4)
    v, vg, _ = _value_grad(
        lambda lp: get_policy_loss_fn("gspo")(old, lp, adv, mask, mode, cfg), new
    )
    o, og, _ = _value_grad(lambda lp: gspo_loss(old, lp, adv, mask, loss_agg_mode=mode), new)
    torch.testing.assert_close(o, v, **TOL)
    torch.testing.assert_close(og, vg, **TOL)
    m, mg, _ = _value_grad(
        lambda lp: get_method("gspo").loss(old, lp, adv, mask, loss_agg_mode=mode), new
    )
    torch.testing.assert_close(m, v, **TOL)
    torch.testing.assert_close(mg, vg, **TOL)


def test_gmpo_is_geo_mean() -> None:
    old, new, adv, mask = make_batch(b=8, t=64, seed=16, spread=0.5)
    cfg = _cfg(clip_ratio=0.4, clip_ratio_low=0.4, clip_ratio_high=0.4)
    v, vg, vm = _value_grad(
        lambda lp: get_policy_loss_fn("geo_mean")(old, lp, adv, mask, "token-mean", cfg), new
    )
    for mode in AGG_MODES:  # sequence-level by construction: the mode is not used (as in verl)
        o, og, om = _value_grad(
            lambda lp, mode=mode: get_method("gmpo").loss(old, lp, adv, mask, loss_agg_mode=mode),
            new,
        )
        torch.testing.assert_close(o, v, **TOL)
        torch.testing.assert_close(og, vg, **TOL)
    assert om["clip_frac_high"] == pytest.approx(vm["actor/pg_clipfrac"], rel=1e-6)
    assert om["clip_frac_low"] == pytest.approx(vm["actor/pg_clipfrac_lower"], rel=1e-6)


def test_sapo() -> None:
    old, new, adv, mask = make_batch(b=8, t=64, seed=17, spread=0.5)
    cfg = _cfg(tau_pos=1.0, tau_neg=1.05)
    for mode in AGG_MODES:  # SAPO aggregates seq-mean-token-mean whatever the mode (verl, paper)
        v, vg, _ = _value_grad(
            lambda lp, mode=mode: get_policy_loss_fn("sapo")(old, lp, adv, mask, mode, cfg), new
        )
        o, og, _ = _value_grad(
            lambda lp, mode=mode: sapo_loss(old, lp, adv, mask, loss_agg_mode=mode), new
        )
        torch.testing.assert_close(o, v, **TOL)
        torch.testing.assert_close(og, vg, **TOL)
    cfg = _cfg(tau_pos=2.0, tau_neg=0.5)
    v, vg, _ = _value_grad(
        lambda lp: get_policy_loss_fn("sapo")(old, lp, adv, mask, "token-mean", cfg), new
    )
    o, og, _ = _value_grad(
        lambda lp: get_method("sapo").loss(old, lp, adv, mask, tau_pos=2.0, tau_neg=0.5), new
    )
    torch.testing.assert_close(o, v, **TOL)
    torch.testing.assert_close(og, vg, **TOL)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_cispo(mode: str) -> None:
    old, new, adv, mask = make_batch(b=8, t=64, seed=18, spread=0.5)
    cfg = _cfg(clip_ratio=0.2, clip_ratio_low=10.0, clip_ratio_high=0.2)
    v, vg, _ = _value_grad(
        lambda lp: get_policy_loss_fn("cispo")(old, lp, adv, mask, mode, cfg), new
    )
    o, og, _ = _value_grad(
        lambda lp: get_method("cispo").loss(old, lp, adv, mask, loss_agg_mode=mode), new
    )
    torch.testing.assert_close(o, v, **TOL)
    torch.testing.assert_close(og, vg, **TOL)
    cfg = _cfg(clip_ratio=0.2, clip_ratio_low=0.3, clip_ratio_high=2.0)
    v, vg, _ = _value_grad(
        lambda lp: get_policy_loss_fn("cispo")(old, lp, adv, mask, mode, cfg), new
    )
    o, og, _ = _value_grad(
        lambda lp: cispo_loss(
            old, lp, adv, mask, loss_agg_mode=mode, clip_ratio_low=0.3, clip_ratio_high=2.0
        ),
        new,
    )
    torch.testing.assert_close(o, v, **TOL)
    torch.testing.assert_close(og, vg, **TOL)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_clip_cov_seeded(mode: str) -> None:
    """Clip-Cov picks tokens with torch.randperm on the global RNG: same seed, same choice."""
    old, new, adv, mask = make_batch(b=16, t=128, seed=19, spread=0.5)
    adv = adv * 4.0  # put many tokens in the covariance band (1, 5)
    kw = {"clip_cov_ratio": 0.05, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}
    cfg = _cfg(
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        policy_loss=PolicyLossConfig(loss_mode="clip_cov", **kw),
    )
    torch.manual_seed(123)
    v, vg, vm = _value_grad(
        lambda lp: get_policy_loss_fn("clip_cov")(old, lp, adv, mask, mode, cfg), new
    )
    torch.manual_seed(123)
    o, og, om = _value_grad(
        lambda lp: clip_cov_loss(
            old, lp, adv, mask, loss_agg_mode=mode, clip_ratio_low=0.2, clip_ratio_high=0.28, **kw
        ),
        new,
    )
    torch.testing.assert_close(o, v, **TOL)
    torch.testing.assert_close(og, vg, **TOL)
    assert om["cov_clip_frac"] == pytest.approx(vm["actor/pg_clipfrac"], rel=1e-6)
    assert om["cov_clip_frac"] > 0.01  # the cut is exercised
    # paper defaults through the registry (clip ratio 1, 2e-4 share), seeded alike
    cfg = _cfg(
        clip_ratio=1.0,
        clip_ratio_low=1.0,
        clip_ratio_high=1.0,
        policy_loss=PolicyLossConfig(loss_mode="clip_cov"),
    )
    torch.manual_seed(7)
    v, vg, _ = _value_grad(
        lambda lp: get_policy_loss_fn("clip_cov")(old, lp, adv, mask, mode, cfg), new
    )
    torch.manual_seed(7)
    o, og, _ = _value_grad(
        lambda lp: get_method("clip_cov").loss(old, lp, adv, mask, loss_agg_mode=mode), new
    )
    torch.testing.assert_close(o, v, **TOL)
    torch.testing.assert_close(og, vg, **TOL)


def test_clip_cov_generator_is_reproducible() -> None:
    old, new, adv, mask = make_batch(b=16, t=128, seed=20, spread=0.5)
    adv = adv * 4.0
    runs = [
        clip_cov_loss(
            old, new, adv, mask, clip_cov_ratio=0.05, generator=torch.Generator().manual_seed(5)
        )[0]
        for _ in range(2)
    ]
    assert float(runs[0]) == float(runs[1])
