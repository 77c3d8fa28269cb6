"""What a run costs: the resources its job held x its wall time, as CPU-hours and GPU-hours.

One rule for every backend (local, TRL, verl, a plugin's): the job's resources
(:class:`gppo.cell.Resources` of its :class:`~gppo.backends.base.Job`: ``num_cpus`` and
``num_gpus``, the totals over its ``nodes``) times the seconds from its submission to the end of
the attempt, in hours::

    cpu_hours = num_cpus x wall_s / 3600        gpu_hours = num_gpus x wall_s / 3600

A verl cell on 8 GPUs for 10 h is 80 GPU-h; a testbed cell on 1 CPU for 20 s is 0.0056 CPU-h.
The launcher logs them into the run (:func:`resource_metrics` at submission,
:func:`attempt_cost` when an attempt ends), under the names of :mod:`gppo.metrics`; a run kept
across attempts (verl) adds each attempt's hours to the ones before. Readers sum the runs of
every attempt (:func:`spent`): a failed attempt was paid for too.

An optional :class:`Price` (the spec's ``cost:``) turns hours into money wherever hours are shown
(:func:`hours_text`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gppo import metrics as M
from gppo.cell import Cell, Resources

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class Price:
    """Money per CPU-hour and per GPU-hour, in ``currency`` (the spec's ``cost:``)."""

    gpu_hour: float = 0.0
    cpu_hour: float = 0.0
    currency: str = "USD"


@dataclass(frozen=True)
class Hours:
    """CPU-hours, GPU-hours and the wall seconds of ``runs`` runs together."""

    cpu: float = 0.0
    gpu: float = 0.0
    wall_s: float = 0.0
    runs: int = 0

    def __add__(self, other: Hours) -> Hours:
        return Hours(
            self.cpu + other.cpu,
            self.gpu + other.gpu,
            self.wall_s + other.wall_s,
            self.runs + other.runs,
        )

    def scaled(self, factor: float) -> Hours:
        """The same hours times ``factor`` (the runs count is kept)."""
        return Hours(self.cpu * factor, self.gpu * factor, self.wall_s * factor, self.runs)

    def money(self, price: Price | None) -> float | None:
        """What these hours cost at ``price`` (None: no price)."""
        if price is None:
            return None
        return self.cpu * price.cpu_hour + self.gpu * price.gpu_hour


@dataclass(frozen=True)
class CostMark:
    """Whether a backend settings field changes how long a run takes: metadata on the field,
    ``steps: Annotated[int, DRIVES_COST] = ...`` (:data:`DRIVES_COST`, :data:`NO_COST`). Every
    field of a built-in backend's settings model carries one (tests/sweep/test_cost_key.py);
    :func:`cost_settings` puts the fields that drive cost in the cost key."""

    drives: bool


#: a settings field in the cost key: the model and data, the steps, the batch, the lengths,
#: the evaluation, the sampling temperatures, the processes, threads, kernels and devices
DRIVES_COST = CostMark(True)
#: a settings field out of the cost key: cells that differ only there cost the same (the
#: learning rate and its schedule, the seeds, where files go)
NO_COST = CostMark(False)


def drives_cost(field_info: FieldInfo | None) -> bool | None:
    """A pydantic field's :class:`CostMark` (None: unmarked)."""
    marks = [m for m in getattr(field_info, "metadata", ()) if isinstance(m, CostMark)]
    return marks[-1].drives if marks else None


def cost_settings(model: type[BaseModel], settings: Mapping[str, object]) -> dict[str, object]:
    """The part of ``settings`` (a cell's settings, the dump of the pydantic class ``model``) in
    the cost key: each field marked :data:`DRIVES_COST`, and each unmarked one (a plugin's
    settings that say nothing are taken to drive cost: no run is reused for another)."""
    fields = getattr(model, "model_fields", {})
    return {k: v for k, v in settings.items() if drives_cost(fields.get(k)) is not False}


def cost_key(cell: Cell, resources: Resources, settings: Mapping[str, object]) -> str:
    """What makes two runs comparable in cost (16 hex digits): the backend, ``settings`` (the
    cell's settings that drive cost, as its backend marks them: :func:`cost_settings`,
    :meth:`gppo.backends.base.Backend.cost_settings`), its benchmarks, avg@k, whether it scores
    a selection split, and the job's resources. Not the loss, the seed or the learning rate:
    cells that differ only there cost the same. An axis over ``steps`` or the model's size
    changes it."""
    held = [resources.num_cpus, resources.num_gpus, resources.nodes]
    key = [cell.backend, dict(settings), list(cell.benchmarks), cell.eval_k, cell.select, held]
    text = json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def hours_of(resources: Resources, wall_s: float) -> Hours:
    """One run of ``wall_s`` seconds holding ``resources``."""
    h = wall_s / SECONDS_PER_HOUR
    return Hours(resources.num_cpus * h, resources.num_gpus * h, wall_s, 1)


def resource_metrics(resources: Resources) -> dict[str, float]:
    """What the launcher logs into a run when its job is submitted (step 0)."""
    return {
        M.COST_NUM_CPUS: float(resources.num_cpus),
        M.COST_NUM_GPUS: float(resources.num_gpus),
        M.COST_NODES: float(resources.nodes),
    }


def attempt_hours(metrics: Mapping[str, float], seconds: float) -> Hours | None:
    """One attempt of ``seconds`` holding the resources logged at its submission (``metrics``,
    the run's latest values); None when the run has none logged (submitted before cost was
    accounted)."""
    if M.COST_NUM_CPUS not in metrics:
        return None
    held = Resources(metrics[M.COST_NUM_CPUS], metrics.get(M.COST_NUM_GPUS, 0.0))
    return hours_of(held, max(0.0, seconds))


def attempt_cost(metrics: Mapping[str, float], seconds: float) -> dict[str, float]:
    """The run's cost metrics once an attempt of ``seconds`` has ended: :func:`attempt_hours`
    added to what the run's earlier attempts logged (empty: no resources logged)."""
    got = attempt_hours(metrics, seconds)
    if got is None:
        return {}
    return {
        M.COST_WALL_S: metrics.get(M.COST_WALL_S, 0.0) + got.wall_s,
        M.COST_CPU_HOURS: metrics.get(M.COST_CPU_HOURS, 0.0) + got.cpu,
        M.COST_GPU_HOURS: metrics.get(M.COST_GPU_HOURS, 0.0) + got.gpu,
    }


def run_hours(metrics: Mapping[str, float]) -> Hours | None:
    """A run's logged cost (None: it logged none, e.g. still running)."""
    if M.COST_CPU_HOURS not in metrics:
        return None
    return Hours(
        float(metrics[M.COST_CPU_HOURS]),
        float(metrics.get(M.COST_GPU_HOURS, 0.0)),
        float(metrics.get(M.COST_WALL_S, 0.0)),
        1,
    )


def spent(metric_sets: Iterable[Mapping[str, float]]) -> Hours | None:
    """The hours of every run given (their latest metric values), each counted once; None when
    none of them logged a cost (still running, or from before cost was logged)."""
    total, logged = Hours(), False
    for metrics in metric_sets:
        got = run_hours(metrics)
        if got is not None:
            total, logged = total + got, True
    return total if logged else None


def fmt_hours(value: float) -> str:
    """Three significant digits, never an exponent: ``0``, ``0.00412``, ``1.23``, ``123``,
    ``12,345``."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else "—"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:,.{digits}f}"


def hours_text(hours: Hours, price: Price | None = None) -> str:
    """``0.0412 CPU-h, 0 GPU-h`` (``… = 1.23 USD`` with a price)."""
    text = f"{fmt_hours(hours.cpu)} CPU-h, {fmt_hours(hours.gpu)} GPU-h"
    money = hours.money(price)
    return text if money is None or price is None else f"{text} = {money_text(money, price)}"


def money_text(amount: float, price: Price) -> str:
    """``1.23 USD``."""
    return f"{fmt_hours(amount)} {price.currency}"


@dataclass(frozen=True)
class Spent:
    """What a sweep's runs have cost so far (every attempt), and the cells that have a run."""

    hours: Hours
    cells: frozenset[str]
