"""Every loss computes in float32 whatever its input dtype.

Under verl's bf16 autocast the log-probs reach the loss as bfloat16; verl's own losses promote to
float32 (its old log-probs are float32). Ours must too: for every Divergence x Estimator cell of
the registries and every baseline, a bf16 or fp16 input gives a float32 loss equal (bit for bit)
to the float32 loss on the same (rounded) values, with or without autocast, and a gradient equal
to the float32 gradient rounded to the input dtype.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from objectives_helpers import make_batch

from gppo.objectives import gppo_policy_loss, gppo_token_loss, known_divergences, known_estimators
from gppo.objectives.methods import baseline_names, get_method

CELLS = [(d, e) for d in known_divergences() for e in known_estimators()]
BASELINES = baseline_names()
HALF = [torch.bfloat16, torch.float16]


def _batch(seed: int = 0, b: int = 5, t: int = 48):
    """A batch whose ratios sit near 1 (|log pi - log mu| ~ 0.05), as in training."""
    return make_batch(b=b, t=t, dtype=torch.float32, seed=seed, spread=0.05)


def _run(loss_fn, old, new, adv, mask, dtype, autocast: bool):
    lp = new.to(dtype).requires_grad_(True)
    ctx = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if autocast
        else torch.autocast("cpu", enabled=False)
    )
    with ctx:
        loss, metrics = loss_fn(old.to(dtype), lp, adv.to(dtype), mask)
        loss.backward()
    return loss.detach(), lp.grad, metrics


def _check(loss_fn, dtype, seed=0):
    old, new, adv, mask = _batch(seed)
    # the float32 reference on exactly the values the half-precision call sees
    ref = [x.to(dtype).to(torch.float32) for x in (old, new, adv)]
    torch.manual_seed(0)  # clip_cov's random choice: the same for the reference as for each call
    want_loss, want_grad, want_m = _run(loss_fn, *ref, mask, torch.float32, autocast=False)
    assert torch.count_nonzero(want_grad) > 0
    for autocast in (False, True):
        torch.manual_seed(0)  # clip_cov's random choice
        loss, grad, metrics = _run(loss_fn, old, new, adv, mask, dtype, autocast)
        assert loss.dtype == torch.float32, (dtype, autocast)
        assert grad.dtype == dtype
        torch.testing.assert_close(loss, want_loss, rtol=0, atol=0)
        torch.testing.assert_close(grad, want_grad.to(dtype), rtol=0, atol=0)
        assert metrics == want_m


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize(("div", "est"), CELLS, ids=[f"{d}-{e}" for d, e in CELLS])
def test_every_cell_computes_in_float32(div: str, est: str, dtype: torch.dtype) -> None:
    def fn(old, lp, adv, mask):
        return gppo_policy_loss(old, lp, adv, mask, divergence=div, estimator=est)

    torch.manual_seed(0)
    _check(fn, dtype)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", BASELINES)
def test_every_baseline_computes_in_float32(name: str, dtype: torch.dtype) -> None:
    method = get_method(name)

    def fn(old, lp, adv, mask):
        return method.loss(old, lp, adv, mask)

    _check(fn, dtype)


def test_token_loss_matrix_is_float32_and_float64_stays() -> None:
    old, new, adv, mask = _batch()
    mat, _ = gppo_token_loss(
        old.bfloat16(), new.bfloat16(), adv.bfloat16(), mask, divergence="kl", estimator="binary"
    )
    assert mat.dtype == torch.float32
    d = [x.double() for x in (old, new, adv, mask)]
    loss, _ = gppo_policy_loss(*d, divergence="kl", estimator="binary")
    assert loss.dtype == torch.float64
    for name in BASELINES:
        assert get_method(name).loss(*d)[0].dtype == torch.float64


@settings(max_examples=25, deadline=None)
@given(
    cell=st.sampled_from(CELLS),
    seed=st.integers(0, 10_000),
    agg=st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]),
)
def test_bf16_under_autocast_matches_float32_property(cell, seed, agg) -> None:
    """Random batches, cells and aggregation modes: the bf16-autocast call is the float32 call."""
    div, est = cell

    def fn(old, lp, adv, mask):
        return gppo_policy_loss(
            old, lp, adv, mask, divergence=div, estimator=est, loss_agg_mode=agg
        )

    _check(fn, torch.bfloat16, seed=seed)
