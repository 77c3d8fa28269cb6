"""The spec's name checks, as a thin adapter over the registries (objectives, backends).

Every check returns the canonical name or raises the registry's
:class:`~gppo.errors.UnknownNameError` (a ``ValueError``), worded once for every registry::

    unknown divergence 'kll'; known: tv, chi2, kl, hellinger, rkl, js (and alpha:<a>)

The loader turns it into one ``FILE: path: message`` line. The backend registry is imported on
first use, by :func:`check_backend` (the grid sits above the backends: a backend never imports
the grid, ``tests/test_layering.py``).
"""

from __future__ import annotations

from functools import lru_cache

from gppo.objectives.divergences import canonical_divergence
from gppo.objectives.estimators import ESTIMATORS
from gppo.objectives.methods import BASELINE, METHODS


@lru_cache(maxsize=4096)
def check_divergence(name: str) -> str:
    """A registered divergence or ``alpha:<a>`` (spelt ``alpha:{a:g}``)."""
    return canonical_divergence(name)


def check_estimator(name: str) -> str:
    """A registered estimator."""
    ESTIMATORS.get(name)
    return name


def check_baseline(name: str) -> str:
    """A baseline method (tagged ``baseline`` in the method registry)."""
    METHODS.get(name, tag=BASELINE)
    return name


def check_backend(name: str) -> str:
    """A registered backend whose module imports."""
    from gppo.backends.base import get_backend

    try:
        get_backend(name)
    except ImportError as exc:  # a built-in backend whose module is missing or broken
        raise ValueError(f"backend {name!r} is not available ({exc})") from None
    return name


def resolve_method_params(method: str, params: dict) -> dict:
    """The method's paper defaults merged with ``params`` (unknown keys -> ValueError)."""
    return dict(METHODS.get(method).resolve(dict(params)))


@lru_cache(maxsize=4096)
def calibrate(divergence: str, r_min: float) -> float:
    from gppo.objectives import calibrate_delta

    return float(calibrate_delta(divergence, r_min))
