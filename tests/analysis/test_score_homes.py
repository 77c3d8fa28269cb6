"""One home each for a run's score, a wanted cell's identical group and a follower's cost
(issue 57): every caller reads the same numbers from the same runs, and no second computation
of any of them is left in ``gppo/``."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import sweep.probe_backend  # noqa: F401  # registers the probe backend

from gppo import metrics as M
from gppo.analysis.data.collect import collect
from gppo.analysis.tables.adaptive_stops import cell_scores, without_unneeded
from gppo.analysis.tables.exploration_contrasts import runs_frame
from gppo.backends.cell_run import CellRun
from gppo.grid import load_plan
from gppo.grid.sharing import run_groups, whole_groups
from gppo.stats.rounds import Rounds
from gppo.store.follower import costs_nothing
from gppo.sweep.monitor.commands import sweep_status
from gppo.sweep.running.dispatcher import submission_id
from gppo.sweep.running.identical_cells import SameRuns
from gppo.sweep.running.seed_gate import SeedGate

GPPO = Path(__file__).resolve().parents[2] / "gppo"
SPEC = (
    "name: demo\nbackend: probe\nprobe: {steps: 1}\nreference: tv/mc\n"
    "grid: {divergences: [tv, chi2], estimators: [mc, atomic]}\nseeds: {min: 2, max: 4}\n"
    "benchmarks: [b1, b2]\ntracking: {uri: 'URI'}\n"
)
#: final avg@8 per benchmark of each seed's run (fractions whose mean in float and in decimal
#: differ in their last bits), and a stray avg@1 that is no part of any score
FINAL = {0: (0.1, 0.3465), 1: (0.3, 0.30000000000000004)}


def _done(store, cell, final) -> str:
    rid = store.tracking.create_cell_run(
        store.exp, store.parent, store.sweep_id, cell, attempt=1,
        submission_id=submission_id(store.sweep_id, cell.id, 1),
    )  # fmt: skip
    run = CellRun(store.client, rid, eval_k=cell.eval_k)
    run.log_evaluation({"b1": 0.05, "b2": 0.05}, step=0)
    run.log_evaluation(dict(zip(("b1", "b2"), final, strict=True)), step=10)
    run.log({M.eval_metric("b1", 1): 0.99}, 10)  # another k: not the seed's score
    run.flush()
    run.finish(10)
    start = store.tracking.get_run(rid).info.start_time
    store.client.set_terminated(rid, status="FINISHED", end_time=start + 500)
    return rid


def test_every_caller_reads_the_same_seed_score(store, tmp_path):
    spec = tmp_path / "grid.yaml"
    spec.write_text(SPEC.replace("URI", store.uri))
    plan = load_plan(spec)
    store.sweep(plan.sweep_id)
    first = [c for c in plan.cells if c.seed in (0, 1) and c.id.startswith("tv-")]
    runs = {c.id: _done(store, c, FINAL[c.seed]) for c in first}

    # the launcher's seed gate
    ctx = SimpleNamespace(tracking=store.tracking, experiment_id=store.exp)
    states = [SimpleNamespace(state="done", run_id=runs[c.id], cell=c) for c in first]
    gate = SeedGate(Rounds.of_plan(plan), SameRuns(plan.cells))
    gate.observe(ctx, states)  # type: ignore[arg-type]
    # status, the report's replay, the studies' tables
    status = {r.cell: r.seed_score for r in sweep_status(plan) if r.seed_score is not None}
    report = cell_scores(collect(store.ref, expected=plan.cells, k=plan.spec.eval.k).runs)
    frame = runs_frame(store.client, plan.sweep_id, "none", store.exp, point=0.0)
    study = {
        f"{d}-{e}-s{s}": v
        for d, e, s, v in zip(frame["divergence"], frame["estimator"], frame["seed"],
                              frame["final"], strict=True)
    }  # fmt: skip
    assert set(gate.scores) == set(runs)
    assert gate.scores == status == report == study  # to the last bit
    assert report["tv-mc-s0"] == 22.325 and report["tv-atomic-s1"] == 30.000000000000004


def test_a_wanted_cells_whole_group_is_wanted(tmp_path):
    spec = tmp_path / "grid.yaml"
    spec.write_text(SPEC.replace("URI", f"sqlite:///{tmp_path}/m.db"))
    plan = load_plan(spec)
    groups = run_groups(plan.cells)
    shared = next(g for g in groups if len(g) > 1)  # chi2/mc is tv/mc at its δ
    assert {c.id for c in shared} == {"tv-mc-s0", "chi2-mc-s0"}
    assert whole_groups({"chi2-mc-s0"}, groups) == {"tv-mc-s0", "chi2-mc-s0"}
    assert whole_groups({"tv-atomic-s0"}, groups) == {"tv-atomic-s0"}
    assert whole_groups((), groups) == set()
    # the report's filter keeps a wanted group's pending rows (the follower's included)
    import pandas as pd

    pending = pd.DataFrame(
        [{"domain": "probe", "cell": label, "seed": 0, "status": "pending", "benchmark": ""}
         for label in ("tv/mc", "chi2/mc", "tv/atomic")]
    )  # fmt: skip
    kept = without_unneeded(pending, plan.cells, {"tv-mc-s0"})
    assert sorted(kept["cell"]) == ["chi2/mc", "tv/mc"]


def test_a_follower_costs_nothing():
    assert costs_nothing({M.TAG_SAME_RUNS: "abc", M.TAG_CELL_ID: "chi2-mc-s0"})
    assert not costs_nothing({M.TAG_CELL_ID: "tv-mc-s0"})


#: each rule and the pattern its copies took (the one home is the only file allowed it)
COPIES = {
    "the seed score": (
        r"eval_average\(|100(\.0)? \* (avg|sum)|_mean_over_benchmarks",
        "store/run_score.py",
    ),
    "a wanted cell's group": (r"wanted \|= \{c\.id for c in group\}", "grid/sharing.py"),
    "a follower's cost": (r"TAG_SAME_RUNS (not )?in", "store/follower.py"),
}


@pytest.mark.parametrize("rule", COPIES)
def test_no_second_home(rule):
    pattern, home = COPIES[rule]
    found = [
        f"{p.relative_to(GPPO)}:{i}"
        for p in GPPO.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(pattern, line) and p.relative_to(GPPO).as_posix() != home
    ]
    assert found == [], f"{rule} computed outside {home}"
