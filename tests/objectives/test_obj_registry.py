"""Divergence and estimator registries: names, errors, the generators of
docs/conventions.md (the paper's Eq. 14-17)."""

from __future__ import annotations

import math
import re

import pytest
import torch
from objectives_helpers import EXTENSIONS, GRID_DIVERGENCES

from gppo.objectives.divergences import get_divergence, known_divergences
from gppo.objectives.estimators import get_estimator, known_estimators

R = torch.tensor([0.0, 1e-6, 0.1, 0.5, 0.8, 1.0, 1.25, 2.0, 10.0, 1e3], dtype=torch.float64)


def test_known_names() -> None:
    assert set(known_divergences()) >= {"tv", "chi2", "kl", "hellinger", "rkl", "js"}
    assert known_estimators() == ["mc", "atomic", "binary"]


@pytest.mark.parametrize("name", ["nope", "alpha:", "alpha:x", "alpha:nan", "", None])
def test_unknown_divergence_lists_known(name: object) -> None:
    known = "known: tv, chi2, kl, hellinger, rkl, js (and alpha:<a>)"
    with pytest.raises(KeyError, match=re.escape(f"unknown divergence {name!r}; {known}")):
        get_divergence(name)  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # also a ValueError: a bad argument
        get_divergence(name)  # type: ignore[arg-type]


def test_unknown_estimator_lists_known() -> None:
    with pytest.raises(KeyError, match=r"^unknown estimator 'mcc'; known: mc, atomic, binary$"):
        get_estimator("mcc")


def test_generators_match_math_md() -> None:
    r = R[1:]
    expect = {
        "tv": (r - 1).abs(),
        "chi2": (r - 1) ** 2,
        "kl": -torch.log(r),
        "hellinger": (r.sqrt() - 1) ** 2,
        "rkl": r * torch.log(r),
        "js": 0.5 * (r * torch.log(r) - (1 + r) * torch.log((1 + r) / 2)),
    }
    for name, want in expect.items():
        got = get_divergence(name).f_of_ratio(r)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("a", [-1.0, 0.5, 1.5, 2.0, 3.0])
def test_alpha_family(a: float) -> None:
    r = R[1:]
    want = (r**a - a * r - (1 - a)) / (a * (a - 1))
    got = get_divergence(f"alpha:{a}").f_of_ratio(r)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


def test_alpha_special_members() -> None:
    r = R[1:]
    h = get_divergence("hellinger").f_of_ratio(r)
    torch.testing.assert_close(get_divergence("alpha:0.5").f_of_ratio(r), 2 * h)
    c = get_divergence("chi2").f_of_ratio(r)
    torch.testing.assert_close(get_divergence("alpha:2").f_of_ratio(r), c / 2)
    # the KL-type limits a = 1 and a = 0
    torch.testing.assert_close(get_divergence("alpha:1").f_of_ratio(r), r * r.log() - r + 1)
    torch.testing.assert_close(get_divergence("alpha:0").f_of_ratio(r), -r.log() + r - 1)


@pytest.mark.parametrize("name", GRID_DIVERGENCES + EXTENSIONS + ["alpha:1", "alpha:0"])
def test_generator_properties(name: str) -> None:
    """f(1) = 0, convex, df = r f'(r), argmin and f'(inf) as declared, f(0) as a limit."""
    div = get_divergence(name)
    assert div.scalar(1.0) == 0.0
    t = torch.linspace(-6, 6, 2001, dtype=torch.float64)
    r = torch.exp(t)
    f = div.f(t)
    # convex in r: second differences on a uniform r grid are >= 0
    ru = torch.linspace(1e-3, 20, 4001, dtype=torch.float64)
    fu = div.f_of_ratio(ru)
    assert bool((fu[2:] - 2 * fu[1:-1] + fu[:-2] >= -1e-12).all())
    # df(t) = d f(e^t) / dt (central differences)
    num = (div.f(t + 1e-6) - div.f(t - 1e-6)) / 2e-6
    ok = t.abs() > 1e-3  # tv has a kink at t = 0
    torch.testing.assert_close(div.df(t)[ok], num[ok], rtol=1e-5, atol=1e-6)
    # argmin: f is smallest there (over the grid)
    imin = int(torch.argmin(f))
    if math.isinf(div.argmin):
        assert imin == len(t) - 1
    else:
        assert abs(float(r[imin]) - div.argmin) < 0.01 * max(1.0, div.argmin)
    # f'(inf) = lim f(x)/x
    big = torch.tensor([1e6, 1e7], dtype=torch.float64)
    slope = div.f_of_ratio(big) / big
    if math.isinf(div.slope_inf):
        assert float(slope[1]) > 5.0
    else:
        assert abs(float(slope[1]) - div.slope_inf) < 0.05 * max(1.0, abs(div.slope_inf)) + 1e-3
    # f(0) is the limit (finite or +inf), never nan
    f0 = div.f_of_ratio(torch.zeros(1, dtype=torch.float64))
    assert not bool(torch.isnan(f0).any())
    assert float(f0) == pytest.approx(div.scalar(1e-300), rel=1e-6) or math.isinf(float(f0))


def test_binary_is_bernoulli_divergence() -> None:
    """binary D = mu f(r) + (1 - mu) f(q): the f-divergence between Bernoulli(mu r), Bernoulli(mu)."""
    mu = torch.tensor([0.01, 0.3, 0.5, 0.9], dtype=torch.float64)
    r = torch.tensor([3.0, 1.5, 0.2, 1.05], dtype=torch.float64)
    pi = mu * r
    est = get_estimator("binary")
    kl = est.estimate(get_divergence("kl"), r.log(), mu.log())
    want = mu * torch.log(mu / pi) + (1 - mu) * torch.log((1 - mu) / (1 - pi))
    torch.testing.assert_close(kl, want, rtol=1e-12, atol=0)
    tv = est.estimate(get_divergence("tv"), r.log(), mu.log())
    torch.testing.assert_close(tv, 2 * (pi - mu).abs(), rtol=1e-12, atol=1e-15)
    # beyond mu r > 1 the estimate is +inf
    out = est.estimate(get_divergence("chi2"), torch.tensor([1.0]), torch.tensor([-0.5]))
    assert math.isinf(float(out))
