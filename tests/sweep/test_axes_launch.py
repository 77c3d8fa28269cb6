"""Axes end to end (``gppo-sweep launch``, a real local Ray head, real testbed cells at a tiny
budget, a SQLite MLflow store): every (cell, axis point, seed) is one run with its axis values as
params and tags; a relaunch after adding an axis value runs only the new points; on a selection
axis each row of ``table1_best.csv`` takes the value with the best held-out score and reports the
benchmarks' numbers of those runs. TRL goes through the same expansion."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import gppo_cli
from mlflow.tracking import MlflowClient

from gppo import metrics as M

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LR = "local.lr"
SPEC = {
    "name": "axes-path",
    "backend": "local",
    "local": {"domain": "math", "steps": 2, "prompts_per_step": 8, "eval_prompts": 8},
    "grid": {"divergences": ["tv"], "estimators": ["mc"]},
    "baselines": ["gspo"],
    "seeds": 1,
    "axes": {"calibration.r_min": [0.8], LR: [1.0e-4, 3.0e-4]},
    "select": [LR],
    "ray": {"max_concurrent": 2, "resources": {"num_cpus": 1, "num_gpus": 0}},
    "retries": {"max": 1, "backoff_s": 0.5},
}


def _launch(spec: Path, cwd: Path) -> str:
    return gppo_cli(["launch", str(spec)], cwd)


def _runs(uri: str) -> list:
    client = MlflowClient(uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exps, max_results=500)
    return [r for r in runs if r.data.tags.get(M.TAG_ROLE) == M.ROLE_CELL]


def test_axes_launch_relaunch_and_selection(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    spec = tmp_path / "grid.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "tracking": {"uri": uri}}, sort_keys=False))
    out = _launch(spec, tmp_path)
    assert f"Table 1 at {LR} = 0.0001" in out  # the spec's own lr (r_min, one value, moves none)
    runs = _runs(uri)
    ids = sorted(r.data.tags[M.TAG_CELL_ID] for r in runs)
    # r_min (one value) moves no cell: no suffix for it; lr moves every cell, gspo included
    assert ids == ["gspo_lr0.0001-s0", "gspo_lr0.0003-s0", "tv-mc_lr0.0001-s0", "tv-mc_lr0.0003-s0"]
    for r in runs:
        lr = json.loads(r.data.tags[M.TAG_AXES])[LR]
        assert r.data.tags[M.TAG_AXIS_PREFIX + LR] == json.dumps(lr)
        assert float(r.data.params[f"axis.{LR}"]) == lr == float(r.data.params["local.lr"])
        assert r.info.status == "FINISHED"
        assert 0 <= r.data.metrics[M.select_metric(8)] <= 1  # the held-out selection score

    # the point at the spec's own values trains as the spec without axes: the same numbers
    from gppo.backends.local.__main__ import run_cell
    from gppo.grid.load import load_plan

    plain = {k: v for k, v in SPEC.items() if k not in ("axes", "select")}
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(plain))
    twin = next(c for c in load_plan(tmp_path / "plain.yaml").cells if c.id == "tv-mc-s0")
    final = run_cell(twin, None, verbose=False)["evals"]["2"]
    (run,) = [r for r in runs if r.data.tags[M.TAG_CELL_ID] == "tv-mc_lr0.0001-s0"]
    assert final and all(run.data.metrics[k] == v for k, v in final.items())

    # each row at its best lr by the held-out score; the reported numbers are the benchmarks'
    report = tmp_path / "reports"
    (folder,) = list(report.iterdir())
    best = pd.read_csv(folder / "table1_best.csv")
    by_cell: dict[str, list] = {}
    for r in runs:
        by_cell.setdefault(r.data.tags[M.TAG_CELL_ID].split("_")[0], []).append(r)
    for label, cell in (("tv/mc", "tv-mc"), ("gspo", "gspo")):
        row = best[best["cell"] == label].iloc[0]
        top = max(by_cell[cell], key=lambda r: r.data.metrics[M.select_metric(8)])
        assert row[LR] == json.loads(top.data.tags[M.TAG_AXES])[LR]
        assert row["selection"] == pytest.approx(top.data.metrics[M.select_metric(8)])
        benches = [k for k in top.data.metrics if M.parse_eval_metric(k) and k.count("/") == 2]
        avg = 100 * sum(top.data.metrics[k] for k in benches) / len(benches)
        assert row["avg"] == pytest.approx(avg, abs=0.051)
    assert {"axis_response.png", "rank_stability.md", "table1.csv", "report.html"} <= {
        p.name for p in folder.iterdir()
    }

    # a new lr value: only its two runs start; the four finished ones are kept
    finished = {r.info.run_id for r in runs}
    spec.write_text(
        yaml.safe_dump(
            {
                **SPEC,
                "axes": {**SPEC["axes"], LR: [1.0e-4, 3.0e-4, 2.0e-4]},
                "tracking": {"uri": uri},
            }
        )
    )
    _launch(spec, tmp_path)
    after = _runs(uri)
    new = sorted(r.data.tags[M.TAG_CELL_ID] for r in after if r.info.run_id not in finished)
    assert new == ["gspo_lr0.0002-s0", "tv-mc_lr0.0002-s0"]
    assert len(after) == 6


def test_trl_cells_take_their_axis_point(tmp_path):
    """TRL through the same expansion: the lr axis reaches TRL's trainer settings and the run."""
    base = yaml.safe_load((REPO / "configs" / "trl-cpu-testbed.yaml").read_text())
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    base["trl"].update(steps=1, prompts_per_step=4, group_size=2, minibatches=1)
    base.update(
        name="trl-axes", seeds=1, grid={"divergences": ["tv"], "estimators": ["mc"]},
        axes={"trl.lr": [1.0e-4, 2.0e-4]}, tracking={"uri": uri},
        retries={"max": 0}, eval={"k": 2},
    )  # fmt: skip
    spec = tmp_path / "grid.yaml"
    spec.write_text(yaml.safe_dump(base))
    _launch(spec, tmp_path)
    runs = _runs(uri)
    got = sorted((r.data.tags[M.TAG_CELL_ID], float(r.data.params["trl.lr"])) for r in runs)
    assert got == [("tv-mc_lr0.0001-s0", 1.0e-4), ("tv-mc_lr0.0002-s0", 2.0e-4)]
    assert all(r.info.status == "FINISHED" for r in runs)
