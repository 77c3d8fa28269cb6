"""Calibration and proximal regions: closed forms, anchors (docs/conventions.md),
brute force, errors."""

from __future__ import annotations

import math

import pytest
import torch
from objectives_helpers import ALL_CELLS, EXTENSIONS, GRID_DIVERGENCES, GRID_ESTIMATORS

from gppo.objectives import calibrate_delta, proximal_region
from gppo.objectives.divergences import get_divergence
from gppo.objectives.estimators import get_estimator
from gppo.objectives.regions import log_mu_thresholds
from gppo.objectives.solver import solve_abs, solve_binary
from gppo.objectives.tables import region_table

F64 = torch.float64
MU = torch.tensor(
    [1e-8, 1e-5, 1e-3, 0.01, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 0.999999, 1.0], dtype=F64
)


def test_calibration_values() -> None:
    assert calibrate_delta("tv") == pytest.approx(0.2, rel=1e-12)
    assert calibrate_delta("chi2") == pytest.approx(0.04, rel=1e-12)
    assert calibrate_delta("hellinger") == pytest.approx((1 - math.sqrt(0.8)) ** 2, rel=1e-12)
    assert calibrate_delta("hellinger") == pytest.approx(0.011146, abs=1e-6)
    assert calibrate_delta("kl") == pytest.approx(-math.log(0.8), rel=1e-12)
    assert calibrate_delta("kl", r_min=0.5) == pytest.approx(math.log(2), rel=1e-12)
    assert calibrate_delta("rkl") == pytest.approx(abs(0.8 * math.log(0.8)), rel=1e-12)


def _closed(div: str, est: str, d: float, mu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The closed-form table of docs/conventions.md, transcribed independently."""
    e = d if est == "mc" else d / mu
    e = torch.as_tensor(e, dtype=F64).expand(mu.shape)
    pos = lambda x: torch.clamp(x, min=0.0)  # noqa: E731
    if est in ("mc", "atomic"):
        return {
            "tv": (pos(1 - e), 1 + e),
            "chi2": (pos(1 - e.sqrt()), 1 + e.sqrt()),
            "kl": (torch.exp(-e), torch.exp(e)),
            "hellinger": (pos(1 - e.sqrt()) ** 2, (1 + e.sqrt()) ** 2),
        }[div]
    if div == "tv":
        return pos(1 - d / (2 * mu)), torch.minimum(1 + d / (2 * mu), 1 / mu)
    if div == "chi2":
        k = torch.sqrt(d * (1 - mu) / mu)
        return pos(1 - k), torch.minimum(1 + k, 1 / mu)
    assert div == "hellinger"
    c, s, k = 1 - d / 2, math.sqrt(d * (1 - d / 4)), torch.sqrt((1 - mu) / mu)
    lo = torch.where(mu <= d * (1 - d / 4), torch.zeros_like(mu), (c - k * s) ** 2)
    hi = torch.where(mu.sqrt() >= 1 - d / 2, 1 / mu, (c + k * s) ** 2)
    return lo, hi


CLOSED_CELLS = [
    (d, e) for d in GRID_DIVERGENCES for e in GRID_ESTIMATORS if (d, e) != ("kl", "binary")
]


@pytest.mark.parametrize(("div", "est"), CLOSED_CELLS)  # kl-binary: no closed form
def test_closed_forms(div: str, est: str) -> None:
    for d in (calibrate_delta(div), 0.05, 0.5):
        lo, hi = proximal_region(div, est, d, MU)
        want_lo, want_hi = _closed(div, est, d, MU)
        torch.testing.assert_close(lo, want_lo, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(hi, want_hi, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("div", GRID_DIVERGENCES)
@pytest.mark.parametrize("est", GRID_ESTIMATORS)
def test_solver_reproduces_closed_forms(div: str, est: str) -> None:
    """The generic solver, run on the cells that have closed forms, agrees to ~1e-9."""
    g = torch.Generator().manual_seed(1)
    mu = torch.cat([MU, torch.rand(2000, generator=g, dtype=F64).clamp(min=1e-12)])
    d = calibrate_delta(div)
    lo, hi = proximal_region(div, est, d, mu)
    f = get_divergence(div)
    if est == "binary":
        slo, shi = solve_binary(f, d, mu.log(), "lo"), solve_binary(f, d, mu.log(), "hi")
    else:
        e = torch.full_like(mu, d) if est == "mc" else d / mu
        slo, shi = solve_abs(f, e, "lo"), solve_abs(f, e, "hi")
    for got, want in ((slo, lo), (shi, hi)):
        err = (got - want).abs().where(got != want, 0.0)  # inf == inf
        assert bool((err <= 1e-9 * want.abs() + 1e-15).all()), (div, est, float(err.max()))


# ---- anchors (docs/conventions.md, the paper's §3.4) -------------------------------------------
def test_tv_mc_is_ppo_clip() -> None:
    for eps in (0.1, 0.2, 0.28):
        lo, hi = proximal_region("tv", "mc", eps, MU)
        assert torch.allclose(lo, torch.full_like(MU, 1 - eps))
        assert torch.allclose(hi, torch.full_like(MU, 1 + eps))


def test_kl_mc_is_exp_delta() -> None:
    d = calibrate_delta("kl")
    lo, hi = proximal_region("kl", "mc", d, MU)
    torch.testing.assert_close(lo, torch.full_like(MU, 0.8))
    torch.testing.assert_close(hi, torch.full_like(MU, 1.25))


def test_tv_binary_is_dppo_and_tv_atomic_abs_diff() -> None:
    tau = 0.1
    lo, hi = proximal_region("tv", "binary", 2 * tau, MU)
    pi_lo, pi_hi = MU * lo, MU * hi
    interior = (lo > 0) & (hi < 1 / MU)
    torch.testing.assert_close((MU - pi_lo)[lo > 0], torch.full_like(MU, tau)[lo > 0])
    torch.testing.assert_close((pi_hi - MU)[interior], torch.full_like(MU, tau)[interior])
    lo, hi = proximal_region("tv", "atomic", 0.2, MU)
    torch.testing.assert_close((MU * hi - MU), torch.full_like(MU, 0.2))


def test_chi2_atomic_is_ripo() -> None:
    d = 0.04
    lo, hi = proximal_region("chi2", "atomic", d, MU)
    torch.testing.assert_close(hi, 1 + torch.sqrt(d / MU))
    torch.testing.assert_close(lo, torch.clamp(1 - torch.sqrt(d / MU), min=0.0))


def test_kl_binary_is_bernoulli_kl_threshold() -> None:
    d = calibrate_delta("kl")
    # (above mu ~ 0.99 the bound pi_hi = mu r_hi is within 1e-16 of 1 and this direct
    # evaluation of the Bernoulli KL is ill-conditioned; the brute-force test covers it)
    mu = MU[(MU > 1e-6) & (MU < 0.95)]
    lo, hi = proximal_region("kl", "binary", d, mu)

    def bkl(m: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return m * torch.log(m / p) + (1 - m) * torch.log1p(-m) - (1 - m) * torch.log1p(-p)

    ok = lo > 0
    torch.testing.assert_close(bkl(mu, mu * lo)[ok], torch.full_like(mu, d)[ok], rtol=1e-9, atol=0)
    ok = hi < 1 / mu
    torch.testing.assert_close(bkl(mu, mu * hi)[ok], torch.full_like(mu, d)[ok], rtol=1e-9, atol=0)


def test_kl_binary_at_half() -> None:
    for d in (0.05, calibrate_delta("kl"), 0.5):
        lo, hi = proximal_region("kl", "binary", d, torch.tensor([0.5], dtype=F64))
        w = math.sqrt(1 - math.exp(-2 * d))
        assert float(lo) == pytest.approx(1 - w, rel=1e-10)
        assert float(hi) == pytest.approx(1 + w, rel=1e-10)


def test_chi2_binary_freezes_as_mu_to_one() -> None:
    mu = torch.tensor([0.9, 0.99, 0.9999, 1 - 1e-8, 1.0], dtype=F64)
    lo, hi = proximal_region("chi2", "binary", 0.04, mu)
    width = hi - lo
    assert bool((width[1:] < width[:-1]).all())
    assert float(lo[-1]) == 1.0 and float(hi[-1]) == 1.0
    assert float(width[-2]) < 1e-4


# ---- general facts ---------------------------------------------------------------------------
@pytest.mark.parametrize(("div", "est"), ALL_CELLS)
def test_region_facts(div: str, est: str) -> None:
    d = calibrate_delta(div)
    lo, hi = proximal_region(div, est, d, MU)
    assert lo.dtype == F64 and lo.shape == MU.shape
    assert bool((lo >= 0).all()) and bool((lo <= 1).all()) and bool((hi >= 1).all())
    if est == "binary":
        assert bool((hi <= 1 / MU * (1 + 1e-12)).all())
    if est != "mc":  # widen as mu falls (MU is increasing)
        assert bool((lo[1:] >= lo[:-1] - 1e-12).all()) and bool(
            (hi[1:] <= hi[:-1] * (1 + 1e-12)).all()
        )
    lo2, hi2 = proximal_region(div, est, 2 * d, MU)  # widen as delta grows
    assert bool((lo2 <= lo + 1e-12).all()) and bool((hi2 >= hi * (1 - 1e-12)).all())


@pytest.mark.parametrize("div", GRID_DIVERGENCES + EXTENSIONS)
def test_atomic_contains_mc(div: str) -> None:
    d = calibrate_delta(div)
    mlo, mhi = proximal_region(div, "mc", d, MU)
    alo, ahi = proximal_region(div, "atomic", d, MU)
    assert bool((alo <= mlo + 1e-12).all()) and bool((ahi >= mhi * (1 - 1e-12)).all())


@pytest.mark.parametrize("div", ["tv", "chi2", "hellinger"])  # a property of these three
def test_binary_inside_atomic(div: str) -> None:
    d = calibrate_delta(div)
    blo, bhi = proximal_region(div, "binary", d, MU)
    alo, ahi = proximal_region(div, "atomic", d, MU)
    assert bool((blo >= alo - 1e-12).all()) and bool((bhi <= ahi * (1 + 1e-12)).all())


@pytest.mark.parametrize(("div", "est"), ALL_CELLS)
def test_regions_against_brute_force(div: str, est: str) -> None:
    """Evaluate D(r) on a fine grid; the bounds match the grid's component containing 1, and at
    an interior bound D crosses delta within 1e-6 relative in r."""
    d = calibrate_delta(div)
    f, e = get_divergence(div), get_estimator(est)
    mu = torch.tensor([1e-3, 0.05, 0.5, 0.97], dtype=F64)
    lo, hi = proximal_region(div, est, d, mu)
    t = torch.linspace(-12.0, 12.0, 120001, dtype=F64)  # step 2e-4 in log r
    for i, m in enumerate(mu.tolist()):
        lm = torch.tensor(math.log(m), dtype=F64)
        dv = e.estimate(f, t, lm)
        inside = dv <= d
        one = int(torch.argmin(t.abs()))
        assert bool(inside[one])
        j = one
        while j > 0 and bool(inside[j - 1]):
            j -= 1
        k = one
        while k < len(t) - 1 and bool(inside[k + 1]):
            k += 1
        g_lo = 0.0 if j == 0 else math.exp(float(t[j]))
        g_hi = math.inf if k == len(t) - 1 else math.exp(float(t[k]))
        for got, grid, tip in ((float(lo[i]), g_lo, 0.0), (float(hi[i]), g_hi, math.inf)):
            if grid == tip or (grid < math.exp(-11.9) or grid > math.exp(11.9)):
                assert got == tip or got < math.exp(-11.9) or got > math.exp(11.9), (m, got, grid)
            else:
                assert abs(math.log(got) - math.log(grid)) <= 2.1e-4, (div, est, m, got, grid)
        for b in (float(lo[i]), float(hi[i])):
            if 1e-9 < b < math.inf and not (est == "binary" and b >= 1 / m * (1 - 1e-12)):
                # 1e-6 relative inside the bound D <= delta, 1e-6 outside D >= delta
                step = 1e-6 if b > 1 else -1e-6
                tb = torch.tensor([math.log(b) - step, math.log(b) + step], dtype=F64)
                din, dout = e.estimate(f, tb, lm).tolist()
                assert din <= d and dout >= d, (div, est, m, b, din, dout)


def test_rkl_component_containing_one() -> None:
    """rkl's {|r log r| <= delta} is not connected below 1 for delta < 1/e: keep 1's part."""
    d = 0.2
    lo, _ = proximal_region("rkl", "mc", d, torch.tensor([0.5], dtype=F64))
    r = float(lo)
    assert 1 / math.e < r < 1 and abs(r * math.log(r)) == pytest.approx(d, rel=1e-10)
    lo, _ = proximal_region("rkl", "mc", 0.5, torch.tensor([0.5], dtype=F64))
    assert float(lo) == 0.0  # |r log r| <= 1/e < 0.5 on all of [0, 1]


@pytest.mark.parametrize(("div", "est"), [c for c in ALL_CELLS if c[1] != "mc"])
def test_table_inner_region_is_inside(div: str, est: str) -> None:
    d = calibrate_delta(div)
    table = region_table(div, est, d)
    g = torch.Generator().manual_seed(3)
    lm = torch.cat(
        [
            -torch.rand(600, generator=g, dtype=F64) * 30,
            -torch.rand(200, generator=g, dtype=F64) * 1e-6,
            torch.tensor([0.0, -1e-12, -740.0], dtype=F64),
        ]
    )
    lo, hi = proximal_region(div, est, d, torch.exp(lm))
    for dtype in (torch.float32, torch.float64):
        ilo, ihi = table.inner(lm.to(dtype))
        assert bool((ilo.to(F64) >= lo).all()) and bool((ihi.to(F64) <= hi).all())
        assert bool((ilo <= 1).all()) and bool((ihi >= 1).all())


@pytest.mark.parametrize(("div", "est"), [("kl", "binary"), ("tv", "atomic"), ("rkl", "binary")])
def test_bound_active_thresholds(div: str, est: str) -> None:
    d = calibrate_delta(div)
    l_lo, l_hi = log_mu_thresholds(div, est, d, 0.5, 10.0)
    lm = torch.linspace(-20, 0, 4001, dtype=F64)
    lo, hi = proximal_region(div, est, d, torch.exp(lm))
    far = (lm - l_lo).abs() > 1e-9
    assert bool(((lo < 0.5) == (lm < l_lo))[far].all())
    far = (lm - l_hi).abs() > 1e-9
    assert bool(((hi > 10.0) == (lm < l_hi))[far].all())


# ---- bad input -------------------------------------------------------------------------------
def test_bad_inputs_name_the_argument() -> None:
    mu = torch.tensor([0.5])
    with pytest.raises(
        KeyError,
        match=r"^unknown divergence 'xx'; known: tv, chi2, kl, hellinger, rkl, js \(and alpha:<a>\)$",
    ):
        proximal_region("xx", "mc", 0.1, mu)
    with pytest.raises(KeyError, match=r"^unknown estimator 'yy'; known: mc, atomic, binary$"):
        proximal_region("tv", "yy", 0.1, mu)
    for bad in (0.0, -0.1, math.nan, math.inf, "a", None):
        with pytest.raises(ValueError, match=r"delta must be a finite number > 0"):
            proximal_region("tv", "mc", bad, mu)  # type: ignore[arg-type]
    for bad_mu in ([0.0], [1.5], [-0.1], [math.nan]):
        with pytest.raises(ValueError, match=r"mu must lie in \(0, 1\]"):
            proximal_region("tv", "mc", 0.1, torch.tensor(bad_mu))
    with pytest.raises(TypeError, match=r"mu must be a torch\.Tensor"):
        proximal_region("tv", "mc", 0.1, [0.5])  # type: ignore[arg-type]
    for bad_r in (0.0, 1.0, 1.2, -0.5, math.nan, "x"):
        with pytest.raises(
            ValueError, match=r"r_min must be a number in the open interval \(0, 1\)"
        ):
            calibrate_delta("tv", bad_r)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match=r"^unknown divergence 'nope'; known: tv, chi2,"):
        calibrate_delta("nope")


def test_float32_mu_and_shapes() -> None:
    mu = torch.rand(3, 4, 5).clamp(min=1e-6)
    lo, hi = proximal_region("kl", "binary", 0.2, mu)
    assert lo.shape == (3, 4, 5) and hi.dtype == F64
    lo, hi = proximal_region("tv", "mc", 0.2, mu)
    assert lo.shape == (3, 4, 5)
    e_lo, e_hi = proximal_region("tv", "mc", 0.2, torch.empty(0))
    assert e_lo.numel() == 0 and e_hi.numel() == 0
