"""``loss_key``: equal keys are the same loss, gradient and diagnostics on every input (bit for
bit, on random batches), and near misses (one ulp, one setting) are not."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from objectives_helpers import AGG_MODES, ALL_CELLS, make_batch

from gppo.objectives import calibrate_delta
from gppo.objectives.identity import loss_key
from gppo.objectives.methods import get_method
from gppo.objectives.regions import mc_scalar_bounds

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BOUNDS = [None, (0.5, 10.0), (0.5, 20.0), (0.9, 1.1)]
DUALS = [None, 10.0]


def _params(div: str, est: str, r_min: float, bounds, dual) -> dict:
    return {
        "divergence": div,
        "estimator": est,
        "delta": calibrate_delta(div, r_min),
        "ratio_bounds": bounds,
        "dual_clip": dual,
    }


def _pool() -> dict[str, list[dict]]:
    """Grid cells at three radii, four ratio bounds and two dual clips, grouped by key."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for (div, est), r_min, bounds, dual in itertools.product(
        ALL_CELLS, (0.7, 0.8, 0.9), BOUNDS, DUALS
    ):
        p = _params(div, est, r_min, bounds, dual)
        groups[loss_key("gppo", p)].append(p)
    return groups


POOL = _pool()
SHARED = [g for g in POOL.values() if len(g) > 1]


def _run(method: str, params: dict, batch, agg: str):
    old, new, adv, mask = batch
    lp = new.clone().requires_grad_(True)
    loss, metrics = get_method(method).loss(old, lp, adv, mask, loss_agg_mode=agg, **params)
    loss.backward()
    return loss.detach(), lp.grad, metrics


def _same(a, b) -> bool:
    """Bit for bit: loss, gradient and every diagnostic."""
    return (
        torch.equal(a[0], b[0])
        and torch.equal(a[1], b[1])
        and a[2].keys() == b[2].keys()
        and all(a[2][k] == b[2][k] or (math.isnan(a[2][k]) and math.isnan(b[2][k])) for k in a[2])
    )


#: ratios inside, at and beyond every region of the pool, and past any dual clip
RATIOS = (1e-3, 0.3, 0.5, 0.6, 0.7, 0.75, 0.79, 0.85, 0.95, 1.02, 1.08, 1.15, 1.2, 1.24, 1.3, 2.0)
RATIOS += (5.0, 9.0, 11.0, 25.0, 300.0)


def _probe(dtype: torch.dtype = torch.float64):
    """Tokens at many μ and ratios (inside, at and beyond every region, past any dual clip), both
    signs of A, and a ragged mask: a batch on which two different losses disagree."""
    mus = torch.tensor([1e-6, 1e-3, 0.01, 0.1, 0.3, 0.5, 0.9, 0.999], dtype=torch.float64)
    ratios = torch.tensor(RATIOS, dtype=torch.float64)
    mu, r, a = torch.meshgrid(
        mus, ratios, torch.tensor([-1.5, 2.0], dtype=torch.float64), indexing="ij"
    )
    old = mu.log().reshape(4, -1)
    new = (mu.log() + r.log()).reshape(4, -1)
    adv = a.reshape(4, -1)
    mask = torch.ones_like(old)
    for i in range(4):
        mask[i, old.shape[1] - 20 * i :] = 0.0
    return tuple(x.to(dtype) for x in (old, new, adv, mask))


def test_the_pool_has_ties_across_divergences_radii_and_bounds() -> None:
    """The shared groups the criterion finds: tv/mc = chi2/mc = alpha:2/mc at each radius, one
    mc cell at bounds that do not cut it, every mc region cut down to [0.9, 1.1]."""
    tags = {
        frozenset((p["divergence"], p["estimator"], str(p["ratio_bounds"])) for p in g)
        for g in SHARED
    }
    assert any({("tv", "mc", "None"), ("chi2", "mc", "None")} <= t for t in tags)
    assert any({("tv", "mc", "(0.5, 10.0)"), ("tv", "mc", "(0.5, 20.0)")} <= t for t in tags)
    assert any({("kl", "mc", "(0.9, 1.1)"), ("hellinger", "mc", "(0.9, 1.1)")} <= t for t in tags)
    # atomic and binary regions move with μ: no two different cells are one function
    assert all(p["estimator"] == "mc" for g in SHARED for p in g)


@FAST
@given(
    group=st.sampled_from(SHARED),
    seed=st.integers(0, 10_000),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    agg=st.sampled_from(AGG_MODES),
)
def test_equal_keys_are_the_same_loss_and_gradient(group, seed, dtype, agg) -> None:
    batch = make_batch(b=4, t=24, dtype=dtype, seed=seed, spread=0.4)
    results = [_run("gppo", p, batch, agg) for p in group]
    for p, got in zip(group[1:], results[1:], strict=True):
        assert _same(results[0], got), (group[0], p)
    probe = [_run("gppo", p, _probe(dtype), agg) for p in group]
    assert all(_same(probe[0], got) for got in probe[1:])


def _edges():
    """One-token batches whose loss is -ρ·A exactly, ρ the clipped ratio: bounds one ulp apart
    give losses one ulp apart (a mean over many tokens may round that away)."""
    for r, a in ((0.3, -1.0), (3.0, 1.0)):
        old = torch.tensor([[math.log(0.5)]], dtype=torch.float64)
        new = old + math.log(r)
        yield (
            old,
            new,
            torch.tensor([[a]], dtype=torch.float64),
            torch.ones(1, 1, dtype=torch.float64),
        )


def _ulp(x: float) -> float:
    return math.nextafter(x, math.inf)


def _next_bound(delta: float) -> float:
    """The next δ above ``delta`` at which tv/mc's bounds move (by one ulp of r_lo)."""
    d = _ulp(delta)
    while mc_scalar_bounds("tv", d) == mc_scalar_bounds("tv", delta):
        d = _ulp(d)
    assert mc_scalar_bounds("tv", d)[0] == math.nextafter(mc_scalar_bounds("tv", delta)[0], 0)
    return d


def _near_misses():
    """(method, params, changed params): one ulp or one setting apart."""
    tv = _params("tv", "mc", 0.8, (0.5, 10.0), 10.0)
    for est in ("mc", "atomic", "binary"):
        base = {**tv, "estimator": est}
        yield "gppo", base, {**base, "delta": _ulp(base["delta"]) * 1.0001}
        yield "gppo", base, {**base, "dual_clip": 10.5}
        yield "gppo", base, {**base, "ratio_bounds": (0.85, 10.0)}
        yield "gppo", base, {**base, "divergence": "kl", "delta": calibrate_delta("kl", 0.8)}
    yield "gppo", tv, {**tv, "delta": _next_bound(tv["delta"])}  # r_lo one ulp lower
    yield "gppo", tv, {**tv, "ratio_bounds": (0.5, 1.15)}
    chi2_atomic = _params("chi2", "atomic", 0.8, (0.5, 10.0), 10.0)  # tv/chi2 tie only for mc
    yield "gppo", {**chi2_atomic, "divergence": "tv", "delta": 0.2}, chi2_atomic
    yield "gspo", {}, {"clip_ratio_low": 2e-4}
    yield "sapo", {}, {"tau_neg": 1.06}


@pytest.mark.parametrize("method,a,b", list(_near_misses()))
def test_near_misses_have_other_keys_and_differ(method, a, b) -> None:
    assert loss_key(method, a) != loss_key(method, b)
    batches = [_probe(), *_edges(), make_batch(seed=1, spread=3e-4)]
    assert any(
        not _same(_run(method, a, x, "token-mean"), _run(method, b, x, "token-mean"))
        for x in batches
    )


def test_aggregation_and_baselines_are_keyed_exactly() -> None:
    tv = _params("tv", "mc", 0.8, (0.5, 10.0), 10.0)
    keys = {loss_key("gppo", {**tv, "loss_agg_mode": m}) for m in AGG_MODES}
    assert len(keys) == len(AGG_MODES)
    batch = _probe()
    losses = {m: _run("gppo", tv, batch, m)[0].item() for m in AGG_MODES}
    assert len(set(losses.values())) == len(AGG_MODES)
    # a baseline is never a grid cell's function, even GSPO at PPO's radius
    assert loss_key("gspo", {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2}) != loss_key("gppo", tv)


#: one setting of a grid cell changed: (field, values)
MUTATIONS = st.sampled_from(
    [
        ("divergence", [d for d, e in ALL_CELLS if e == "mc"]),
        ("estimator", ["mc", "atomic", "binary"]),
        ("r_min", [0.7, 0.8, 0.9]),
        ("ratio_bounds", BOUNDS[:3]),
        ("dual_clip", [None, 10.0, 3.0]),
    ]
)
# an atomic region that holds ratio_bounds at every μ is cut to the bounds everywhere: the same
# loss at two radii, but the key keeps such cells apart (a missed saving, never a wrong share)
UNCUT = [p for g in POOL.values() for p in g if p["ratio_bounds"] != (0.9, 1.1)]


@FAST
@given(
    p=st.sampled_from(UNCUT), mutation=MUTATIONS, pick=st.integers(0, 10), seed=st.integers(0, 99)
)
def test_one_setting_changed_is_another_key_and_another_loss(p, mutation, pick, seed) -> None:
    name, values = mutation
    args = {
        "div": p["divergence"],
        "est": p["estimator"],
        "r_min": next(
            r for r in (0.7, 0.8, 0.9) if calibrate_delta(p["divergence"], r) == p["delta"]
        ),
        "bounds": p["ratio_bounds"],
        "dual": p["dual_clip"],
    }
    arg = {"divergence": "div", "estimator": "est", "ratio_bounds": "bounds", "dual_clip": "dual"}
    args[arg.get(name, name)] = values[pick % len(values)]
    q = _params(args["div"], args["est"], args["r_min"], args["bounds"], args["dual"])
    if loss_key("gppo", p) == loss_key("gppo", q):
        assert _same(
            _run("gppo", p, _probe(), "token-mean"), _run("gppo", q, _probe(), "token-mean")
        )
        return
    batches = [_probe(), *_edges(), make_batch(seed=seed, spread=0.4)]
    assert any(
        not _same(_run("gppo", p, x, "token-mean"), _run("gppo", q, x, "token-mean"))
        for x in batches
    ), (p, q)
