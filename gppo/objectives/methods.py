"""Method registry: name -> loss and paper-default hyper-parameters (docs/conventions.md).

* ``gppo``: any cell; needs ``divergence`` and ``estimator``.
* aliases (GPPO cells): ``grpo`` = tv/mc (PPO clip at eps = delta = 0.2), ``dapo`` = kl/mc
  ([e^-delta, e^delta] = [0.8, 1.25]), ``dppo`` = tv/binary at delta = 2 tau (|pi - mu| <= tau),
  ``ripo`` = chi2/atomic (1 +- sqrt(delta / mu)).
* baselines: ``gspo``, ``gmpo``, ``sapo``, ``cispo``, ``clip_cov`` (:mod:`.baselines`).

The aliases are tagged ``alias`` and the baselines ``baseline`` in :data:`METHODS`; the report's
alias table (:func:`alias_cells`) and the spec's list of baselines (:func:`baseline_names`) are
read from here, and so is each method's vocabulary (:class:`Method`: its display name in tables
and figures, the verl loss mode that runs it, its figure colour).

``get_method(name).loss(old_log_prob, log_prob, advantages, response_mask, *,
loss_agg_mode="token-mean", global_batch_info=None, **params)``; ``params`` are merged over
``.defaults`` by ``.resolve`` (unknown keys: ValueError naming the accepted ones; see
``.param_names``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from gppo.registry import Registry

from . import baselines, defaults
from .aggregation import GlobalBatchInfo
from .defaults import LOSS_AGG_MODE  # (the field `defaults` hides the module in the class)
from .divergences import get_divergence
from .estimators import get_estimator
from .losses import gppo_policy_loss

Tensor = torch.Tensor
LossFn = Callable[..., tuple[Tensor, dict[str, float]]]

_GPPO_DEFAULTS: dict[str, Any] = {
    "delta": None,  # None: calibrated, delta = |f(r_min)|
    "r_min": defaults.R_MIN,
    "ratio_bounds": defaults.RATIO_BOUNDS,
    "dual_clip": defaults.DUAL_CLIP,
}


@dataclass(frozen=True)
class Method:
    """A named loss with its default hyper-parameters, and how the rest of the tool names it.

    ``display`` is its name in tables and figures (``Clip-Cov``; empty: the name upper-cased),
    ``verl_loss_mode`` the verl policy loss that runs it (``geo_mean`` for GMPO, ``gppo`` for our
    own; None: no verl loss of its own, e.g. an alias, which runs as its grid cell) and
    ``colour`` its line colour in the report's figures (None: grid cells take their estimator's).
    """

    name: str
    fn: LossFn
    defaults: Mapping[str, Any]
    divergence: str | None = None
    estimator: str | None = None
    required: tuple[str, ...] = ()
    extra: frozenset[str] = field(default_factory=frozenset)  # accepted, no default (generator)
    translate: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    description: str = ""
    display: str = ""
    verl_loss_mode: str | None = None
    colour: str | None = None

    def __post_init__(self) -> None:
        if not self.display:
            object.__setattr__(self, "display", self.name.upper())

    @property
    def param_names(self) -> frozenset[str]:
        """Every key ``resolve``/``loss`` accept."""
        return frozenset(self.defaults) | frozenset(self.required) | self.extra

    def resolve(self, params: Mapping[str, object] | None = None) -> dict[str, Any]:
        """Defaults merged with ``params``; ValueError for unknown or missing keys."""
        params = dict(params or {})
        unknown = sorted(set(params) - self.param_names)
        if unknown:
            raise ValueError(
                f"method {self.name!r} does not take parameter(s) {unknown}; "
                f"its parameters are {sorted(self.param_names)}"
            )
        out = {**self.defaults, **params}
        missing = [k for k in self.required if out.get(k) is None]
        if missing:
            raise ValueError(f"method {self.name!r} needs parameter(s) {missing}")
        if "divergence" in self.required:
            get_divergence(out["divergence"])
        if "estimator" in self.required:
            get_estimator(out["estimator"])
        return out

    def loss(
        self,
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        *,
        loss_agg_mode: str = LOSS_AGG_MODE,
        global_batch_info: GlobalBatchInfo | None = None,
        **params: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        p = self.resolve(params)
        if self.translate is not None:
            p = self.translate(p)
        return self.fn(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            loss_agg_mode=loss_agg_mode,
            global_batch_info=global_batch_info,
            **p,
        )


#: tag of the methods that are a named GPPO cell (grpo = tv/mc, ...; the paper's §3.4)
ALIAS = "alias"
#: tag of the baselines beyond the grid (the paper's "Other baselines", Table 1 order)
BASELINE = "baseline"
#: the methods by name
METHODS: Registry[Method] = Registry("method")


def register_method(method: Method, *, tags: tuple[str, ...] = ()) -> Method:
    """Add ``method`` under its name (a taken name raises DuplicateNameError)."""
    return METHODS.add(method.name, method, tags=tags)


def known_methods() -> list[str]:
    """Registered names, in registration order."""
    return METHODS.names()


def get_method(name: str) -> Method:
    """The method called ``name``; :class:`~gppo.errors.UnknownNameError` otherwise."""
    return METHODS.get(name)


def alias_cells() -> dict[str, str]:
    """Each alias and the grid cell it occupies: ``{"grpo": "tv/mc", "dapo": "kl/mc", ...}``."""
    out = {}
    for name in METHODS.names(ALIAS):
        m = METHODS.get(name)
        if m.divergence and m.estimator:  # every alias names its grid cell
            out[name] = defaults.grid_label(m.divergence, m.estimator)
    return out


def baseline_names() -> list[str]:
    """The baselines beyond the grid, in registration order (the paper's Table 1 order)."""
    return METHODS.names(BASELINE)


def verl_loss_modes() -> dict[str, str]:
    """Each method that verl runs with a loss of its own and that loss mode: ``{"gppo": "gppo",
    "gspo": "gspo", "gmpo": "geo_mean", ...}`` (the aliases run as grid cells: method gppo)."""
    out = {}
    for name in METHODS.names():
        mode = METHODS.get(name).verl_loss_mode
        if mode is not None:
            out[name] = mode
    return out


def _cell(divergence: str, estimator: str) -> LossFn:
    def fn(*args: Any, **kwargs: Any) -> tuple[Tensor, dict[str, float]]:
        return gppo_policy_loss(*args, divergence=divergence, estimator=estimator, **kwargs)

    return fn


def _dppo_translate(p: dict[str, Any]) -> dict[str, Any]:
    p = dict(p)
    p["delta"] = 2.0 * float(p.pop("tau"))
    return p


register_method(
    Method(
        "gppo",
        gppo_policy_loss,
        MappingProxyType(dict(_GPPO_DEFAULTS)),
        required=("divergence", "estimator"),
        description="GPPO: clip to the per-token proximal region of a Divergence x Estimator cell",
        verl_loss_mode="gppo",
    )
)
for _name, _div, _est, _desc in (
    ("grpo", "tv", "mc", "GRPO/PPO clip [1 - delta, 1 + delta] (tv/mc)"),
    ("dapo", "kl", "mc", "the paper's DAPO cell [e^-delta, e^delta] (kl/mc)"),
    ("ripo", "chi2", "atomic", "RIPO 1 +- sqrt(delta / mu) (chi2/atomic)"),
):
    register_method(
        Method(
            _name,
            _cell(_div, _est),
            MappingProxyType(dict(_GPPO_DEFAULTS)),
            divergence=_div,
            estimator=_est,
            description=_desc,
        ),
        tags=(ALIAS,),
    )
register_method(
    Method(
        "dppo",
        _cell("tv", "binary"),
        MappingProxyType(
            {"tau": 0.1, "ratio_bounds": defaults.RATIO_BOUNDS, "dual_clip": defaults.DUAL_CLIP}
        ),
        divergence="tv",
        estimator="binary",
        translate=_dppo_translate,
        description="DPPO-TV |pi - mu| <= tau = tv/binary at delta = 2 tau (tau 0.1: delta 0.2)",
    ),
    tags=(ALIAS,),
)
#: (name, loss, display name, verl loss mode, figure colour, description), Table 1's order
_BASELINES: tuple[tuple[str, LossFn, str, str, str, str], ...] = (
    ("gspo", baselines.gspo_loss, "GSPO", "gspo", "tab:green",
     "GSPO: sequence-level ratio, PPO clip on it"),
    ("gmpo", baselines.gmpo_loss, "GMPO", "geo_mean", "tab:orange",
     "GMPO: geometric mean of token ratios, log-space clip"),
    ("sapo", baselines.sapo_loss, "SAPO", "sapo", "tab:purple",
     "SAPO: soft sigmoid gate (aggregates seq-mean-token-mean)"),
    ("cispo", baselines.cispo_loss, "CISPO", "cispo", "tab:brown",
     "CISPO: clipped detached IS weight x A x log pi"),
    ("clip_cov", baselines.clip_cov_loss, "Clip-Cov", "clip_cov", "tab:pink",
     "Clip-Cov: PPO clip + covariance-band gradient cut"),
)  # fmt: skip
for _name, _fn, _display, _mode, _colour, _desc in _BASELINES:
    register_method(
        Method(
            _name,
            _fn,
            MappingProxyType(dict(baselines.DEFAULTS[_name])),
            extra=frozenset({"generator"}) if _name == "clip_cov" else frozenset(),
            description=_desc,
            display=_display,
            verl_loss_mode=_mode,
            colour=_colour,
        ),
        tags=(BASELINE,),
    )
