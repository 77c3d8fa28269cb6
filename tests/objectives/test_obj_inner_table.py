"""The solved cells' pre-test (gppo.objectives.solver.InnerTable) and the loss built on it, at
hypothesis-drawn delta, mu and ratios: a token the table lets through is one its exact bound
would not clip, and the loss is the objective with the exact (float64 solver) regions."""

from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from objectives_helpers import ALL_CELLS, reference_token_loss

from gppo.objectives import calibrate_delta, gppo_token_loss
from gppo.objectives.divergences import get_divergence
from gppo.objectives.estimators import get_estimator
from gppo.objectives.regions import has_closed_form, region_from_log_mu
from gppo.objectives.solver import N_ROWS, InnerTable, inner_table, solve_side

F64 = torch.float64
SOLVED = [(d, e) for d, e in ALL_CELLS if e != "mc" and not has_closed_form(d, e)]
PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _row_start(k: int) -> float:
    """-x_k: minus the float32 whose bits are k << 16 (the first -log mu of row k)."""
    return -float(torch.tensor([k << 16], dtype=torch.int32).view(torch.float32))


def _not_tiny(v: float) -> float:
    """0 for 0 < -log mu < 1e-200, where the reference (a cold solve, no starting point) is
    itself off: below 1e-300 q = (1 - mu r)/(1 - mu) overflows float64 (js-binary r_lo 0.994
    instead of mu = 1's 0.984); for 3e-214 < -log mu < 3e-206 alpha:1.5-binary's cold r_lo solve
    lands up to a factor e below the true ~1.0, its terms in (1 - mu)^1.5 being subnormal
    (measured by scanning 1e-300..1e-100: no other cell or side). The loss never takes the cold
    solve for such cells: its warm solve from the table (rows below 2^-40 start at mu = 1's
    region) gives 1.0 there, as at mu = 1."""
    return v if v <= -1e-200 else 0.0


LOG_MU = st.one_of(
    st.floats(-740.0, 0.0).map(_not_tiny),
    st.floats(-1e-6, 0.0).map(_not_tiny),
    st.sampled_from([0.0, -0.0, -1e-12, -(2.0**-40), -700.0]),
    st.integers(0x2B80, 0x442F).map(_row_start),  # rows' first values (x_k from 2^-40 to 700)
)
BOUNDS = st.sampled_from([None, (0.5, 10.0), (0.8, 1.2)])
DTYPES = st.sampled_from([torch.float32, F64])


def _exact(div: str, est: str, delta: float, log_mu: torch.Tensor) -> tuple[torch.Tensor, ...]:
    lm = log_mu.to(F64).clamp(max=0.0)
    lo, hi = region_from_log_mu(div, est, delta, lm)
    return tuple(torch.as_tensor(v, dtype=F64).expand(lm.shape) for v in (lo, hi))


def test_rows_are_the_float32_bits_of_minus_log_mu() -> None:
    lm = torch.tensor([0.0, -0.0, -1.0, -0.5, -745.0, -math.inf, math.nan])
    rows = InnerTable.rows(lm)
    assert rows.dtype == torch.int32
    assert rows.tolist()[:6] == [0, 0, 0x3F80, 0x3F00, 0x443A, 0x7F80]
    assert 0x7F80 < int(rows[6]) < N_ROWS
    # float64: one row below the float32 rounding (never above the token's own -log mu)
    lm64 = -torch.tensor([1.0, 1.0 + 2.0**-30, 3e-300], dtype=F64)
    assert InnerTable.rows(lm64).tolist() == [0x3F7F, 0x3F7F, 0]


@PROPS
@given(
    cell=st.sampled_from(SOLVED),
    scale=st.floats(0.05, 5.0),
    log_mu=st.lists(LOG_MU, min_size=1, max_size=24),
    bounds=BOUNDS,
    dtype=DTYPES,
)
def test_a_token_let_through_is_not_clipped_by_its_exact_bound(
    cell, scale, log_mu, bounds, dtype
) -> None:
    div, est = cell
    d = calibrate_delta(div) * scale
    b_lo, b_hi = bounds or (0.0, math.inf)
    lm = torch.tensor(log_mu, dtype=F64).to(dtype)
    lo, hi = _exact(div, est, d, lm)
    # ratios at, just inside and just outside both exact bounds (and 1), per token
    steps = torch.tensor([1 - 1e-5, 1 - 1e-7, 1.0, 1 + 1e-7, 1 + 1e-5], dtype=F64)
    r = torch.cat([lo[:, None] * steps, hi[:, None] * steps, torch.ones_like(lo)[:, None]], 1)
    r = r.clamp(math.exp(-20.0), math.exp(20.0)).to(dtype)  # the loss clamps log r to +-20
    lm2 = lm[:, None].expand(r.shape)
    table = inner_table(div, est, d)
    for sign in (1.0, -1.0, 0.0, -0.0):
        adv = torch.full(r.shape, sign, dtype=dtype)
        out = table.outside(lm2, r, adv, b_lo, b_hi)
        assert out.shape == r.shape and out.dtype == torch.bool
        kept = ~out
        if math.copysign(1.0, sign) > 0:  # A >= 0 uses r_hi
            cap = hi.to(dtype).clamp(max=b_hi)[:, None].expand(r.shape)
            exact, plain = torch.minimum(r, cap), r.clamp(max=b_hi)
        else:  # A < 0 uses r_lo
            cap = lo.to(dtype).clamp(min=b_lo)[:, None].expand(r.shape)
            exact, plain = torch.maximum(r, cap), r.clamp(min=b_lo)
        assert bool((exact[kept] == plain[kept]).all()), (div, est, d, sign)


@PROPS
@given(
    cell=st.sampled_from(SOLVED),
    scale=st.floats(0.05, 5.0),
    pairs=st.lists(st.tuples(LOG_MU, st.booleans()), min_size=1, max_size=24),
)
def test_one_solve_for_both_sides_is_the_two_solves(cell, scale, pairs) -> None:
    """solve_side with a per-token side (the loss's one call) equals the per-side solves bit
    for bit, from the table's starting points, and matches the reference regions."""
    div, est = cell
    d = calibrate_delta(div) * scale
    lm = torch.tensor([p[0] for p in pairs], dtype=F64)
    up = torch.tensor([p[1] for p in pairs])
    x0 = inner_table(div, est, d).guess(lm, up)
    f, e = get_divergence(div), get_estimator(est)
    mixed = solve_side(f, e, d, lm, up, x0=x0)
    for side, sel in (("hi", up), ("lo", ~up)):
        if bool(sel.any()):
            one = solve_side(f, e, d, lm[sel], side, x0=x0[sel])
            assert torch.equal(mixed[sel], one), (div, est, d, side)
    lo, hi = _exact(div, est, d, lm)
    # compared where the loss can see a bound: it clamps log r to +-20, so a bound past e^20
    # acts as e^20 (for mu near the float64 floor, e^-700 and below, a binary r_hi is ~1/mu ~
    # 1e304 and neither solve is accurate there: measured, left alone, invisible to the loss)
    cap = math.exp(20.0)
    got, want = mixed.clamp(max=cap), torch.where(up, hi, lo).clamp(max=cap)
    err = (got - want).abs().where(got != want, 0.0)  # inf == inf
    assert bool((err <= 1e-9 * want.abs() + 1e-15).all()), (div, est, d, float(err.max()))


@st.composite
def batches(draw: st.DrawFn, n_max: int = 24) -> tuple[torch.Tensor, ...]:
    n = draw(st.integers(min_value=1, max_value=n_max))
    old = draw(st.lists(st.floats(-30.0, 0.0).map(_not_tiny), min_size=n, max_size=n))
    move = draw(st.lists(st.floats(-3.0, 3.0), min_size=n, max_size=n))
    adv = draw(st.lists(st.floats(-10.0, 10.0), min_size=n, max_size=n))
    old_t = torch.tensor(old, dtype=F64)
    new_t = (old_t + torch.tensor(move, dtype=F64)).clamp(max=0.0)
    return old_t.view(1, n), new_t.view(1, n), torch.tensor(adv, dtype=F64).view(1, n)


@PROPS
@given(
    cell=st.sampled_from(SOLVED),
    scale=st.floats(0.05, 5.0),
    b=batches(),
    knobs=st.sampled_from([((0.5, 10.0), 10.0), (None, None), ((0.8, 1.2), 3.0)]),
    dtype=DTYPES,
)
def test_solved_cell_loss_is_the_objective_with_exact_regions(cell, scale, b, knobs, dtype):
    """Per-token loss and gradient against the objective written out with autograd on the
    exact float64 regions (1e-12 relative in float64, 1e-6 in float32)."""
    div, est = cell
    d = calibrate_delta(div) * scale
    old, new, adv = (x.to(dtype) for x in b)
    mask = torch.ones_like(old)
    lp = new.clone().requires_grad_(True)
    mat, _ = gppo_token_loss(
        old,
        lp,
        adv,
        mask,
        divergence=div,
        estimator=est,
        delta=d,
        ratio_bounds=knobs[0],
        dual_clip=knobs[1],
    )
    mat.sum().backward()
    lo, hi = _exact(div, est, d, old)
    ref_lp = new.clone().requires_grad_(True)
    ref = reference_token_loss(old, ref_lp, adv, lo, hi, knobs[0], knobs[1])
    ref.sum().backward()
    tol = {"rtol": 1e-12, "atol": 1e-14} if dtype == F64 else {"rtol": 1e-6, "atol": 1e-7}
    torch.testing.assert_close(mat.detach(), ref.detach(), **tol)
    torch.testing.assert_close(lp.grad, ref_lp.grad, **tol)
