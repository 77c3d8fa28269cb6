"""A follower's run: the MLflow record of a cell served by an identical cell's run
(:mod:`gppo.grid.sharing`).

A follower trains nothing. Once its lead's run has finished, the launcher records it as a cell
run of its own, so that every reader (``status``, the reports, the tidy CSV, the MLflow UI)
finds one run per cell as for any other: the follower's own tags, params and config hash, the
source run's metrics copied step by step (every history: the UI's curves and the figures read
them), ``gppo.finished``, and two tags naming the source: :data:`~gppo.metrics.TAG_SAME_RUNS`
(its run id) and :data:`~gppo.metrics.TAG_SAME_CELL` (its cell id). Its Ray job tag is the
source's (``logs`` shows the job that trained it). Readers that add up what runs held (cost)
count runs with :data:`~gppo.metrics.TAG_SAME_RUNS` as their source, once.

The copy is whole or absent: the run is created with the tag :data:`~gppo.metrics.TAG_COPYING`,
which its last write removes (after the metrics and ``gppo.finished``, before it is ended
FINISHED). A launcher killed mid-copy leaves a run that still has the tag; the next launch deletes
it before it reads the sweep's runs (:func:`drop_partial_copies`) and copies again, so the
follower is never taken for an interrupted job of its lead's.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from gppo import metrics as M
from gppo.cell import Cell
from gppo.store.tracking import Tracking, retry_locked, sweep_filter

if TYPE_CHECKING:
    from mlflow.entities import Run

#: metrics per ``log_batch`` call (MLflow's limit is 1000)
BATCH = 1000


def source_of(run: Run) -> str:
    """The run whose training a cell run's results are: itself, or a follower's source."""
    return run.data.tags.get(M.TAG_SAME_RUNS) or run.info.run_id


def record_same_runs(
    tracking: Tracking,
    experiment_id: str,
    parent_run_id: str,
    sweep_id: str,
    cell: Cell,
    source_run_id: str,
    *,
    attempt: int,
    run_key: str,
) -> str:
    """Record ``cell`` as served by the finished run ``source_run_id``: a new FINISHED cell run
    with the source's metric histories (see the module docstring); returns its id."""
    from mlflow.entities import Metric

    source = tracking.get_run(source_run_id)
    src_tags = source.data.tags
    run_id = tracking.create_cell_run(
        experiment_id,
        parent_run_id,
        sweep_id,
        cell,
        attempt=attempt,
        submission_id=src_tags.get(M.TAG_RAY_JOB_ID, ""),
        extra_tags={
            M.TAG_RUN_KEY: run_key,
            M.TAG_SAME_RUNS: source_run_id,
            M.TAG_SAME_CELL: src_tags.get(M.TAG_CELL_ID, ""),
            M.TAG_COPYING: "true",  # until the last write: whole or absent
        },
    )
    client = tracking.client
    history: list[Any] = []
    for key in source.data.metrics:
        got = retry_locked(partial(client.get_metric_history, source_run_id, key))
        history.extend(Metric(key, m.value, m.timestamp, m.step) for m in got)
    for i in range(0, len(history), BATCH):
        retry_locked(partial(client.log_batch, run_id, metrics=history[i : i + BATCH]))
    tracking.set_tags(run_id, {M.TAG_FINISHED: "true"})
    retry_locked(partial(client.delete_tag, run_id, M.TAG_COPYING))  # the copy is whole
    tracking.terminate(run_id, "FINISHED")
    return run_id


def drop_partial_copies(tracking: Tracking, experiment_id: str, sweep_id: str) -> list[str]:
    """Delete the sweep's follower runs whose copy was cut off (tag :data:`~gppo.metrics.
    TAG_COPYING` still on them: the launcher that wrote them was killed mid-copy); their ids.
    A launch calls it before it reads the sweep's runs: the follower is then absent, and it is
    recorded again from its lead's finished run."""
    runs = tracking.search(
        experiment_id, f"{sweep_filter(sweep_id)} AND tags.`{M.TAG_COPYING}` = 'true'"
    )
    for run in runs:
        retry_locked(partial(tracking.client.delete_run, run.info.run_id))
    return [run.info.run_id for run in runs]
