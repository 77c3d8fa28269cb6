"""Name checks against the project's registries (objectives, backends), imported lazily.

Every check returns the canonical name or raises ``ValueError`` whose message names the bad value
and lists the known ones (the loader turns it into one ``FILE: path: message`` line).
"""

from __future__ import annotations

import math
from functools import lru_cache


@lru_cache(maxsize=1)
def known_divergences() -> tuple[str, ...]:
    from gppo.objectives.divergences import known_divergences as _known

    return tuple(sorted(n for n in _known() if not n.startswith("alpha")))


@lru_cache(maxsize=1)
def known_estimators() -> tuple[str, ...]:
    from gppo.objectives.estimators import known_estimators as _known

    return tuple(sorted(_known()))


def _alpha(name: str) -> str | None:
    """Canonical ``alpha:<a>`` (a finite float, not 0 or 1), or None when not of that family."""
    if not name.startswith("alpha:"):
        return None
    try:
        a = float(name.removeprefix("alpha:"))
    except ValueError:
        return None
    if not math.isfinite(a):
        return None
    return f"alpha:{a:g}"


@lru_cache(maxsize=4096)
def check_divergence(name: str) -> str:
    if name in known_divergences():
        return name
    alpha = _alpha(name)
    if alpha is not None:
        return alpha
    known = ", ".join([*known_divergences(), "alpha:<a>"])
    raise ValueError(f"unknown divergence {name!r}; known: {known}")


def check_estimator(name: str) -> str:
    if name in known_estimators():
        return name
    raise ValueError(f"unknown estimator {name!r}; known: {', '.join(known_estimators())}")


def check_backend(name: str) -> str:
    from gppo.backends.base import get_backend

    try:
        get_backend(name)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    except ImportError as exc:  # a built-in backend whose module is missing or broken
        raise ValueError(f"backend {name!r} is not available ({exc})") from None
    return name


def resolve_method_params(method: str, params: dict) -> dict:
    """The method's paper defaults merged with ``params`` (unknown keys -> ValueError)."""
    from gppo.objectives.methods import get_method

    try:
        return dict(get_method(method).resolve(dict(params)))
    except KeyError as exc:
        raise ValueError(str(exc.args[0]) if exc.args else str(exc)) from None


@lru_cache(maxsize=4096)
def calibrate(divergence: str, r_min: float) -> float:
    from gppo.objectives import calibrate_delta

    return float(calibrate_delta(divergence, r_min))
