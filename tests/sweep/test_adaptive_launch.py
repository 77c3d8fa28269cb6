"""Adaptive seeds on a real local Ray head and a SQLite store (issue 48): the launcher runs the
rounds the rule asks for and no more, and a kill -9 of the launcher mid-round loses no round and
runs no seed twice.

The probe cells' final avg@k is ``score`` + ``score_sd`` x a draw fixed by the cell id, so the
rows' data, and with them the rounds, are known in advance: tv/mc (the reference) and
hellinger/mc at 50 points, kl/mc at 10, each with a seed sd of 1 point."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.grid import load_plan
from gppo.stats.rounds import Rounds
from gppo.store.run_score import run_score
from gppo.sweep.launch import Launcher
from gppo.sweep.monitor.commands import sweep_status

from .conftest import env_without_ray, launcher_cmd, wait_for, write_spec

pytestmark = pytest.mark.slow  # every test here starts Ray or a launcher


def adaptive_spec(tmp_path: Path, address: str, name: str, **probe) -> Path:
    return write_spec(
        tmp_path,
        address,
        name=name,
        probe={"steps": 1, "score_sd": 0.01, "marker_dir": str(tmp_path / "m"), **probe},
        grid={"divergences": ["tv", "kl", "hellinger"], "estimators": ["mc"]},
        seeds={"min": 2, "max": 4},
        overrides={"kl-mc": {"probe": {"score": 0.1}}},
        # the rounds' mechanics at the pooled test's power (a row 40 points off separated at 2
        # seeds); Welch's test, the default, needs a third seed there (tests/analysis)
        analysis={"test": "pooled"},
    )


def finished_runs(store: str, experiment: str) -> dict[str, list]:
    """Cell id -> its FINISHED cell runs."""
    client = MlflowClient(store)
    exp = client.get_experiment_by_name(experiment)
    out: dict[str, list] = {}
    for r in client.search_runs([exp.experiment_id], max_results=1000):
        if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL and r.info.status == "FINISHED":
            out.setdefault(r.data.tags[M.TAG_CELL_ID], []).append(r)
    return out


def scores_of(runs: dict[str, list], plan) -> dict[str, float]:
    k = {c.id: c.eval_k for c in plan.cells}
    return {cid: run_score(rs[0].data.metrics, k[cid]) for cid, rs in runs.items()}


def test_rounds_run_the_undecided_rows_only(tmp_path, ray_cluster):
    spec = adaptive_spec(tmp_path, ray_cluster.address, "adaptive")
    plan = load_plan(spec)
    rounds = Rounds.of_plan(plan)
    result = Launcher(plan, poll_s=0.3).run()
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}

    runs = finished_runs(f"sqlite:///{tmp_path}/mlflow.db", "adaptive")
    assert all(len(rs) == 1 for rs in runs.values()), runs  # no seed ran twice
    scores = scores_of(runs, plan)
    # what ran is exactly what the rounds ask for on what ran: no round missing, none extra
    assert set(runs) == rounds.wanted(scores)
    (stops,) = rounds.stops(scores)
    # kl/mc is 40 points below the reference: separated at the first look, its seeds 2-3 unrun
    assert stops["kl/mc"].status == "separated" and stops["kl/mc"].seeds == 2
    assert {"kl-mc-s2", "kl-mc-s3"} <= result.unneeded
    assert not {"kl-mc-s2", "kl-mc-s3"} & set(runs)
    # hellinger/mc is the reference's distribution: not separated, ended by futility or at max
    assert stops["hellinger/mc"].status == "futile", stops["hellinger/mc"]
    assert len(runs) < len(plan.cells)  # fewer runs than a fixed sweep at max seeds
    # each run says in MLflow why its row stopped
    tags = {cid: rs[0].data.tags.get(M.TAG_ROW_STOPPED) for cid, rs in runs.items()}
    assert tags["kl-mc-s0"] == tags["kl-mc-s1"] == "separated at 2 seeds"
    assert tags["tv-mc-s0"] == "the reference"
    assert tags["hellinger-mc-s0"] == stops["hellinger/mc"].text()


def test_kill9_mid_round_loses_no_round_and_runs_no_seed_twice(tmp_path, ray_cluster):
    spec = adaptive_spec(tmp_path, ray_cluster.address, "adaptive-kill9", sleep_s=1.0)
    plan = load_plan(spec)
    store = f"sqlite:///{tmp_path}/mlflow.db"
    proc = subprocess.Popen(
        [*launcher_cmd(), "launch", str(spec)], env=env_without_ray(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def first_round_done():
        client = MlflowClient(store)
        exp = client.get_experiment_by_name("adaptive-kill9")
        if exp is None:
            return None
        runs = [r for r in client.search_runs([exp.experiment_id], max_results=1000)
                if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL]  # fmt: skip
        done = {r.data.tags[M.TAG_CELL_ID] for r in runs if r.info.status == "FINISHED"}
        seeds = {c.id: c.seed for c in plan.cells}
        second = [r for r in runs if seeds[r.data.tags[M.TAG_CELL_ID]] >= 2]
        return done if len(done) >= 6 and second else None  # round 2 under way

    wait_for(first_round_done, 180, "the first round done and the second started")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    result = Launcher(plan, poll_s=0.3).run()
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
    runs = finished_runs(store, "adaptive-kill9")
    assert all(len(rs) == 1 for rs in runs.values()), {k: len(v) for k, v in runs.items()}
    for cell in runs:  # each ran in one attempt: the running seed was re-attached, not rerun
        attempts = (tmp_path / "m" / f"{cell}.attempts").read_text().splitlines()
        assert len(attempts) == 1, cell
    rounds = Rounds.of_plan(plan)
    assert set(runs) == rounds.wanted(scores_of(runs, plan))  # every round the data ask for


def test_the_budget_ends_the_rounds_and_the_rows_say_so(tmp_path, ray_cluster):
    spec = adaptive_spec(tmp_path, ray_cluster.address, "adaptive-budget")
    text = spec.read_text() + "budget: {runs: 7}\n"
    spec.write_text(text)
    plan = load_plan(spec)
    rounds = Rounds.of_plan(plan)
    result = Launcher(plan, poll_s=0.3).run()
    assert result.ok, {k: (c.state, c.note) for k, c in result.cells.items()}
    runs = finished_runs(f"sqlite:///{tmp_path}/mlflow.db", "adaptive-budget")
    assert len(runs) == 7  # the first round (6) and one seed of the second
    assert result.left and set(result.left) <= rounds.wanted(scores_of(runs, plan))
    (stops,) = rounds.stops(scores_of(runs, plan), left=result.left)
    assert stops["hellinger/mc"].status == "open" and stops["hellinger/mc"].reason == "budget"
    tag = runs["hellinger-mc-s0"][0].data.tags[M.TAG_ROW_STOPPED]
    assert tag == "left by the budget at 2 seeds", tag


def test_a_failed_seed_stops_its_row_only_and_the_rounds_go_on(tmp_path, ray_cluster):
    """Issue 57 item 2: hellinger/mc's second seed fails with no retry left (retries.max 0).
    The launch does not end after the first round: the other undecided rows get their next
    seeds; hellinger/mc stops as 'seed failed' (its runs' tag says so) and none of its later
    seeds run; every other wanted cell finishes."""
    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="adaptive-failed",
        probe={"steps": 1, "score_sd": 0.01, "marker_dir": str(tmp_path / "m")},
        grid={"divergences": ["tv", "kl", "hellinger"], "estimators": ["mc", "atomic"]},
        seeds={"min": 2, "max": 4},
        overrides={
            "kl-mc": {"probe": {"score": 0.1}},
            "hellinger-mc-s1": {"probe": {"always_fail": True}},
        },
        retries={"max": 0, "backoff_s": 0.2},
        analysis={"test": "pooled"},
    )
    plan = load_plan(spec)
    rounds = Rounds.of_plan(plan)
    result = Launcher(plan, poll_s=0.3).run()
    states = {k: c.state for k, c in result.cells.items()}
    assert [k for k, s in states.items() if s.value == "failed"] == ["hellinger-mc-s1"], states
    runs = finished_runs(f"sqlite:///{tmp_path}/mlflow.db", "adaptive-failed")
    scores = scores_of(runs, plan)
    lost = {"hellinger-mc-s1"}
    assert set(runs) == rounds.wanted(scores, lost) - lost  # every round the data ask for ran
    assert any(c.endswith("-s2") for c in runs), sorted(runs)  # the rounds went on
    assert not {"hellinger-mc-s2", "hellinger-mc-s3"} & set(runs)
    (stops,) = rounds.stops(scores, failed=lost)
    assert (
        stops["hellinger/mc"].status == "failed" and stops["hellinger/mc"].reason == "seed failed"
    )
    assert all(s.status != "open" for s in stops.values())
    tag = runs["hellinger-mc-s0"][0].data.tags[M.TAG_ROW_STOPPED]
    assert tag == "seed failed at 1 seed: not decided", tag
    # 'unneeded' only where the rule decided the row; the failed row's later seeds say why
    assert result.idle["hellinger-mc-s2"] == result.idle["hellinger-mc-s3"] == "row failed"
    others = {c: why for c, why in result.idle.items() if not c.startswith("hellinger-mc")}
    assert set(others.values()) <= {"unneeded"}
    shown = {r.cell: r.shown_state for r in sweep_status(plan, address=ray_cluster.address)}
    assert shown["hellinger-mc-s2"] == shown["hellinger-mc-s3"] == "row failed", shown
    assert {shown[c] for c in others} <= {"unneeded"}, shown
