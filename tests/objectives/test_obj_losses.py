"""The GPPO loss against the objective (Eq. 11, docs/conventions.md) written out with autograd
(float64 oracle)."""

from __future__ import annotations

import math

import pytest
import torch
from objectives_helpers import AGG_MODES, ALL_CELLS, finite, make_batch, reference_token_loss

from gppo.objectives import (
    MU_BUCKETS,
    agg_loss,
    calibrate_delta,
    gppo_policy_loss,
    gppo_token_loss,
    proximal_region,
)
from gppo.objectives.regions import region_from_log_mu

KNOBS = [((0.5, 10.0), 10.0), (None, None), ((0.7, 1.5), 3.0), (None, 2.0), ((0.5, 10.0), None)]


def _bounds(div, est, delta, old):
    """The exact region per token, from log mu directly (as the loss gets it: exp/log round
    trips would move r = 1/mu tokens of binary cells across their bound by an ulp)."""
    lm = old.to(torch.float64).clamp(max=0.0)
    lo, hi = region_from_log_mu(div, est, delta, lm)
    lo = torch.as_tensor(lo, dtype=torch.float64).expand(lm.shape)
    hi = torch.as_tensor(hi, dtype=torch.float64).expand(lm.shape)
    ref_lo, ref_hi = proximal_region(div, est, delta, old.exp().to(torch.float64).clamp(max=1.0))
    torch.testing.assert_close(lo, ref_lo, rtol=1e-9, atol=1e-12)  # the same region
    torch.testing.assert_close(hi, ref_hi, rtol=1e-9, atol=1e-12)
    return lo, hi


def _oracle(old, new, adv, mask, div, est, delta, ratio_bounds, dual_clip, mode):
    lo, hi = _bounds(div, est, delta, old)
    new = new.detach().clone().requires_grad_(True)
    mat = reference_token_loss(old, new, adv, lo, hi, ratio_bounds, dual_clip)
    loss = agg_loss(mat, mask, mode)
    loss.backward()
    return loss.detach(), new.grad


@pytest.mark.parametrize(("div", "est"), ALL_CELLS)
def test_loss_and_grad_match_oracle(div: str, est: str) -> None:
    old, new, adv, mask = make_batch(seed=hash((div, est)) % 1000)
    d = calibrate_delta(div)
    for i, (rb, dc) in enumerate(KNOBS):
        mode = AGG_MODES[i % len(AGG_MODES)]
        want, want_g = _oracle(old, new, adv, mask, div, est, d, rb, dc, mode)
        lp = new.clone().requires_grad_(True)
        loss, metrics = gppo_policy_loss(
            old,
            lp,
            adv,
            mask,
            divergence=div,
            estimator=est,
            ratio_bounds=rb,
            dual_clip=dc,
            loss_agg_mode=mode,
        )
        loss.backward()
        torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(lp.grad, want_g, rtol=1e-12, atol=1e-14)
        assert loss.dim() == 0 and all(isinstance(v, float) for v in metrics.values())


@pytest.mark.parametrize(
    ("div", "est"), [("kl", "binary"), ("tv", "binary"), ("rkl", "atomic"), ("chi2", "mc")]
)
def test_float32_close_to_float64(div: str, est: str) -> None:
    old, new, adv, mask = make_batch(b=8, t=200, seed=5)
    want, want_g = _oracle(
        old, new, adv, mask, div, est, calibrate_delta(div), (0.5, 10.0), 10.0, "token-mean"
    )
    lp = new.float().requires_grad_(True)
    loss, _ = gppo_policy_loss(
        old.float(), lp, adv.float(), mask.float(), divergence=div, estimator=est
    )
    loss.backward()
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-6)
    # float32 rounding may move tokens within ~1e-6 of a bound across it: compare the rest
    lo, hi = _bounds(div, est, calibrate_delta(div), old)
    t = (new - old).clamp(-20, 20)
    edges = [lo.clamp(min=0.5).log(), hi.clamp(max=10.0).log(), torch.full_like(t, math.log(10.0))]
    near = torch.zeros_like(t, dtype=torch.bool)
    for e in edges:
        near |= (t - e).abs() < 1e-5
    far = ~near
    assert float(far.double().mean()) > 0.8  # pi = 1 tokens sit at r = 1/mu ~ r_hi
    torch.testing.assert_close(lp.grad.double()[far], want_g[far], rtol=1e-4, atol=1e-7)


def test_heavy_clipping_solved_cell_is_exact() -> None:
    """Many tokens far outside (pi = 1, large moves): the exact bounds are used for every one."""
    old, new, adv, mask = make_batch(b=16, t=128, seed=9, spread=2.0)
    new[:, ::3] = 0.0  # pi = 1: outside every kl-binary region with mu < 1
    for est in ("binary", "atomic"):
        want, want_g = _oracle(old, new, adv, mask, "kl", est, 0.05, None, None, "token-mean")
        lp = new.clone().requires_grad_(True)
        loss, m = gppo_policy_loss(
            old,
            lp,
            adv,
            mask,
            divergence="kl",
            estimator=est,
            delta=0.05,
            ratio_bounds=None,
            dual_clip=None,
        )
        loss.backward()
        torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(lp.grad, want_g, rtol=1e-12, atol=1e-14)
        assert m["clip_frac_high"] > 0.02


def test_token_loss_plus_agg_is_policy_loss() -> None:
    old, new, adv, mask = make_batch(seed=2)
    info = {"dp_size": 2, "batch_num_tokens": 77, "global_batch_size": 9, "loss_scale_factor": 13}
    for mode in AGG_MODES:
        mat, m1 = gppo_token_loss(old, new, adv, mask, divergence="kl", estimator="binary")
        assert mat.shape == old.shape
        loss, m2 = gppo_policy_loss(
            old,
            new,
            adv,
            mask,
            divergence="kl",
            estimator="binary",
            loss_agg_mode=mode,
            global_batch_info=info,
        )
        torch.testing.assert_close(loss, agg_loss(mat, mask, mode, **info))
        assert m1 == m2


def test_agg_loss_matches_verl() -> None:
    from verl.trainer.ppo.core_algos import agg_loss as verl_agg

    _, new, adv, mask = make_batch(seed=4)
    mat = new * adv
    for mode in [*AGG_MODES, "token-sum"]:
        torch.testing.assert_close(
            agg_loss(mat, mask, mode), verl_agg(mat, mask, mode), rtol=1e-12, atol=0
        )
        kw = {"dp_size": 4, "batch_num_tokens": 100, "global_batch_size": 3, "loss_scale_factor": 7}
        torch.testing.assert_close(
            agg_loss(mat, mask, mode, **kw), verl_agg(mat, mask, mode, **kw), rtol=1e-12, atol=0
        )


def test_metrics_keys_and_values() -> None:
    old, new, adv, mask = make_batch(b=8, t=300, seed=7, spread=0.6)
    div, est = "tv", "atomic"
    _, m = gppo_policy_loss(old, new, adv, mask, divergence=div, estimator=est)
    keys = {
        "clip_frac_low",
        "clip_frac_high",
        "approx_kl",
        "ratio_mean",
        "abs_log_ratio",
        "ratio_max",
        "bound_active_frac",
        "dual_clip_frac",
    }
    for name, _, _ in MU_BUCKETS:
        keys |= {f"clip_frac/{name}", f"clip_frac_low/{name}", f"clip_frac_high/{name}"}
    assert set(m) == keys
    # against a direct computation
    lo, hi = proximal_region(div, est, calibrate_delta(div), old.exp())
    active = (lo < 0.5) | (hi > 10.0)
    lo, hi = lo.clamp(min=0.5), hi.clamp(max=10.0)
    t = (new - old).clamp(-20, 20)
    r = t.exp()
    valid = mask > 0
    n = valid.sum()
    low = (adv < 0) & (r < lo) & valid
    high = (adv > 0) & (r > hi) & valid
    dual = (adv < 0) & (r > 10.0) & valid
    assert m["clip_frac_low"] == pytest.approx(float(low.sum() / n))
    assert m["clip_frac_high"] == pytest.approx(float(high.sum() / n))
    assert m["dual_clip_frac"] == pytest.approx(float(dual.sum() / n))
    assert m["bound_active_frac"] == pytest.approx(float((active & valid).sum() / n))
    assert m["approx_kl"] == pytest.approx(float(-(t * mask).sum() / n))
    assert m["ratio_mean"] == pytest.approx(float((r * mask).sum() / n))
    assert m["abs_log_ratio"] == pytest.approx(float((t.abs() * mask).sum() / n))
    assert m["ratio_max"] == pytest.approx(float(r[valid].max()))
    mu = old.exp()
    for name, a, b in MU_BUCKETS:
        inb = (mu >= a) & (mu < b) if b < 1 else (mu >= a)
        nb = (inb & valid).sum()
        want = float(((low | high) & inb).sum() / nb) if nb > 0 else 0.0
        assert m[f"clip_frac/{name}"] == pytest.approx(want)
        want_lo = float((low & inb).sum() / nb) if nb > 0 else 0.0
        assert m[f"clip_frac_low/{name}"] == pytest.approx(want_lo)


def test_all_masked_and_no_grad() -> None:
    old, new, adv, mask = make_batch(seed=1)
    loss, m = gppo_policy_loss(
        old,
        new,
        adv,
        torch.zeros_like(mask),
        divergence="kl",
        estimator="binary",
        loss_agg_mode="seq-mean-token-mean",
    )
    assert finite(loss) or math.isnan(float(loss))  # 0/0 as in verl for an empty batch
    assert all(math.isfinite(v) for v in m.values())
    with torch.no_grad():
        loss, _ = gppo_policy_loss(
            old, new.requires_grad_(True), adv, mask, divergence="tv", estimator="mc"
        )
    assert not loss.requires_grad


def test_bad_inputs_name_the_argument() -> None:
    old, new, adv, mask = make_batch(seed=0)
    kw = {"divergence": "kl", "estimator": "binary"}
    with pytest.raises(
        ValueError, match=r"advantages has shape \(6, 39\) but old_log_prob has shape \(6, 40\)"
    ):
        gppo_policy_loss(old, new, adv[:, :-1], mask, **kw)
    with pytest.raises(ValueError, match="response_mask has shape"):
        gppo_policy_loss(old, new, adv, mask[:-1], **kw)
    with pytest.raises(KeyError, match=r"^unknown divergence 'kll'; known: tv, chi2,"):
        gppo_policy_loss(old, new, adv, mask, divergence="kll", estimator="mc")
    with pytest.raises(KeyError, match=r"^unknown estimator 'mcc'; known: mc, atomic, binary$"):
        gppo_policy_loss(old, new, adv, mask, divergence="kl", estimator="mcc")
    with pytest.raises(ValueError, match="delta must be a finite number > 0"):
        gppo_policy_loss(old, new, adv, mask, delta=0.0, **kw)
    with pytest.raises(ValueError, match="r_min must be a number in the open interval"):
        gppo_policy_loss(old, new, adv, mask, r_min=1.0, **kw)
    with pytest.raises(ValueError, match="ratio_bounds must be None or a pair"):
        gppo_policy_loss(old, new, adv, mask, ratio_bounds=(2.0, 10.0), **kw)
    with pytest.raises(ValueError, match="ratio_bounds must be None or a pair"):
        gppo_policy_loss(old, new, adv, mask, ratio_bounds=0.5, **kw)
    with pytest.raises(ValueError, match="dual_clip must be None or a number > 1"):
        gppo_policy_loss(old, new, adv, mask, dual_clip=1.0, **kw)
    with pytest.raises(ValueError, match="loss_agg_mode must be one of"):
        gppo_policy_loss(old, new, adv, mask, loss_agg_mode="mean", **kw)
    with pytest.raises(TypeError, match=r"advantages must be a torch\.Tensor"):
        gppo_policy_loss(old, new, 1.0, mask, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_and_bool_mask(dtype: torch.dtype) -> None:
    old, new, adv, mask = make_batch(b=4, t=64, seed=1)
    want, _ = gppo_policy_loss(old, new, adv, mask, divergence="kl", estimator="binary")
    for div, est in (("kl", "binary"), ("tv", "atomic"), ("chi2", "mc"), ("rkl", "binary")):
        lp = new.to(dtype).requires_grad_(True)
        loss, m = gppo_policy_loss(
            old.to(dtype), lp, adv.to(dtype), mask.bool(), divergence=div, estimator=est
        )
        loss.backward()
        assert loss.dtype == torch.float32 and finite(loss) and finite(lp.grad)
        assert lp.grad.dtype == dtype
        assert all(math.isfinite(v) for v in m.values())
        if (div, est) == ("kl", "binary"):
            assert float(loss.detach()) == pytest.approx(float(want), rel=0.05, abs=1e-3)
