"""verl's metric names -> our shared names (:mod:`gppo.metrics`), mirrored into the same MLflow run.

verl logs validation as ``val-core/<data_source>/acc/mean@k``, which its MLflow adapter stores as
``val-core/<data_source>/acc/mean_at_k`` (``@`` -> ``_at_``), at step 0 (the base model, with
``trainer.val_before_train``), every ``test_freq`` steps and at the last step. Training metrics
are logged per step under verl's names. :func:`mapped_points` turns a run's verl history into
the points our readers expect:

* ``eval/<benchmark>/avg_at_k`` (same step) and ``eval/avg_at_k`` (mean over the cell's
  benchmarks, at steps where all of them were evaluated); step 0 (the base model) also as
  ``eval_base/<benchmark>/avg_at_k`` (the backend protocol, :mod:`gppo.backends.cell_run`);
* ``train/score`` <- ``critic/score/mean``, ``train/entropy`` <- ``actor/entropy``,
  ``train/policy_loss`` <- ``actor/pg_loss``, ``train/wall_time_s`` <- running sum of
  ``timing_s/step``, ``train/approx_kl`` <- ``actor/approx_kl`` (GPPO) or ``actor/ppo_kl``
  (verl's baselines), and every GPPO loss diagnostic ``actor/<key>`` -> ``train/<key>``.

:func:`mirror_run` logs the points that are not in the run yet (idempotent: a retried attempt
that resumes the same run logs only what is new). Pure except for the MLflow client calls.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gppo import metrics as m
from gppo.store.tracking import log_points

#: verl metric as stored by its MLflow adapter -> (benchmark, k).
_VAL_CORE = re.compile(r"^val-core/(?P<bench>[^/]+)/(?P<var>acc|reward)/mean_at_(?P<k>\d+)$")

#: Direct renames: our name -> verl names in order of preference (first present wins per step).
TRAIN_RENAMES: dict[str, tuple[str, ...]] = {
    m.TRAIN_SCORE: ("critic/score/mean",),
    m.ENTROPY: ("actor/entropy",),
    m.POLICY_LOSS: ("actor/pg_loss",),
    m.APPROX_KL: ("actor/approx_kl", "actor/ppo_kl"),
}
#: Loss diagnostics our plugin returns as ``actor/<key>`` (the objectives library's keys).
DIAGNOSTIC_KEYS: tuple[str, ...] = (
    "clip_frac_low",
    "clip_frac_high",
    "ratio_mean",
    "ratio_max",
    "abs_log_ratio",
    "bound_active_frac",
    "dual_clip_frac",
    *(f"clip_frac{side}/{b}" for b, _, _ in m.MU_BUCKETS for side in ("", "_low", "_high")),
)
STEP_TIME = "timing_s/step"

History = Mapping[str, Sequence[tuple[int, float]]]  # key -> [(step, value), ...]


@dataclass(frozen=True)
class Point:
    key: str
    step: int
    value: float


def eval_name(verl_key: str) -> tuple[str, int] | None:
    """``val-core/aime24/acc/mean_at_8`` -> ``("aime24", 8)``; ``None`` for other keys.

    ``acc`` is preferred; ``reward`` is what verl logs when a scorer returns no ``acc``.
    """
    match = _VAL_CORE.match(verl_key)
    if match is None:
        return None
    return match["bench"], int(match["k"])


def mapped_points(
    history: History, benchmarks: Sequence[str], k: int, verl_scores: bool = True
) -> list[Point]:
    """Our points for a run whose verl metrics are ``history`` (``key -> [(step, value)]``).

    ``verl_scores=False`` (a ``verl.testbed`` cell, scored by the testbed's own evaluator:
    :mod:`.yardstick`): verl's validation goes to ``verl_val/<benchmark>/mean_at_k`` instead of
    ``eval/…``, and no domain mean is formed from it.
    """
    out: list[Point] = []
    # --- evaluations -------------------------------------------------------------------------
    per_bench: dict[str, dict[int, float]] = {}
    for key in sorted(history, key=lambda key: "/acc/" not in key):  # acc before reward
        parsed = eval_name(key)
        if parsed is None or parsed[1] != k:
            continue
        steps = per_bench.setdefault(parsed[0], {})
        for step, value in history[key]:
            steps.setdefault(int(step), float(value))
    name = m.eval_metric if verl_scores else m.verl_val_metric
    for bench, steps in sorted(per_bench.items()):
        out.extend(Point(name(bench, k), s, v) for s, v in sorted(steps.items()))
        if verl_scores and 0 in steps:  # the base model (verl's val_before_train), by its own name
            out.append(Point(m.eval_base_metric(bench, k), 0, steps[0]))
    wanted = list(benchmarks) or sorted(per_bench)
    if verl_scores and wanted and all(b in per_bench for b in wanted):
        common = set.intersection(*(set(per_bench[b]) for b in wanted))
        for step in sorted(common):
            mean = sum(per_bench[b][step] for b in wanted) / len(wanted)
            out.append(Point(m.eval_domain_metric(k), step, mean))
    # --- training ----------------------------------------------------------------------------
    for ours, sources in TRAIN_RENAMES.items():
        taken: dict[int, float] = {}
        for source in sources:
            for step, value in history.get(source, ()):
                taken.setdefault(int(step), float(value))
        out.extend(Point(ours, s, v) for s, v in sorted(taken.items()))
    for key in DIAGNOSTIC_KEYS:
        for step, value in history.get(f"actor/{key}", ()):
            out.append(Point(m.train_metric(key), int(step), float(value)))
    total = 0.0
    for step, value in sorted(history.get(STEP_TIME, ())):
        total += float(value)
        out.append(Point(m.WALL_TIME, int(step), total))
    return out


def source_keys(all_keys: Iterable[str]) -> list[str]:
    """The verl keys of a run that :func:`mapped_points` reads."""
    wanted = {s for sources in TRAIN_RENAMES.values() for s in sources}
    wanted |= {f"actor/{key}" for key in DIAGNOSTIC_KEYS} | {STEP_TIME}
    return sorted(key for key in all_keys if key in wanted or eval_name(key) is not None)


def read_history(client, run_id: str, keys: Iterable[str]) -> dict[str, list[tuple[int, float]]]:
    """``key -> [(step, value)]`` from MLflow for the given keys."""
    return {
        key: [(metric.step, metric.value) for metric in client.get_metric_history(run_id, key)]
        for key in keys
    }


def mirror_run(
    client, run_id: str, benchmarks: Sequence[str], k: int, verl_scores: bool = True
) -> list[Point]:
    """Log our names for every verl metric of ``run_id`` not mirrored yet; returns what it logged
    (``verl_scores``: see :func:`mapped_points`)."""
    keys = list(client.get_run(run_id).data.metrics)
    history = read_history(client, run_id, source_keys(keys))
    points = mapped_points(history, benchmarks, k, verl_scores)
    ours = {p.key for p in points}
    done = {
        (key, step)
        for key, items in read_history(client, run_id, ours & set(keys)).items()
        for step, _ in items
    }
    new = [p for p in points if (p.key, p.step) not in done]
    log_points(client, run_id, ((p.key, p.value, p.step) for p in new))
    return new
