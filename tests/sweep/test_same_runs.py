"""Identical cells run once, end to end: a real local Ray head, probe cells (real processes that
log into MLflow) and a SQLite store. tv/mc and chi2/mc at the calibrated δ are one function: one
job per seed trains for both, both rows are in Table 1 (the follower's marked, its numbers the
lead's), a relaunch runs nothing, and an interrupted shared run is retried once for the group."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gppo import metrics as M
from gppo.analysis.data.collect import collect
from gppo.analysis.tables.table1 import build_table1
from gppo.grid import load_plan
from gppo.sweep.launch import Launcher
from gppo.sweep.monitor.commands import sweep_status

from .conftest import write_spec

pytestmark = pytest.mark.slow  # starts Ray jobs

GRID = {"divergences": ["tv", "chi2", "kl"], "estimators": ["mc"]}


def _cell_runs(tmp_path: Path) -> dict[str, list]:
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exps = [e.experiment_id for e in client.search_experiments()]
    out: dict[str, list] = {}
    for r in client.search_runs(exps, max_results=1000):
        if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL:
            out.setdefault(r.data.tags[M.TAG_CELL_ID], []).append(r)
    return out


def _attempts(tmp_path: Path, cell: str) -> int:
    path = tmp_path / "m" / f"{cell}.attempts"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_identical_cells_share_one_run_per_seed_and_keep_their_rows(tmp_path, ray_cluster):
    spec = write_spec(tmp_path, ray_cluster.address, name="same", grid=GRID, seeds=2)
    plan = load_plan(spec)
    result = Launcher(plan, poll_s=0.2).run()
    assert {st.state.value for st in result.cells.values()} == {"done"}
    # one job per (group, seed): tv/mc's trained for chi2/mc, kl/mc its own
    for s in (0, 1):
        assert _attempts(tmp_path, f"tv-mc-s{s}") == 1
        assert _attempts(tmp_path, f"kl-mc-s{s}") == 1
        assert _attempts(tmp_path, f"chi2-mc-s{s}") == 0
    runs = _cell_runs(tmp_path)
    for s in (0, 1):
        (lead,), (follower,) = runs[f"tv-mc-s{s}"], runs[f"chi2-mc-s{s}"]
        tags = follower.data.tags
        assert tags[M.TAG_SAME_RUNS] == lead.info.run_id and tags[M.TAG_SAME_CELL] == f"tv-mc-s{s}"
        assert follower.info.status == "FINISHED" and tags[M.TAG_FINISHED] == "true"
        assert tags[M.TAG_DIVERGENCE] == "chi2" and follower.data.params["divergence"] == "chi2"
        evals = {k: v for k, v in lead.data.metrics.items() if k.startswith("eval/")}
        assert evals and all(follower.data.metrics[k] == v for k, v in evals.items())
        assert M.TAG_SAME_RUNS not in lead.data.tags
    # status: every cell done, the follower with its own run
    assert {r.cell: r.state for r in sweep_status(plan)} == {c.id: "done" for c in plan.cells}

    # Table 1: both rows, chi2/mc marked as tv/mc's runs, with tv/mc's numbers
    tidy = collect(result.ref, expected=plan.cells).tidy
    table = build_table1(tidy, reference="tv/mc")
    rows = {r.cell: r for r in table.blocks[0].rows}
    assert rows["chi2/mc"].same_runs == "tv/mc" and rows["tv/mc"].same_runs is None
    assert rows["kl/mc"].same_runs is None
    assert rows["chi2/mc"].entries == rows["tv/mc"].entries
    assert any("chi2/mc = tv/mc" in f.text for f in table.footnotes)

    # a relaunch runs nothing and records nothing twice
    again = Launcher(plan, poll_s=0.2).run()
    assert {st.state.value for st in again.cells.values()} == {"done"}
    assert all(_attempts(tmp_path, c.id) == (0 if "chi2" in c.id else 1) for c in plan.cells)
    assert {k: len(v) for k, v in _cell_runs(tmp_path).items()} == {c.id: 1 for c in plan.cells}


def test_an_interrupted_shared_run_is_retried_once_for_the_group(tmp_path, ray_cluster):
    spec = write_spec(
        tmp_path,
        ray_cluster.address,
        name="same-int",
        grid={"divergences": ["tv", "chi2"], "estimators": ["mc"]},
        probe={"steps": 30, "sleep_s": 0.3, "marker_dir": str(tmp_path / "m")},
    )
    plan = load_plan(spec)
    stop = threading.Event()

    def on_event(ev) -> None:  # Ctrl-C once the shared run trains
        if ev.kind == "step":
            stop.set()

    first = Launcher(plan, poll_s=0.2, metrics_every_s=0.5, on_event=on_event, stop_event=stop)
    first.run()
    assert _attempts(tmp_path, "tv-mc-s0") == 1 and _attempts(tmp_path, "chi2-mc-s0") == 0
    assert "chi2-mc-s0" not in _cell_runs(tmp_path)  # no follower recorded from a killed run

    spec.write_text(spec.read_text().replace("steps: 30", "steps: 2"))
    again = Launcher(load_plan(spec), poll_s=0.2).run()
    assert {st.state.value for st in again.cells.values()} == {"done"}
    assert _attempts(tmp_path, "tv-mc-s0") == 2 and _attempts(tmp_path, "chi2-mc-s0") == 0
    runs = _cell_runs(tmp_path)
    finished = [r for r in runs["tv-mc-s0"] if r.info.status == "FINISHED"]
    (follower,) = runs["chi2-mc-s0"]
    assert follower.data.tags[M.TAG_SAME_RUNS] == finished[0].info.run_id


def test_testbed_sweep_trains_tv_mc_once_for_chi2_mc(tmp_path):
    """The quick start's pair on the real testbed (``gppo-sweep launch``, its own local Ray head,
    a tiny budget): one trained run serves both rows, and chi2/mc trained on its own ends at the
    same numbers to the last digit (the criterion holds on a real training run)."""
    import pandas as pd
    import yaml
    from helpers import gppo_cli

    from gppo.backends.local.__main__ import run_cell

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    spec = {
        "name": "same-testbed",
        "backend": "local",
        "local": {"domain": "math", "steps": 2, "prompts_per_step": 8, "eval_prompts": 8},
        "grid": {"divergences": ["tv", "chi2"], "estimators": ["mc"]},
        "seeds": 1,
        "tracking": {"uri": uri},
        "ray": {"max_concurrent": 2, "resources": {"num_cpus": 1, "num_gpus": 0}},
        "retries": {"max": 1, "backoff_s": 0.5},
    }
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert "2 cells, 1 run" in gppo_cli(["plan", str(path)], tmp_path)
    out = gppo_cli(["launch", str(path)], tmp_path)
    assert "shared      chi2-mc-s0  same runs as tv-mc-s0" in out
    runs = _cell_runs(tmp_path)
    (lead,), (follower,) = runs["tv-mc-s0"], runs["chi2-mc-s0"]
    assert follower.data.tags[M.TAG_SAME_RUNS] == lead.info.run_id
    (folder,) = list((tmp_path / "reports").iterdir())
    table = pd.read_csv(folder / "table1.csv").set_index("cell")
    assert {"tv/mc", "chi2/mc"} <= set(table.index)
    assert table.loc["chi2/mc", "avg"] == table.loc["tv/mc", "avg"]

    chi2 = next(c for c in load_plan(path).cells if c.id == "chi2-mc-s0")
    alone = run_cell(chi2, None, verbose=False)["evals"]["2"]
    assert alone and all(lead.data.metrics[k] == v for k, v in alone.items())
