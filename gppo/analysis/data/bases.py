"""The base model's rows of the tidy table (gppo/analysis/data/tidy.py): each axis point's own base.

Every cell run logs the base model's step-0 evaluation under ``eval_base/...`` (the backend
protocol, :mod:`gppo.backends.cell_run`): the model the run started from, scored as the run
scores. An axis may move that model (``local.warmstart_target``, a model path, ``eval.k``) or not
(``calibration.r_min``, ``local.lr``), so a base row is taken at each axis point from the runs
that stand at that point, never from another point's:

- at a point, per (domain, seed), the base comes from a run standing there: the reference
  cell's first, then the run moved by the most axes (a run an axis does not move stands at every
  point of it), then by cell label; no such run with a base: one row without a score,
  ``running`` while a run there is, else ``pending`` (Table 1: a dash and a footnote);
- an axis moves the base unless two points that differ only in it were compared (both with a
  base, for some domain and seed) and every such pair gave the same scores. The base rows carry
  the values of the axes that move it and None (stands at every point, as a run the axis does
  not move) for the others, so a sweep over ``r_min`` still has one base row per (domain, seed).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gppo.analysis.data.tidy import BASE
from gppo.store.state import State


@dataclass(frozen=True)
class BaseSource:
    """One run as a possible source of the base row: where it stands and its ``eval_base``
    scores (benchmark -> avg@k in [0, 1]; empty when it logged none)."""

    domain: str
    seed: int
    label: str  # the run's cell label (tv/mc, gspo)
    point: Mapping[str, object]  # the axes that move the run -> their value there
    status: str
    run_id: str
    scores: Mapping[str, float] = field(default_factory=dict)

    def stands_at(self, point: Mapping[str, object]) -> bool:
        return all(point.get(a) == v for a, v in self.point.items())


def axis_points(values: Mapping[str, Sequence[object]]) -> list[dict[str, object]]:
    """Every point of the axes' ``values`` (the first axis slowest); ``[{}]`` without axes."""
    return [dict(zip(values, combo, strict=True)) for combo in itertools.product(*values.values())]


def base_rows(
    sources: Sequence[BaseSource],
    axes: Mapping[str, Sequence[object]],
    reference: str,
) -> list[dict[str, object]]:
    """The tidy rows of the base model (see the module docstring) from ``sources`` (every run
    of the sweep), ``axes`` (each axis column's values) and the ``reference`` cell's label."""
    points = axis_points(axes)
    by_pair: dict[tuple[str, int], list[BaseSource]] = {}
    for source in sources:
        by_pair.setdefault((source.domain, source.seed), []).append(source)
    chosen: dict[tuple[str, int, int], BaseSource | None] = {}
    running: dict[tuple[str, int, int], bool] = {}
    for (domain, seed), mine in sorted(by_pair.items()):
        for i, point in enumerate(points):
            here = [s for s in mine if s.stands_at(point)]
            scored = [s for s in here if s.scores]
            chosen[domain, seed, i] = min(
                scored,
                key=lambda s: (s.label != reference, -len(s.point), s.label, s.run_id),
                default=None,
            )
            running[domain, seed, i] = any(s.status == State.RUNNING.value for s in here)
    moving = [a for a in axes if _moves(a, list(axes), points, chosen)]
    groups: dict[tuple[str, int, tuple], list[int]] = {}
    for domain, seed, i in chosen:
        key = tuple(points[i][a] for a in moving)
        groups.setdefault((domain, seed, key), []).append(i)
    rows: list[dict[str, object]] = []
    for (domain, seed, key), members in groups.items():
        where = {a: None for a in axes} | dict(zip(moving, key, strict=True))
        src = next((c for i in members if (c := chosen[domain, seed, i]) is not None), None)
        if src is None:
            busy = any(running[domain, seed, i] for i in members)
            status = State.RUNNING.value if busy else State.PENDING.value
            rows.append(
                {"domain": domain, "cell": BASE, "seed": seed, "status": status, "benchmark": "",
                 **where}
            )  # fmt: skip
            continue
        rows.extend(
            {
                "domain": domain,
                "cell": BASE,
                "seed": seed,
                "benchmark": b,
                "score": s,
                "status": State.DONE.value,
                "steps": 0.0,
                "run_id": src.run_id,
                **where,
            }
            for b, s in src.scores.items()
        )
    return rows


def _moves(
    axis: str,
    axes: list[str],
    points: list[dict[str, object]],
    chosen: Mapping[tuple[str, int, int], BaseSource | None],
) -> bool:
    """Whether ``axis`` moves the base (the module docstring's rule)."""
    others: dict[tuple, list[int]] = {}
    for i, point in enumerate(points):
        others.setdefault(tuple(point[a] for a in axes if a != axis), []).append(i)
    pairs = {(d, s) for d, s, _ in chosen}
    compared = False
    for members in others.values():
        for domain, seed in pairs:
            found = [c.scores for i in members if (c := chosen.get((domain, seed, i)))]
            if len(found) < 2:
                continue
            compared = True
            if any(dict(f) != dict(found[0]) for f in found[1:]):
                return True
    return not compared
