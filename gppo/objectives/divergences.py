"""f-divergence generators (the paper's Eq. 14-17, docs/conventions.md "Generators"), as a registry
filled by a decorator.

Every generator is convex with f(1) = 0. It is written in the log-ratio t = log r, so nothing
cancels near r = 1 and r = 0 is t = -inf:

* ``f(t)``  = f(e^t)                      (elementwise on a float tensor)
* ``df(t)`` = d f(e^t) / dt = r f'(r)      (used by the Newton steps of the region solver)
* ``argmin``: the r at which f is smallest on [0, inf): 1.0 when f'(1) = 0, ``inf`` for ``kl``
  (decreasing everywhere), 1/e for ``rkl``. The region solver uses it to find the monotone pieces
  of |f| on each side of r = 1.
* ``slope_inf``: f'(inf) = lim f(x)/x (the perspective 0 f(p/0) = p f'(inf)), which the binary
  estimator needs at mu = 1.

Adding a divergence is one decorated function returning a :class:`Divergence`::

    @divergence("mine")
    def _mine() -> Divergence:
        return Divergence("mine", f=..., df=..., argmin=1.0)

The parametric family ``alpha:<a>`` (any finite real a; a = 0 and a = 1 are the KL-type limits) is
parsed from the name by :func:`parse_alpha` (the one parser; the grid spec uses it through
:func:`canonical_divergence`). ``paper=True`` tags the paper's four (the default grid).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from gppo.registry import Registry

Tensor = torch.Tensor

_LOG2 = math.log(2.0)


@dataclass(frozen=True)
class Divergence:
    """One generator f, in log-ratio form (see the module docstring)."""

    name: str
    f: Callable[[Tensor], Tensor]
    df: Callable[[Tensor], Tensor]
    argmin: float = 1.0
    slope_inf: float = math.inf
    formula: str = ""
    #: how tables and figures name it (``χ²``); empty: the name
    display: str = ""

    def __post_init__(self) -> None:
        if not self.display:
            object.__setattr__(self, "display", self.name)

    def f_of_ratio(self, r: Tensor) -> Tensor:
        """f(r) for r >= 0 (r = 0 is the limit t -> -inf)."""
        return self.f(torch.log(r))

    def scalar(self, r: float) -> float:
        """f(r) for one Python float (float64)."""
        return float(self.f_of_ratio(torch.tensor(float(r), dtype=torch.float64)))


ALPHA_PREFIX = "alpha:"
#: tag of the divergences of the paper's grid (Table 1): tv, chi2, kl, hellinger
PAPER = "paper"
#: the generators by name: zero-argument factories returning a :class:`Divergence`
DIVERGENCES: Registry[Callable[[], Divergence]] = Registry(
    "divergence", families=(f"{ALPHA_PREFIX}<a>",)
)
_CACHE: dict[str, Divergence] = {}


def divergence(
    name: str, *, paper: bool = False
) -> Callable[[Callable[[], Divergence]], Callable[[], Divergence]]:
    """Register a zero-argument factory returning a :class:`Divergence` under ``name``
    (``paper=True``: one of the paper's four, the default grid)."""
    return DIVERGENCES.register(name, tags=(PAPER,) if paper else ())


def known_divergences() -> list[str]:
    """Registered names (the ``alpha:<a>`` family is accepted on top of these)."""
    return DIVERGENCES.names()


def paper_divergences() -> list[str]:
    """The paper's four divergences in registration order: the default grid."""
    return DIVERGENCES.names(PAPER)


def parse_alpha(name: object) -> float | None:
    """The ``a`` of ``alpha:<a>`` (any finite real), or None when ``name`` is not of that family."""
    if not isinstance(name, str) or not name.startswith(ALPHA_PREFIX):
        return None
    try:
        a = float(name[len(ALPHA_PREFIX) :])
    except ValueError:
        return None
    return a if math.isfinite(a) else None


def canonical_divergence(name: str) -> str:
    """``name`` when registered, ``alpha:<a>`` spelt with ``{a:g}`` for the family (``alpha:0.50``
    -> ``alpha:0.5``); :class:`~gppo.errors.UnknownNameError` otherwise."""
    if name in DIVERGENCES:
        return name
    a = parse_alpha(name)
    if a is None:
        raise DIVERGENCES.unknown(name)
    return f"{ALPHA_PREFIX}{a:g}"


def get_divergence(name: str) -> Divergence:
    """The generator called ``name`` (a registered name or ``alpha:<a>``); KeyError otherwise."""
    if isinstance(name, str) and name in _CACHE:
        return _CACHE[name]
    if name in DIVERGENCES:
        div = DIVERGENCES.get(name)()
    else:
        a = parse_alpha(name)
        if a is None:
            raise DIVERGENCES.unknown(name)
        div = _alpha(a, name)
    _CACHE[name] = div
    return div


def display_name(name: str) -> str:
    """How tables and figures name a divergence: ``chi2`` -> ``χ²``, ``alpha:0.5`` -> ``α=0.5``;
    a name no registry knows (a report of an older sweep's CSV) as it is."""
    try:
        return get_divergence(name).display
    except KeyError:
        return name


def _xexpx(t: Tensor) -> Tensor:
    """t e^t with the limit 0 at t = -inf (r log r at r = 0)."""
    return torch.where(t == -math.inf, torch.zeros_like(t), t * torch.exp(t))


@divergence("tv", paper=True)
def _tv() -> Divergence:
    # |r - 1|, no 1/2: delta_TV = 0.2 equals PPO's epsilon = 0.2.
    return Divergence(
        "tv",
        display="TV",
        f=lambda t: torch.expm1(t).abs(),
        df=lambda t: torch.sign(t) * torch.exp(t),
        slope_inf=1.0,
        formula="|r - 1|",
    )


@divergence("chi2", paper=True)
def _chi2() -> Divergence:
    return Divergence(
        "chi2",
        display="χ²",
        f=lambda t: torch.expm1(t).square(),
        df=lambda t: 2.0 * torch.expm1(t) * torch.exp(t),
        formula="(r - 1)^2",
    )


@divergence("kl", paper=True)
def _kl() -> Divergence:
    # -log r: D_f(pi || mu) = KL(mu || pi); negative for r > 1.
    return Divergence(
        "kl",
        display="KL",
        f=lambda t: -t,
        df=lambda t: -torch.ones_like(t),
        argmin=math.inf,
        slope_inf=0.0,
        formula="-log r",
    )


@divergence("hellinger", paper=True)
def _hellinger() -> Divergence:
    return Divergence(
        "hellinger",
        display="Hellinger",
        f=lambda t: torch.expm1(0.5 * t).square(),
        df=lambda t: torch.expm1(0.5 * t) * torch.exp(0.5 * t),
        slope_inf=1.0,
        formula="(sqrt(r) - 1)^2",
    )


@divergence("rkl")
def _rkl() -> Divergence:
    return Divergence(
        "rkl",
        display="RKL",
        f=_xexpx,
        df=lambda t: torch.exp(t) * (1.0 + t),
        argmin=math.exp(-1.0),
        formula="r log r",
    )


def _js_f(t: Tensor) -> Tensor:
    # 1/2 [r log r - (1 + r) log((1 + r)/2)], log(1 + r) = softplus(t).
    r = torch.exp(t)
    return 0.5 * (_xexpx(t) - (1.0 + r) * (torch.nn.functional.softplus(t) - _LOG2))


def _js_df(t: Tensor) -> Tensor:
    # r f'(r) = 1/2 r log(2r / (1 + r)).
    return 0.5 * torch.exp(t) * (t - torch.nn.functional.softplus(t) + _LOG2)


@divergence("js")
def _js() -> Divergence:
    return Divergence(
        "js",
        display="JS",
        f=_js_f,
        df=_js_df,
        slope_inf=0.5 * _LOG2,
        formula="1/2 [r log r - (1 + r) log((1 + r)/2)]",
    )


def _alpha(a: float, name: str) -> Divergence:
    """(r^a - a r - (1 - a)) / (a (a - 1)); a = 1 -> r log r - r + 1, a = 0 -> -log r + r - 1."""
    return replace(_alpha_generator(a, name), display="α=" + name.removeprefix(ALPHA_PREFIX))


def _alpha_generator(a: float, name: str) -> Divergence:
    formula = f"(r^{a:g} - {a:g} r - (1 - {a:g})) / ({a:g} ({a:g} - 1))"
    if a == 1.0:
        return Divergence(
            name,
            f=lambda t: _xexpx(t) - torch.expm1(t),
            df=lambda t: _xexpx(t),
            formula="r log r - r + 1",
        )
    if a == 0.0:
        return Divergence(
            name,
            f=lambda t: torch.expm1(t) - t,
            df=lambda t: torch.expm1(t),
            slope_inf=1.0,
            formula="-log r + r - 1",
        )
    c = 1.0 / (a * (a - 1.0))

    def f(t: Tensor) -> Tensor:
        # r^a - a r - (1 - a) = expm1(a t) - a expm1(t): no cancellation near r = 1.
        return c * (torch.expm1(a * t) - a * torch.expm1(t))

    def df(t: Tensor) -> Tensor:
        return (torch.exp(a * t) - torch.exp(t)) / (a - 1.0)

    slope = math.inf if a > 1.0 else 1.0 / (1.0 - a)
    return Divergence(name, f=f, df=df, slope_inf=slope, formula=formula)
