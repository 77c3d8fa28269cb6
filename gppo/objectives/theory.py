"""Vajda's bound (the paper's Eq. 5-7, docs/conventions.md "Theory helpers"): the best lower bound of D_f
by total variation.

L_f(V) = inf over beta in [0, 1 - V] of beta f(1 + V/beta) + (1 - beta) f(1 - V/(1 - beta)),
V = 1/2 ||P - Q||_1, and C_f = inf over V in (0, 1] of L_f(V) / V^2, so that D_f >= C_f TV^2.
Known values under this project's generators: C_tv = 2, C_chi2 = 4, C_kl = 2 (Pinsker),
C_hellinger = 1, C_js = 1/2.

The inner objective is convex in beta: a golden-section search, vectorised over V (float64).
"""

from __future__ import annotations

import math

import torch

from .divergences import Divergence, get_divergence

Tensor = torch.Tensor
_GOLD = (math.sqrt(5.0) - 1.0) / 2.0


def _pair_value(div: Divergence, beta: Tensor, v: Tensor) -> Tensor:
    a = beta * div.f_of_ratio(1.0 + v / beta)
    b = (1.0 - beta) * div.f_of_ratio(torch.clamp(1.0 - v / (1.0 - beta), min=0.0))
    return a + b


def vajda_L(divergence: str, v: float | Tensor, iters: int = 200) -> Tensor:
    """L_f(V) for V in (0, 1] (float or tensor; float64 tensor of V's shape)."""
    div = get_divergence(divergence)
    v = torch.as_tensor(v, dtype=torch.float64)
    if bool(((v <= 0) | (v > 1)).any()):
        raise ValueError("V (total variation) must lie in (0, 1]")
    tiny = 1e-15
    a = torch.full_like(v, tiny)
    b = torch.clamp(1.0 - v, min=tiny)
    c = b - _GOLD * (b - a)
    d = a + _GOLD * (b - a)
    fc, fd = _pair_value(div, c, v), _pair_value(div, d, v)
    for _ in range(iters):
        left = fc <= fd  # minimum in [a, d]
        b = torch.where(left, d, b)
        a = torch.where(left, a, c)
        c_new = b - _GOLD * (b - a)
        d_new = a + _GOLD * (b - a)
        c, d = c_new, d_new
        fc, fd = _pair_value(div, c, v), _pair_value(div, d, v)
    ends = torch.stack([_pair_value(div, a, v), _pair_value(div, b, v), fc, fd])
    ends = torch.where(torch.isnan(ends), torch.full_like(ends, math.inf), ends)
    return ends.min(dim=0).values


def vajda_C(divergence: str, n: int = 400) -> float:
    """C_f = inf over V in (0, 1] of L_f(V) / V^2, on a log-spaced grid V in [1e-4, 1]."""
    v = torch.logspace(-4, 0, n, dtype=torch.float64)
    ratio = vajda_L(divergence, v) / v.square()
    return float(ratio.min())


# The paper's spellings (Eq. 5 and 6).
L_f = vajda_L
C_f = vajda_C
