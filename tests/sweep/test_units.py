"""Small pure pieces of the dispatcher: ids, backoff, params, the one-launcher lock, URIs."""

from __future__ import annotations

import pytest
from filelock import FileLock

from gppo.grid import load_plan
from gppo.ports import free_ports
from gppo.store.tracking import cell_params
from gppo.store.uri import resolve_tracking_uri, state_root
from gppo.sweep.cluster.lock import LaunchBusy
from gppo.sweep.launch import Launcher
from gppo.sweep.running.attempts import backoff
from gppo.sweep.running.dispatcher import submission_id
from gppo.sweep.session import sweep_state_dir

from .conftest import write_spec


def test_submission_ids_are_deterministic_and_safe():
    assert submission_id("q-1a2b3c4d", "kl-atomic-s0", 2) == "gppo-q-1a2b3c4d-kl-atomic-s0-a2"
    assert (
        submission_id("a.b-12345678", "alpha0.5-mc-s0", 1) == "gppo-a_b-12345678-alpha0_5-mc-s0-a1"
    )
    assert submission_id("x", "$(rm -rf /); `id`", 1) == "gppo-x-__rm_-rf______id_-a1"


def test_backoff_is_exponential_and_capped():
    assert [backoff(1.0, 5.0, n) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_tracking_uri_resolution(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_tracking_uri(None) == f"sqlite:///{tmp_path}/mlflow.db"
    assert resolve_tracking_uri("sqlite:///x/m.db") == f"sqlite:///{tmp_path}/x/m.db"
    assert resolve_tracking_uri("http://tracking:5000") == "http://tracking:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////abs/m.db")
    assert resolve_tracking_uri(None) == "sqlite:////abs/m.db"
    assert state_root("sqlite:////abs/m.db").as_posix() == "/abs/.gppo"


def test_cell_params_are_flat(tmp_path):
    plan = load_plan(write_spec(tmp_path, None, name="params"))
    p = cell_params(plan.cell("kl-mc-s0"))
    assert p["method"] == "gppo" and p["divergence"] == "kl" and p["estimator"] == "mc"
    assert p["loss.ratio_bounds"] == "[0.5, 10.0]" and p["probe.steps"] == "2"
    assert p["resources.num_cpus"] == "0.5" and p["seed"] == "0"


def test_one_launcher_per_sweep(tmp_path):
    plan = load_plan(write_spec(tmp_path, "http://127.0.0.1:1", name="busy"))
    state = sweep_state_dir(plan)
    state.mkdir(parents=True)
    with FileLock(str(state / "launch.lock")), pytest.raises(LaunchBusy, match="another launcher"):
        Launcher(plan).run()
    assert not (tmp_path / "mlflow.db").exists()  # refused before touching the store


def test_driver_backends_submit_their_entrypoint_without_gpus():
    """verl's entrypoint starts its own GPU actors: holding the cell's GPUs would deadlock it."""
    from helpers import make_cell

    from gppo.backends.base import Job
    from gppo.cell import Resources
    from gppo.sweep.running.dispatcher import entrypoint_resources

    res = Resources(num_cpus=4, num_gpus=8, memory_gb=64)
    verl_cell = make_cell("kl", "atomic", delta=0.2, backend="verl", resources=res)
    job = Job(argv=("python", "-c", "pass"), resources=res)
    assert entrypoint_resources(verl_cell, job) == {
        "entrypoint_num_cpus": 1.0,
        "entrypoint_num_gpus": 0,
    }
    local_cell = make_cell("tv", "mc", delta=0.2, backend="local", resources=res)
    assert entrypoint_resources(local_cell, job) == {
        "entrypoint_num_cpus": 4,
        "entrypoint_num_gpus": 8,
        "entrypoint_memory": 64 * 2**30,
    }


def test_transient_store_errors_are_retried_and_others_are_not():
    from gppo.store.tracking import retry_locked

    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError(
                "(sqlite3.IntegrityError) UNIQUE constraint failed: tags.key, tags.run_uuid"
            )
        return "ok"

    assert retry_locked(flaky, base_s=0.001) == "ok" and len(calls) == 3

    def broken():
        calls.append(1)
        raise RuntimeError("UNIQUE constraint failed: params.key")  # a real conflict: no retry

    calls.clear()
    with pytest.raises(RuntimeError, match="params"):
        retry_locked(broken, base_s=0.001)
    assert len(calls) == 1


def test_a_failure_line_names_the_error_not_the_last_warning():
    from gppo.sweep.running.attempts import first_line_of_failure

    tail = "job FAILED\nTraceback (most recent call last):\nRuntimeError: engine died\nW1202 shutdown warning"
    assert first_line_of_failure(tail) == "job FAILED: RuntimeError: engine died"
    assert first_line_of_failure("job FAILED\nplain\nlast") == "job FAILED: last"
    assert first_line_of_failure("stalled: no new step") == "stalled: no new step"
    assert first_line_of_failure("") == ""


def test_one_outage_clock_reports_each_outage_once_and_expires_at_its_limit():
    from gppo.sweep.running.outage import OutageClock

    now, seen = [100.0], []
    clock = OutageClock(
        "tracking", "http://t:5000", 30.0, lambda kind, c: seen.append((kind, c.error, c.last_down_s)),
        clock=lambda: now[0],
    )  # fmt: skip
    clock.answered()
    assert seen == [] and not clock.down
    clock.failed("[Errno 111] Connection refused")
    now[0] += 29.0
    clock.failed("timed out")  # the same outage: no second event
    assert seen == [("outage", "[Errno 111] Connection refused", 0.0)] and not clock.expired()
    now[0] += 1.0
    assert clock.expired() and clock.error == "timed out"
    now[0] += 5.0
    clock.answered()
    assert seen[-1] == ("recovered", "timed out", 35.0) and not clock.down and not clock.expired()


def test_a_refusal_for_the_clusters_state_is_told_apart_from_a_refusal_of_the_job():
    """Ray's "try again later", a 5xx or no answer: the cluster's state (ClusterNotReady, an
    OSError: the cell waits, no attempt spent); a 4xx (a bad runtime env): the job's."""
    from gppo.sweep.running.dispatcher import _NOT_READY

    busy = (
        "Request failed with status code 500: No available agent to submit job, please try "
        "again later."
    )
    assert _NOT_READY.search(busy)
    assert _NOT_READY.search("Request failed with status code 503: Service Unavailable.")
    assert not _NOT_READY.search("Request failed with status code 400: runtime_env is invalid.")
    assert not _NOT_READY.search("Request failed with status code 404: Not Found.")


def test_free_ports_never_repeat_a_port():
    """Ray refuses to start when two components get one port (a CI run saw gcs_server and
    dashboard_agent_http both on 45491): ports handed out together must all differ. Picked one
    socket at a time, 300 ports out of ~28k ephemeral ones repeat with probability ~0.8."""
    ports = free_ports(300)
    assert len(set(ports)) == len(ports)
    assert all(1024 < p < 65536 for p in ports)


@pytest.mark.slow  # starts processes
def test_processes_opening_a_fresh_store_at_once_all_get_it(tmp_path):
    """Several processes open one new SQLite store at the same moment (a launcher, a script
    polling it, the UI): MLflow's schema creation races ("table ... already exists"); every one
    of them must get a working store, none an error."""
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    code = (
        "import sys, time; from gppo.store.tracking import Tracking; "
        "t0 = float(sys.argv[2]); time.sleep(max(0.0, t0 - time.time())); "
        "t = Tracking(sys.argv[1]); t.init_store(); print(t.experiment_id('race'))"
    )
    import time

    start = time.time() + 3.0  # every process imports first, then all open the store at once
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, uri, str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert len({out.strip() for out, _ in outs}) == 1  # one experiment, the same id for all


def test_every_event_reads_as_one_line():
    from gppo.sweep.running.attempts import Event

    kinds = ["submitted", "attached", "running", "step", "finished", "failed", "retrying"]
    for kind in [*kinds, "stalled", "stopped"]:
        text = Event(
            kind, "tv-mc-s0", 2, job="sid", step=3, score=0.5, reason="why", note="n"
        ).text()
        assert text.startswith(kind) and "tv-mc-s0" in text and "\n" not in text, text
    for service in ("cluster", "tracking"):
        for kind in ("outage", "recovered"):
            ev = Event(kind, service=service, where="http://x:1", reason="refused", limit_s=9)
            assert ev.text().startswith(kind) and "http://x:1" in ev.text(), ev.text()
