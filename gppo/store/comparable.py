"""Finished runs in the store that are comparable in cost to new ones, and what a sweep has spent.

Read only: a store that does not exist is never created (the caller checks first). Two runs are
comparable when their :func:`gppo.store.cost.cost_key` (tag ``gppo.cost_key``, written at
submission) is equal; their logged ``cost/wall_s`` is what a new run with that key is forecast
from (:mod:`gppo.sweep.planning.forecast`).
"""

from __future__ import annotations

from collections.abc import Iterable

from mlflow import MlflowClient

from gppo import metrics as M
from gppo.store.cost import Hours, Spent, run_hours
from gppo.store.follower import costs_nothing
from gppo.store.records import active_experiment_ids, fetch_records, no_gc

#: comparable runs read per key (the latest finished ones)
SAMPLE = 200


def comparable_walls(uri: str, keys: Iterable[str], sample: int = SAMPLE) -> dict[str, list[float]]:
    """Per cost key, the wall seconds (``cost/wall_s``) of the latest ``sample`` finished runs
    with that key, in any experiment of the store at ``uri`` (keys without any: left out)."""
    client = MlflowClient(tracking_uri=uri)
    experiments = active_experiment_ids(client)
    out: dict[str, list[float]] = {}
    if not experiments:
        return out
    with no_gc():
        for key in sorted(set(keys)):
            runs = client.search_runs(
                experiments,
                f"tags.`{M.TAG_COST_KEY}` = '{key}' AND attributes.status = 'FINISHED'",
                max_results=sample,
                order_by=["attributes.start_time DESC"],
            )
            walls = [
                float(r.data.metrics[M.COST_WALL_S])
                for r in runs
                if M.COST_WALL_S in r.data.metrics and not costs_nothing(r.data.tags)
            ]
            if walls:
                out[key] = walls
    return out


def sweep_spent(uri: str, sweep_id: str, experiment_id: str | None = None) -> Spent:
    """The hours of every run of the sweep (all attempts; a run that copies another's results,
    tag ``gppo.same_runs``, cost nothing) and the cell ids that have a run of their own."""
    client = MlflowClient(tracking_uri=uri)
    records = fetch_records(client, sweep_id, experiment_id=experiment_id)
    total, cells = Hours(), set()
    for run in records:
        if costs_nothing(run.tags):  # a copy of its source's results: no run of its own
            continue
        cells.add(run.tags.get(M.TAG_CELL_ID) or run.run_id)
        hours = run_hours(run.metrics)
        if hours is not None:
            total += hours
    return Spent(total, frozenset(cells))
