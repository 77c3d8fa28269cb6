"""Dispatch: every cell of a sweep as one Ray job logging into its own MLflow run.

The folders, by concern: the launch itself (:mod:`.launch`, :mod:`.session` the resume rules,
:mod:`.result`, :mod:`.signals`, :mod:`.quiet`); ``running/``, an attempt's life (dispatcher,
attempt driver, the adaptive seeds' gate, identical cells run once, outage clocks and the
services' watch); ``cluster/``, the Ray cluster and who holds the sweep (attach or start a head,
Ray's HTTP API, the launch lock and its lease, the owner record, the store-reachability guard);
``monitor/``, what the user watches (``status``/``logs``/``cancel``, the terminal's live table,
the launch log, the MLflow UI server); ``planning/``, what a sweep will cost (the forecast,
``plan``'s summary, the budget the launcher keeps); ``tuning/``, Optuna on the same parts.

``import gppo.sweep`` imports nothing heavy: Ray and MLflow load only when a module below is used
(``from gppo.sweep import Launcher`` imports :mod:`.launch` on first use). The library API (what
``gppo-sweep launch`` and the tuner use):

Cluster (:mod:`gppo.sweep.cluster.connect`)
    ``ensure_cluster(address, state_dir, start=True) -> Cluster | None``: ``address`` or
    ``RAY_ADDRESS`` -> that cluster's Jobs API; else the local head recorded in
    ``state_dir/cluster.json`` if alive; else (``start``) a new detached local head on
    127.0.0.1 with free ports. ``Cluster.client()`` -> ``JobSubmissionClient``.
    ``stop_local_head(state_dir)`` stops only the head this package started there.

The store (:mod:`gppo.store`)
    Every MLflow read and write (URI, parent run, cell runs, tags, params, retries) lives in
    :mod:`gppo.store`, one layer below; the sweep, the tuner, the backends' entrypoints and the
    reports all use it.

Dispatcher (:mod:`gppo.sweep.running.dispatcher`)
    ``Dispatcher(cluster, tracking, experiment_id=, parent_run_id=, sweep_id=, kill_grace_s=)``;
    ``.submit(cell, job, attempt=, run_id=None, role=, extra_tags=) -> Attempt`` creates the
    attempt's child run (tags of :mod:`gppo.metrics`, params = the cell's settings) THEN submits
    the Ray job with submission id ``gppo-<sweep>-<cell>-a<attempt>`` (sanitised), env
    ``MLFLOW_TRACKING_URI``/``MLFLOW_RUN_ID`` and ``GPPO_ATTEMPT`` (the submission id, naming
    every process of the attempt: :mod:`gppo.processes`), entrypoint ``job.entrypoint`` (shlex-quoted argv)
    and the cell's resources as entrypoint resources; ``.status(sid)`` (None if unknown;
    ``.statuses(sids)``: all of a round's jobs in one request); ``.stop(sid)`` stops the job
    and ends its processes on this machine (``.end_processes(sid)``: SIGTERM, ``kill_grace_s``,
    SIGKILL, checked gone); ``.logs(sid)`` / ``.logs_tail(sid)``; ``.finish(attempt, status) ->
    State`` (``State.DONE``, ``State.FAILED`` or ``State.STOPPED``) ends the attempt's
    processes, then its run;
    ``.attach(cell, run)`` rebuilds an :class:`Attempt` from a run's tags (re-attach).

Attempts (:mod:`gppo.sweep.running.attempts`)
    ``AttemptDriver(dispatcher, limits, ...)``: submit, one status round, stall limits, end,
    retry with exponential backoff, each change an ``Event`` (submitted, running, step,
    finished, failed, retrying, stalled, killed, ended, stopped, outage, recovered); the
    launcher and the tuner
    both drive it. The driver runs only the cluster's :class:`~gppo.sweep.running.outage.OutageClock`
    (its status rounds and submissions); the tracking server's clock is the owner's
    (:class:`~gppo.sweep.running.service_watch.Watch` holds both).

Launch (:mod:`gppo.sweep.launch`)
    ``Launcher(plan, address=, max_concurrent=, detach=, poll_s=1.0, on_update=, on_event=,
    stop_event=).run() -> LaunchResult``: reconcile with the store and the cluster (resume rules
    in :mod:`gppo.sweep.session`), gate concurrency, drive the cells' attempts, Ctrl-C/SIGTERM
    stops jobs (or leaves them with ``detach``), then its ``after_sweep`` hook (the CLI passes
    :func:`gppo.analysis.report_writer.after_sweep`).
    :func:`gppo.sweep.session.open_session` bundles store + experiment + parent run + cluster
    (the tuner opens its study's session with it); ``open_sweep`` adds the plan.

Owner (:mod:`gppo.sweep.cluster.owner`): who drives a sweep or a study (host, pid, start time), read by
the lock (:mod:`gppo.sweep.cluster.lock`) and the tuner's crash recovery.

Status, logs, cancel (:mod:`gppo.sweep.monitor.commands`): ``sweep_status``, ``cell_logs``, ``cancel``.

What outlives the launcher: with no address, the local Ray head (a detached ``ray start --head
--block`` process whose address and pid are in ``.gppo/<sweep>/cluster.json`` next to the store)
and its running jobs. The head is stopped when a launch ends with no job left running, or by
``gppo-sweep cancel SPEC``; a ``--detach``ed or killed launcher leaves it for the next launch,
``status``, ``logs`` and ``cancel``. Job logs stay readable after the head stops (its temp dir
is recorded in ``.gppo/<sweep>/last_cluster.json``).
"""

from gppo.registry import lazy_exports

#: the Python API, imported on first use (``from gppo.sweep import Launcher``)
_EXPORTS = {
    "Launcher": "launch",
    "LaunchResult": "result",
    "CellState": "running.attempts",
    "ensure_cluster": "cluster.connect",
    "stop_local_head": "cluster.connect",
    "sweep_status": "monitor.commands",
    "cancel": "monitor.commands",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
