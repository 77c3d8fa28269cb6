"""The report's vocabulary, one home: the row order of every table and figure (the paper's Table 1
order), the display names read from the registries, the estimators' colours, and the labels of
Table 1's blocks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gppo.analysis.data.tidy import ALIAS_CELLS, BASE, BASELINES
from gppo.registry import LazyMapping

#: Row order of the divergences and estimators: the paper's Table 1 display order (TV, Hellinger,
#: χ², KL; MC, Binary, Atomic), a deliberate choice that differs from the registries' order.
DIV_ORDER = ("tv", "hellinger", "chi2", "kl")
EST_ORDER = ("mc", "binary", "atomic")
BASELINE_ORDER = BASELINES  # the method registry's order, which is the paper's


def _display_names() -> dict[str, dict[str, str]]:
    """Each registry's display names (the one vocabulary: :mod:`gppo.objectives`), by name."""
    from gppo.objectives.divergences import DIVERGENCES, get_divergence
    from gppo.objectives.estimators import ESTIMATORS
    from gppo.objectives.methods import METHODS

    return {
        "divergence": {n: get_divergence(n).display for n in DIVERGENCES.names()},
        "estimator": {n: ESTIMATORS.get(n).display for n in ESTIMATORS.names()},
        "method": {n: METHODS.get(n).display for n in METHODS.names()},
    }


_NAMES: Mapping[str, dict[str, str]] = LazyMapping(_display_names)
#: display names, read from the registries on first use: divergences (``chi2`` -> ``χ²``;
#: ``alpha:<a>``: :func:`gppo.analysis.tables.render.divergence_name`), estimators, baselines
DIV_NAMES: Mapping[str, str] = LazyMapping(lambda: _NAMES["divergence"])
EST_NAMES: Mapping[str, str] = LazyMapping(lambda: _NAMES["estimator"])
BASELINE_NAMES: Mapping[str, str] = LazyMapping(lambda: {b: _NAMES["method"][b] for b in BASELINES})
#: Known methods named beside their cell, as in the paper's Table 1: the aliases (tv/mc -> GRPO).
KNOWN_METHODS: Mapping[str, str] = LazyMapping(
    lambda: {c: _NAMES["method"][m] for m, c in ALIAS_CELLS.items()}
)
OTHER_BASELINES = "Other baselines"
BASE_MODEL = "Base model"
#: the estimators' colours in every figure (the baselines': the method registry's)
EST_COLORS = {"mc": "black", "atomic": "tab:red", "binary": "tab:blue"}


def row_kind(cell: str) -> tuple[str, str]:
    """A tidy cell id's kind (``grid``, ``baseline``, ``base``) and its block's label."""
    if cell == BASE:
        return "base", BASE_MODEL
    if "/" in cell:
        return "grid", cell.split("/", 1)[0]
    return "baseline", OTHER_BASELINES


def row_order(cells: Iterable[str]) -> list[str]:
    """``cells`` (tidy ids) in Table 1's row order, the one order of every table and figure of the
    report: grid cells by divergence (:data:`DIV_ORDER`, then the others in the order they first
    appear in ``cells``), then estimator (:data:`EST_ORDER`, then by name); the baselines (the
    method registry's order, then by name); the base model last."""
    cells = list(dict.fromkeys(cells))
    first_seen: dict[str, int] = {}
    for cell in cells:
        if row_kind(cell)[0] == "grid":
            first_seen.setdefault(cell.split("/", 1)[0], len(first_seen))

    def key(cell: str) -> tuple:
        kind, _ = row_kind(cell)
        if kind == "grid":
            div, est = cell.split("/", 1)
            d = DIV_ORDER.index(div) if div in DIV_ORDER else len(DIV_ORDER)
            e = EST_ORDER.index(est) if est in EST_ORDER else len(EST_ORDER)
            return (0, d, first_seen[div], e, est)
        if kind == "baseline":
            b = BASELINE_ORDER.index(cell) if cell in BASELINE_ORDER else len(BASELINE_ORDER)
            return (1, b, 0, 0, cell)
        return (2, 0, 0, 0, cell)

    return sorted(cells, key=key)
