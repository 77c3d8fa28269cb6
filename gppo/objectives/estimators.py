"""Per-token estimators of D_f(pi || mu) (the paper's Eq. 18-20, docs/conventions.md "Estimators"), as a
registry.

With r = pi / mu, t = log r and l = log mu (all tensors broadcast together):

* ``mc``:     D = |f(r)|
* ``atomic``: D = mu |f(r)|
* ``binary``: D = mu f(r) + (1 - mu) f(q), q = (1 - mu r) / (1 - mu): the f-divergence between
  Bernoulli(mu r) and Bernoulli(mu). Always >= 0, convex in r, defined for mu r <= 1 (it is
  +inf beyond; at mu = 1 the second term has weight 0).

Each estimator evaluates D and dD/dt from (t, l) in log space (log q = log(1 - mu r) - log(1 - mu)
with log(1 - x) = log(-expm1(log x))), so nothing cancels as mu -> 1 or r -> 0. Adding an
estimator is one decorated definition; the region solver treats ``binary``-like estimators
(``kind="bernoulli"``) and ``|f|``-like ones (``kind="abs"``, with a weight w(mu) so that
D = w(mu) |f(r)|) generically.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from gppo.registry import Registry

from .divergences import Divergence

Tensor = torch.Tensor


@dataclass(frozen=True)
class Estimator:
    """One per-token estimator.

    ``kind`` is ``"abs"`` (D = weight(l) |f(r)|; the region is |f(r)| <= delta / weight) or
    ``"bernoulli"`` (D is the binary f-divergence, r <= 1/mu).
    """

    name: str
    kind: str
    weight: Callable[[Tensor], Tensor] | None = None
    formula: str = ""
    #: how tables and figures name it (``MC``); empty: the name
    display: str = ""

    def __post_init__(self) -> None:
        if not self.display:
            object.__setattr__(self, "display", self.name)

    def estimate(self, div: Divergence, t: Tensor, log_mu: Tensor) -> Tensor:
        """Per-token D at log-ratio ``t`` and log behaviour probability ``log_mu`` (broadcast)."""
        if self.kind == "abs":
            assert self.weight is not None
            return self.weight(log_mu) * div.f(t).abs()
        return binary_estimate(div, t, log_mu)[0]


#: tag of the estimators of the paper's grid (Table 1): mc, atomic, binary
PAPER = "paper"
#: the estimators by name
ESTIMATORS: Registry[Estimator] = Registry("estimator")


def estimator(est: Estimator, *, paper: bool = False) -> Estimator:
    """Register an :class:`Estimator` under its name (``paper=True``: one of the paper's three)."""
    if est.kind not in ("abs", "bernoulli"):
        raise ValueError(f"estimator kind must be 'abs' or 'bernoulli', got {est.kind!r}")
    return ESTIMATORS.add(est.name, est, tags=(PAPER,) if paper else ())


def known_estimators() -> list[str]:
    """Registered names, in registration order."""
    return ESTIMATORS.names()


def paper_estimators() -> list[str]:
    """The paper's three estimators in registration order: the default grid."""
    return ESTIMATORS.names(PAPER)


def get_estimator(name: str) -> Estimator:
    """The estimator called ``name``; :class:`~gppo.errors.UnknownNameError` otherwise."""
    return ESTIMATORS.get(name)


def log1mexp(x: Tensor) -> Tensor:
    """log(1 - e^x) for x <= 0 (-inf at x = 0, nan for x > 0), accurate at both ends."""
    return torch.where(x > -math.log(2.0), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def binary_estimate(div: Divergence, t: Tensor, log_mu: Tensor) -> tuple[Tensor, Tensor]:
    """Binary D(t; l) = mu f(r) + (1 - mu) f(q) and dD/dt = mu r (f'(r) - f'(q)).

    +inf where mu r > 1; at mu = 1 the second atom adds its limit (1 - r) f'(inf).
    """
    mu = torch.exp(log_mu)
    one_m_mu = -torch.expm1(log_mu)
    u = log_mu + t  # log(mu r)
    beyond = u > 0
    log_q = log1mexp(torch.clamp(u, max=0.0)) - log1mexp(log_mu)
    degenerate = one_m_mu <= 0  # mu == 1: Bernoulli(mu) has no second atom
    fq = div.f(log_q)
    # At mu = 1 the second atom contributes its perspective limit (1 - r) f'(inf), with
    # f'(inf) = lim f(x)/x (the closed forms are these limits, e.g. chi2 freezes to 1).
    one_m_r = -torch.expm1(t)
    limit = torch.where(one_m_r == 0, torch.zeros_like(t), one_m_r * div.slope_inf)
    second = torch.where(degenerate, limit, one_m_mu * fq)
    d = mu * div.f(t) + second
    d = torch.where(beyond, torch.full_like(d, math.inf), d)
    # dD/dt = mu (df(t) - e^{t - log q} df(log q)); at mu = 1: df(t) - e^t f'(inf).
    dq = torch.exp(t - log_q) * div.df(log_q)
    dq = torch.where(degenerate, torch.exp(t) * div.slope_inf, dq)
    deriv = mu * (div.df(t) - dq)
    return d, deriv


estimator(
    Estimator(
        "mc",
        kind="abs",
        weight=lambda log_mu: torch.ones_like(log_mu),
        formula="|f(r)|",
        display="MC",
    ),
    paper=True,
)
estimator(
    Estimator("atomic", kind="abs", weight=torch.exp, formula="mu |f(r)|", display="Atomic"),
    paper=True,
)
estimator(
    Estimator(
        "binary",
        kind="bernoulli",
        formula="mu f(r) + (1 - mu) f((1 - mu r)/(1 - mu))",
        display="Binary",
    ),
    paper=True,
)
