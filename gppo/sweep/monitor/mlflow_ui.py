"""``gppo-sweep ui``: where the MLflow UI shows a sweep, and a server whose ``/`` goes there.

MLflow 3.17's UI decides between its GenAI pages (traces overview, assistant) and its model
training pages (runs table) from the ``workflowType`` URL parameter, else the browser's saved
choice, else GenAI: the experiment tag ``mlflow.experimentKind`` alone does not switch it. So the
URLs built here carry ``workflowType=machine_learning``, and :mod:`gppo.sweep.monitor.mlflow_ui_app` (an
``mlflow.app`` plugin, ``mlflow server --app-name gppo-sweep``) sends a browser that opens ``/`` on to the
sweep's runs (``GPPO_UI_HOME``), so it lands on the cells, not on the GenAI welcome page. Every other request goes to MLflow's own app unchanged.

URL parameters used (MLflow 3.17's experiment page and compare page): ``searchFilter``,
``orderByKey``, ``orderByAsc``; ``#/compare-runs?runs=[...]&experiments=[...]``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from gppo import metrics as M
from gppo.cell import DEFAULT_EVAL_K
from gppo.store.tracking import sweep_filter

if TYPE_CHECKING:
    import subprocess

    from gppo.grid.load import Plan
    from gppo.store.tracking import Tracking

ENV_HOME = "GPPO_UI_HOME"
#: MLflow's switch for its server-side job runner (``ui`` turns it off unless the env sets it)
JOB_EXECUTION = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"
#: seconds the server's process group gets to exit on SIGTERM before SIGKILL (MLflow 3.17's
#: ``mlflow server`` takes ~15 s on a busy machine to stop its job runner; uvicorn ~1 s)
GRACE_S = 5.0
#: seconds ``serve`` waits for the server to answer before it announces the URLs anyway
READY_TIMEOUT_S = 120.0
WORKFLOW = {"workflowType": "machine_learning"}


def runs_url(
    base: str, experiment_id: str, sweep_id: str | None = None, k: int = DEFAULT_EVAL_K
) -> str:
    """The experiment's runs table: the sweep's cells only, best avg@k first."""
    params = dict(WORKFLOW)
    if sweep_id:
        params["searchFilter"] = sweep_filter(sweep_id)
        params["orderByKey"] = f"metrics.`{M.eval_domain_metric(k)}`"
        params["orderByAsc"] = "false"
    query = urlencode(params, quote_via=quote)
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    """One run's page."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?" + urlencode(WORKFLOW)


def compare_url(base: str, experiment_id: str, run_ids: Sequence[str]) -> str | None:
    """MLflow's compare view of the given runs (parameters and metrics side by side)."""
    if not run_ids:
        return None
    query = urlencode(
        {
            "runs": json.dumps(list(run_ids), separators=(",", ":")),
            "experiments": json.dumps([experiment_id]),
            **WORKFLOW,
        },
        quote_via=quote,
    )
    return f"{base.rstrip('/')}/#/compare-runs?{query}"


def latest_cell_runs(tracking: Tracking, experiment_id: str, sweep_id: str) -> list[str]:
    """The run id of each cell's latest attempt, in cell order."""
    groups = tracking.cell_runs(experiment_id, sweep_id)
    return [runs[-1].info.run_id for _, runs in sorted(groups.items()) if runs]


def sweep_urls(plan: Plan, base: str) -> dict[str, str]:
    """``runs`` (the sweep's cells in the runs table), ``compare`` (MLflow's compare view of the
    cells' latest runs, once there are runs) and ``home`` (``runs`` relative to the server, what
    ``/`` redirects to); ``{}`` before the sweep's experiment exists."""
    from gppo.sweep.session import read_sweep

    found = read_sweep(plan)
    if found is None:
        return {}
    tracking, exp = found
    out = {"runs": runs_url(base, exp, plan.sweep_id, plan.spec.eval.k)}
    out["home"] = "/?gppo-sweep" + out["runs"].removeprefix(base.rstrip("/") + "/")
    compare = compare_url(base, exp, latest_cell_runs(tracking, exp, plan.sweep_id))
    if compare:
        out["compare"] = compare
    return out


def wait_and_open(url: str, health: str, timeout_s: float = 120.0) -> None:
    """Open ``url`` in the browser once ``health`` answers (for ``ui --open``; run as a child)."""
    import time
    import webbrowser

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if answers(health, timeout=2):
            webbrowser.open(url)
            return
        time.sleep(0.5)


def answers(url: str, timeout: float = 1.0) -> bool:
    """True when a GET of ``url`` answers 200."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except (OSError, ValueError):
        return False


def serve(
    argv: list[str],
    env: dict[str, str],
    helpers: Sequence[subprocess.Popen[bytes]] = (),
    *,
    ready_url: str | None = None,
    on_ready: Callable[[], None] | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> int:
    """Run the server ``argv`` in its own process group until it exits or this process gets
    SIGTERM / SIGINT / SIGHUP; then stop the whole group (the server and the workers it spawned,
    SIGKILL after :data:`GRACE_S`) and the ``helpers`` (Popen objects), so nothing keeps the port.
    The server's stdout goes to this process's stderr.

    ``on_ready`` (printing the URLs) is called once ``ready_url`` (the server's ``/health``)
    answers, so a URL printed is a URL that opens; after ``ready_timeout_s`` without an answer it
    is called anyway, with a line on stderr saying so.

    The signal handler only records the signal and sends SIGTERM; the main loop polls (a
    ``wait`` inside the handler would deadlock on the interrupted ``wait``'s lock)."""
    import signal
    import subprocess
    import time

    try:  # the server's own output goes to stderr: stdout is for the lines ``on_ready`` prints
        out: Any = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        out = None
    proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=out)
    started = time.monotonic()
    pending = on_ready
    got: list[tuple[int, float]] = []

    def group(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def on_signal(signum: int, _frame: Any = None) -> None:
        if not got:
            got.append((signum, time.monotonic()))
            group(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    killed = False
    while proc.poll() is None:
        if pending is not None and not got:
            up = ready_url is None or answers(ready_url)
            if up or time.monotonic() - started > ready_timeout_s:
                if not up:
                    sys.stderr.write(
                        f"the server did not answer {ready_url} within {ready_timeout_s:.0f} s; "
                        "its URLs may not open yet\n"
                    )
                pending()
                sys.stdout.flush()
                pending = None
                continue
        time.sleep(0.2)
        if got and not killed and time.monotonic() - got[0][1] > GRACE_S:
            group(signal.SIGKILL)
            killed = True
    group(signal.SIGTERM if not killed else signal.SIGKILL)  # workers left behind
    for helper in helpers:
        if helper.poll() is None:
            helper.kill()
    if pending is not None and not got:
        sys.stderr.write(f"the server exited (status {proc.returncode}) before it answered\n")
    if got:
        # exit now: a normal interpreter exit may wait on MLflow's client threads
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + got[0][0])
    return proc.returncode
