"""Vajda's bound: L_f(V) and C_f against the known constants (docs/conventions.md)."""

from __future__ import annotations

import pytest
import torch

from gppo.objectives.theory import C_f, L_f, vajda_C, vajda_L


@pytest.mark.parametrize(
    ("name", "value"), [("tv", 2.0), ("chi2", 4.0), ("kl", 2.0), ("hellinger", 1.0), ("js", 0.5)]
)
def test_known_constants(name: str, value: float) -> None:
    assert vajda_C(name) == pytest.approx(value, rel=2e-3)


def test_closed_form_L() -> None:
    v = torch.tensor([0.05, 0.2, 0.4, 0.7, 1.0], dtype=torch.float64)
    torch.testing.assert_close(L_f("tv", v), 2 * v, rtol=1e-9, atol=1e-12)
    small = v[v <= 0.5]
    torch.testing.assert_close(L_f("chi2", small), 4 * small**2, rtol=1e-6, atol=1e-12)


def test_pinsker_is_a_lower_bound() -> None:
    """KL >= C_kl V^2 on random Bernoulli pairs, and L_kl(V) <= KL at each pair's V."""
    p = torch.rand(200, dtype=torch.float64) * 0.98 + 0.01
    q = torch.rand(200, dtype=torch.float64) * 0.98 + 0.01
    kl = p * torch.log(p / q) + (1 - p) * torch.log((1 - p) / (1 - q))
    v = (p - q).abs()
    assert bool((kl >= C_f("kl") * v**2 - 1e-9).all())
    assert bool((vajda_L("kl", v.clamp(min=1e-6)) <= kl + 1e-9).all())


def test_bad_v() -> None:
    with pytest.raises(ValueError, match=r"V \(total variation\) must lie in \(0, 1\]"):
        vajda_L("kl", 0.0)
