"""One cell of a sweep: everything a backend needs to turn it into a job, fully resolved.

``grid.expand`` produces these; ``Backend.job`` consumes them. A Cell is plain data (JSON-safe
values only) so it can be hashed, shown by ``plan`` and passed to a job's entrypoint.

The cell-id rule lives here, once (:func:`cell_id`): ``<divergence>-<estimator>-s<seed>`` for a
grid cell (``alpha:0.5`` -> ``alpha0.5``: ids never contain ':'), ``<method>-s<seed>`` for a
baseline; without the seed, the id of the cell over all its seeds (``kl-atomic``). A spec's
override and δ keys name cells by these ids, with or without the seed (:func:`match_cell_key`).

A sweep with ``axes`` adds the cell's axis point before the seed (:func:`axis_suffix`):
``kl-atomic_r_min0.8-s0``, ``kl-atomic_r_min0.8_lr0.0001-s0``; an axis that does not move a cell
(r_min for a baseline) adds nothing to its id. Ids stay in ``[A-Za-z0-9._-]``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel

#: the backend a spec or cell without ``backend`` runs on: the CPU testbed
DEFAULT_BACKEND = "local"
#: samples per prompt for avg@k when a spec's ``eval.k`` is not given
DEFAULT_EVAL_K = 8
#: what separates a cell's id from its seed: ``kl-atomic`` + ``-s`` + ``0``
SEED_MARK = "-s"
#: what precedes each axis value in an id: ``kl-atomic`` + ``_`` + ``r_min0.8``
AXIS_MARK = "_"
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")


def axis_value_text(value: object) -> str:
    """An axis value as an id writes it: ``0.8``, ``5e-05``, ``token-mean``, ``0.5,10.0`` ->
    ``0.5_10.0``, ``None`` -> ``none`` (anything outside ``[A-Za-z0-9.-]`` as ``_``)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "_".join(axis_value_text(v) for v in value)
    return _UNSAFE.sub("_", repr(value) if isinstance(value, float) else str(value))


def axis_suffix(point: Mapping[str, object], names: Mapping[str, str] | None = None) -> str:
    """``{"calibration.r_min": 0.8}`` -> ``_r_min0.8``: per axis (in order) its short name (the
    path's last part, or ``names[path]``) and value (:func:`axis_value_text`); ``""`` for none."""
    names = names or {}
    return "".join(
        f"{AXIS_MARK}{names.get(path, path.rsplit('.', 1)[-1])}{axis_value_text(value)}"
        for path, value in point.items()
    )


def cell_id(
    method_or_divergence: str,
    estimator: str | None = None,
    seed: int | None = None,
    axes: str = "",
) -> str:
    """A cell's id: ``cell_id("kl", "atomic", 0)`` -> ``kl-atomic-s0`` (``alpha:0.5`` ->
    ``alpha0.5-...``), ``cell_id("gspo", seed=1)`` -> ``gspo-s1``; without ``seed`` the id of the
    cell over all its seeds (``kl-atomic``, ``gspo``); ``axes`` (an :func:`axis_suffix`) goes
    before the seed (``kl-atomic_r_min0.8-s0``)."""
    base = method_or_divergence.replace(":", "")
    if estimator is not None:
        base = f"{base}-{estimator}"
    base += axes
    return base if seed is None else f"{base}{SEED_MARK}{seed}"


def match_cell_key(key: str, bases: Collection[str], seeds: Collection[int]) -> str | None:
    """The cell (id without its seed, one of ``bases``) that a spec key names, or None: a key is
    a cell's id without its seed (every seed) or with one of ``seeds`` (``kl-atomic``,
    ``kl-atomic-s1``)."""
    if key in bases:
        return key
    head, sep, tail = key.rpartition(SEED_MARK)
    if sep and head in bases and tail.isdigit() and int(tail) in seeds:
        return head
    return None


@dataclass(frozen=True)
class Resources:
    """What one cell's job asks Ray for while it runs. Ray places the job where these are free;
    the launcher itself gates only the number of running cells (``ray.max_concurrent``)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory_gb: float | None = None
    #: Ray custom resources ``((name, amount), ...)``, sorted by name (hashable)
    custom: tuple[tuple[str, float], ...] = ()
    #: nodes the job spans (verl's ``nnodes``); ``num_cpus`` and ``num_gpus`` are the job's
    #: totals over them. Not part of a cell's hash (a backend's settings decide it)
    nodes: int = 1


@dataclass(frozen=True)
class Cell:
    """A resolved cell.

    Attributes:
        id: readable, stable id, e.g. ``kl-atomic-s0`` or ``gspo-s1``.
        method: method-registry name: ``gppo`` for grid cells, the baseline's name otherwise.
        seed: replicate seed.
        loss_params: keyword arguments for the method's loss (beyond the four tensors), e.g.
            ``{"divergence": "kl", "estimator": "atomic", "delta": 0.223, "ratio_bounds": [0.5, 10],
            "dual_clip": 10.0}`` for a grid cell or ``{"clip_ratio_low": 3e-4, ...}`` for GSPO.
            A grid cell's coordinates and δ are stored here only; :attr:`divergence`,
            :attr:`estimator` and :attr:`delta` read them.
        backend: backend name (``local``, ``verl``, ``trl`` or a plugin's entry point).
        settings: the backend's own section after per-cell overrides, as validated by it (plain
            JSON values: what the run records and the config hash reads).
        settings_model: the same section as the backend's validated settings model, kept by the
            grid expansion (:meth:`keep_settings_model`) so no one validates it again. ``None``
            for a cell read back from JSON or copied with ``dataclasses.replace`` (whose
            ``settings`` may differ): :meth:`gppo.backends.base.Backend.settings_of` validates
            ``settings`` then. Not part of equality, the hash or :meth:`to_dict`.
        benchmarks: evaluation benchmarks (empty: the backend's defaults for its domain).
        eval_k: samples per prompt for avg@k.
        resources: what the job holds.
        axes: the cell's axis point, ``{path: value}`` for each axis of the spec that moves this
            cell (empty without ``axes``: then neither :meth:`to_dict` nor the hash has it).
        select: log the held-out selection score too (a spec with ``select:``; only when true
            in :meth:`to_dict`).
    """

    id: str
    method: str
    seed: int
    loss_params: dict[str, Any] = field(default_factory=dict)
    backend: str = DEFAULT_BACKEND
    settings: dict[str, Any] = field(default_factory=dict)
    benchmarks: tuple[str, ...] = ()
    eval_k: int = DEFAULT_EVAL_K
    resources: Resources = field(default_factory=Resources)
    axes: dict[str, Any] = field(default_factory=dict)
    select: bool = False
    settings_model: Any = field(default=None, init=False, compare=False, repr=False)

    def keep_settings_model(self, model: BaseModel | None) -> Cell:
        """Attach ``model``, this cell's ``settings`` as validated by its backend (the grid
        expansion's); returns the cell."""
        object.__setattr__(self, "settings_model", model)
        return self

    @property
    def divergence(self) -> str | None:
        """The grid cell's divergence (``None`` for baselines)."""
        return self.loss_params.get("divergence") if self.method == "gppo" else None

    @property
    def estimator(self) -> str | None:
        """The grid cell's estimator (``None`` for baselines)."""
        return self.loss_params.get("estimator") if self.method == "gppo" else None

    @property
    def delta(self) -> float | None:
        """The radius δ (calibrated from ``r_min`` unless the spec gave one; ``None`` for
        baselines and for a grid cell that leaves it to the loss's default)."""
        return self.loss_params.get("delta") if self.method == "gppo" else None

    def to_dict(self) -> dict[str, Any]:
        # same result as dataclasses.asdict (which deep-copies every value: ~1 ms per cell)
        r = self.resources
        out: dict[str, Any] = {
            "id": self.id,
            "method": self.method,
            "divergence": self.divergence,
            "estimator": self.estimator,
            "delta": self.delta,
            "seed": self.seed,
            "loss_params": _plain(self.loss_params),
            "backend": self.backend,
            "settings": _plain(self.settings),
            "benchmarks": list(self.benchmarks),
            "eval_k": self.eval_k,
            "resources": {"num_cpus": r.num_cpus, "num_gpus": r.num_gpus, "memory_gb": r.memory_gb},
        }
        if r.custom:  # only when set: the config hash of cells without custom resources is kept
            out["resources"]["custom"] = dict(r.custom)
        if self.axes:  # likewise: a sweep without axes keeps its cells' hashes
            out["axes"] = _plain(self.axes)
        if self.select:
            out["select"] = True
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cell:
        data = dict(data)
        for derived in ("divergence", "estimator", "delta"):  # to_dict's copies of loss_params
            data.pop(derived, None)
        data["benchmarks"] = tuple(data.get("benchmarks", ()))
        res = dict(data.get("resources", {}))
        res["custom"] = tuple(sorted((res.get("custom") or {}).items()))
        data["resources"] = Resources(**res)
        return cls(**data)

    def to_json(self) -> str:
        return self._json

    @cached_property
    def _json(self) -> str:  # a Cell is frozen: serialise once
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Cell:
        return cls.from_dict(json.loads(text))

    @property
    def config_hash(self) -> str:
        """Short hash of every setting: a changed cell gets a new hash (and a new run)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:12]


def _plain(value: Any) -> Any:
    """A copy of nested dicts/lists/tuples (what ``dataclasses.asdict`` gives, much faster)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value
