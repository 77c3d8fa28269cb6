"""Collect from a real SQLite MLflow store (the sweep layout of gppo/store/tracking.py) and write reports."""

from __future__ import annotations

import math
import re

import pytest
from helpers import make_cell

from gppo import metrics as M
from gppo.analysis.data.collect import collect
from gppo.analysis.report_writer import write_report
from gppo.analysis.tables.table1 import build_table1
from gppo.errors import SweepNotFound
from gppo.store.records import find_sweep
from gppo.store.state import SweepRef

BENCH = {"A": 0.40, "B": 0.20}
BASE = {"A": 0.05, "B": 0.01}


def _cell(method, div, est, seed=0, domain="math"):
    return make_cell(div, est, method=method, seed=seed, settings={"domain": domain})


def _populate(store):
    store.cell("gppo", "tv", "mc", scores={"A": 0.30, "B": 0.20}, base=BASE)
    # kl/atomic: attempt 1 failed, attempt 2 finished -> attempt 2 counts
    store.cell("gppo", "kl", "atomic", attempt=1, status="FAILED", finished=False, base=BASE)
    store.cell("gppo", "kl", "atomic", attempt=2, scores=BENCH, base=BASE)
    store.cell("gppo", "kl", "mc", status="RUNNING", finished=False, base=BASE)  # still running
    store.cell("gppo", "chi2", "atomic", status="FAILED", finished=False)  # failed, no retry
    store.cell("gspo", None, None, scores={"A": 0.35, "B": 0.15}, base=BASE)
    # a run of another sweep in the same store must not leak in
    sweep_id = store.sweep("other-0000")
    store.cell("gppo", "tv", "binary", scores={"A": 0.9, "B": 0.9}, base={"A": 0.5, "B": 0.5})
    store.sweep(sweep_id)


def test_collect_latest_attempt_statuses_base_and_missing(store):
    _populate(store)
    expected = [_cell("gppo", d, e) for d in ("tv", "kl", "chi2") for e in ("mc", "atomic")]
    expected.append(_cell("gspo", None, None))
    got = collect(store.ref, expected=expected)
    tidy = got.tidy
    assert got.k == 8 and got.parent_run_id == store.parent
    status = tidy.drop_duplicates(["cell", "seed"]).set_index("cell")["status"].to_dict()
    assert status == {
        "tv/mc": "done",
        "kl/atomic": "done",
        "kl/mc": "running",
        "chi2/atomic": "failed",
        "gspo": "done",
        "base": "done",
        "tv/atomic": "pending",
        "chi2/mc": "pending",
    }
    scores = tidy[tidy.status == "done"].set_index(["cell", "benchmark"])["score"]
    assert scores[("kl/atomic", "A")] == 0.40 and scores[("gspo", "B")] == 0.15
    # base row = the step-0 eval (eval_base/...) of the reference cell
    assert scores[("base", "A")] == 0.05 and scores[("base", "B")] == 0.01
    runs = got.runs.set_index("cell")
    assert runs.loc["kl/atomic", "attempt"] == 2
    assert runs.loc["tv/mc", "steps"] == 10 and math.isclose(runs.loc["tv/mc", "wall_time_s"], 0.5)


def test_base_row_falls_back_to_another_cell_of_the_same_seed(store):
    store.cell("gppo", "kl", "atomic", scores=BENCH, base={"A": 0.07, "B": 0.02})
    # the reference cell's run lacks eval_base/...: the next cell that has it gives the base row
    store.cell("gppo", "tv", "mc", scores=BENCH, base={"A": 0.5, "B": 0.5}, eval_base=False)
    got = collect(store.ref)
    base = got.tidy[got.tidy.cell == "base"].set_index("benchmark")["score"]
    assert base.to_dict() == {"A": 0.07, "B": 0.02}


def test_without_eval_base_the_base_row_is_shown_as_missing(store):
    """A seed none of whose runs logged ``eval_base/...`` has no base score (no step-0 history
    is read): Table 1's base row is dashes with the missing-cell footnote, the rest is intact."""
    store.cell("gppo", "tv", "mc", scores={"A": 0.30, "B": 0.20}, base=BASE, eval_base=False)
    store.cell("gppo", "kl", "atomic", scores=BENCH, base=BASE, eval_base=False)
    store.cell("gppo", "kl", "atomic", seed=1, scores=BENCH, base=BASE)
    got = collect(store.ref)
    base = got.tidy[got.tidy.cell == "base"].set_index("seed")
    assert base.loc[0, "status"] == "pending" and math.isnan(base.loc[0, "score"])
    assert set(base.loc[1, "score"]) == {0.05, 0.01}
    table = build_table1(got.tidy)
    rows = {r.cell: r for r in table.blocks[0].rows}
    assert rows["base"].reasons == {"pending": [0]} and rows["base"].entries["A"].mean == 5
    assert str(rows["kl/atomic"].rel_pct) == "20.00"  # 30.0 vs 25.0
    (note,) = table.footnotes
    assert note.text == "no result, no run (missing): base (math, seed 0)"
    # a seed whose runs are still starting (no step-0 evaluation yet): the base row says so
    store.cell("gppo", "tv", "mc", seed=2, status="RUNNING", finished=False)
    base = collect(store.ref).tidy.query("cell == 'base'").set_index("seed")
    assert base.loc[2, "status"] == "running" and base.loc[0, "status"] == "pending"


def test_sweep_still_running_renders_dashes_with_footnotes(store):
    _populate(store)
    expected = [_cell("gppo", "tv", "atomic")]
    table = build_table1(collect(store.ref, expected=expected).tidy)
    rows = {r.cell: r for r in table.blocks[0].rows}
    assert (
        rows["kl/mc"].entries["A"].mean is None and rows["kl/mc"].entries["A"].reason == "running"
    )
    assert rows["tv/atomic"].entries["avg"].reason == "pending"
    assert rows["chi2/atomic"].entries["avg"].reason == "failed"
    assert str(rows["kl/atomic"].rel_pct) == "20.00"  # 30.0 vs 25.0
    assert [f.reason for f in table.footnotes] == ["failed", "running", "pending"]


@pytest.mark.slow
def test_write_report_writes_every_format_and_attaches_to_parent_run(store, tmp_path):
    _populate(store)
    curves = {
        M.TRAIN_SCORE: [0.1, 0.2, 0.3],
        M.ENTROPY: [1.0, 0.8, 0.7],
        M.clip_frac_bucket("mu_lt_0.01"): [0.1, 0.1, 0.2],
        M.clip_frac_bucket("mu_ge_0.5"): [0.01, 0.02, 0.01],
    }
    store.cell("gppo", "tv", "atomic", scores=BENCH, base=BASE, curves=curves)
    out = tmp_path / "report"
    report = write_report(store.ref, out, figures=True)
    names = sorted(p.name for p in report.files)
    for stem in ("table1.md", "table1.tex", "table1.html", "table1.csv"):
        assert stem in names
    for stem in ("figure2_dynamics", "figure2_clip_by_mu"):
        assert f"{stem}.png" in names and f"{stem}.svg" in names
    assert report.attached
    listed = {a.path for a in store.client.list_artifacts(store.parent, "report")}
    assert {f"report/{n}" for n in names} <= listed
    assert "41.5" not in (out / "table1.md").read_text()  # sanity: our numbers, not the paper's
    assert "30.0" in (out / "table1.md").read_text()


def test_sql_fast_path_and_search_runs_path_agree(store):
    _populate(store)
    store.cell("gppo", "tv", "atomic", scores=BENCH, base=BASE)
    fast = collect(store.ref)
    slow = collect(store.ref, fast=False)
    assert fast.parent_run_id == slow.parent_run_id
    # a running cell's wall time is "now - start": it differs between two calls
    for a, b in ((fast.tidy, slow.tidy), (fast.runs, slow.runs)):
        done = a["status"] != "running"
        assert a[done].equals(b[done])
        assert a.drop(columns="wall_time_s").equals(b.drop(columns="wall_time_s"))


def test_collect_reads_only_the_sweep_of_its_experiment(store):
    """The same sweep id in another experiment (a copied spec, a rename) is not mixed in: the
    handle names the experiment, and both read paths honour it."""
    store.cell("gppo", "tv", "mc", scores={"b1": 0.5}, base={"b1": 0.1})
    other = store.tracking.experiment_id("other")
    assert other is not None
    stray = store.tracking.create_cell_run(
        other,
        store.tracking.sweep_run(other, store.sweep_id),
        store.sweep_id,
        _cell("gppo", "kl", "mc"),
        attempt=1,
        submission_id="stray",
    )
    store.tracking.terminate(stray, "FINISHED")
    for fast in (True, False):
        got = collect(store.ref, fast=fast)
        assert set(got.runs["cell_id"]) == {"tv-mc-s0"}, fast
        assert got.parent_run_id == store.parent


def test_find_sweep_names_the_store_and_the_sweep_when_absent(store):
    found = find_sweep(store.sweep_id, store.uri, experiment="demo")
    assert found == SweepRef(store.sweep_id, store.uri, store.exp, store.parent)
    assert find_sweep(store.sweep_id, store.uri) == found  # no experiment: looked up by its tags
    with pytest.raises(SweepNotFound, match=rf"^{re.escape(store.uri)}: no sweep 'nope' in "):
        find_sweep("nope", store.uri, experiment="demo")
    with pytest.raises(SweepNotFound, match="no experiment 'absent'"):
        find_sweep(store.sweep_id, store.uri, experiment="absent")


def test_find_sweep_says_whether_the_last_launch_ended_the_sweep(store):
    """``gppo-sweep report`` after a launch reads the launch's end from the store (the parent
    run FINISHED, or the budget-left tag on an ended one), so an adaptive sweep's rows left by a
    budget read so there too; a relaunch sets the parent RUNNING again."""
    assert not find_sweep(store.sweep_id, store.uri).ended  # a launch under way
    store.tracking.terminate(store.parent, "FINISHED")
    assert find_sweep(store.sweep_id, store.uri).ended
    store.tracking.sweep_run(store.exp, store.sweep_id)  # a relaunch
    assert not find_sweep(store.sweep_id, store.uri).ended
    for status in ("FAILED", "KILLED"):
        store.tracking.terminate(store.parent, status)
        assert not find_sweep(store.sweep_id, store.uri).ended
    # a launch that ended with cells its budget left (a failed seed made it FAILED) ended it
    store.tracking.set_tags(store.parent, {M.TAG_BUDGET_LEFT: "true"})
    assert find_sweep(store.sweep_id, store.uri).ended
    store.tracking.sweep_run(store.exp, store.sweep_id)  # until a relaunch is under way
    assert not find_sweep(store.sweep_id, store.uri).ended


def test_a_stopped_run_is_reported_as_stopped_not_failed(store):
    """``gppo-sweep cancel`` ends a run KILLED: Table 1 says it was stopped, in the same words
    as ``status`` (one vocabulary, gppo.store.state)."""
    store.cell("gppo", "tv", "mc", scores={"A": 0.3}, base={"A": 0.1})
    store.cell("gppo", "kl", "mc", status="KILLED", finished=False)
    got = collect(store.ref)
    status = got.tidy.drop_duplicates(["cell"]).set_index("cell")["status"].to_dict()
    assert status["kl/mc"] == "stopped"
    table = build_table1(got.tidy)
    (note,) = table.footnotes
    assert note.reason == "stopped" and note.text.startswith("no result, run stopped: kl/mc")
