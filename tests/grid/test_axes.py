"""Axes of a sweep (gppo/grid/axes.py): valid specs through ``plan`` (runs, ids, δ per radius,
the rule for an axis that does not move a cell), malformed ones (one line, exit 2, nothing
written), and the promise that a spec without axes expands exactly as before."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gppo.cell import axis_suffix, cell_id
from gppo.cli import app
from gppo.grid.axes import MAX_RUNS
from gppo.grid.load import load_plan
from gppo.objectives.regions import calibrate_delta
from gppo.store.tracking import cell_params, cell_tags

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
import sweep.probe_backend  # noqa: E402, F401

ROOT = TESTS.parent
BASE = (
    "name: ax\nbackend: probe\nprobe: {steps: 1}\ngrid: {divergences: [tv, kl], estimators: [mc]}\n"
)

#: (yaml text, expected stderr line after "grid.yaml: ")
MALFORMED = [
    (BASE + "axes: {calibration.rmin: [0.7]}\n", "axes.calibration.rmin: 'calibration.rmin' cannot vary; allowed under calibration: calibration.r_min"),
    (BASE + "axes: {colour: [1, 2]}\n", "axes.colour: unknown path 'colour'; allowed: calibration.r_min"),
    (BASE + "axes: {tracking.uri: [a, b]}\n", "axes.tracking.uri: 'tracking.uri' cannot vary within one sweep"),
    (BASE + "axes: {name: [a, b]}\n", "axes.name: 'name' cannot vary within one sweep"),
    (BASE + "axes: {backend: [local]}\n", "axes.backend: 'backend' cannot vary within one sweep"),
    (BASE + "axes: {ray.address: [a]}\n", "axes.ray.address: 'ray.address' cannot vary within one sweep"),
    (BASE + "axes: {grid.divergences: [[tv]]}\n", "axes.grid.divergences: 'grid.divergences' cannot vary"),
    (BASE + "axes: {seeds: [1, 2]}\n", "axes.seeds: 'seeds' cannot vary within one sweep"),
    (BASE + "axes: {probe.stepz: [1, 2]}\n", "axes.probe.stepz: unknown key 'stepz' of the probe section; allowed: domain, steps"),
    (BASE + "axes: {local.lr: [1.0e-4]}\n", "axes.local.lr: unknown path 'local.lr'; allowed:"),
    (BASE + "axes: {probe.steps: [1, many]}\n", "axes.probe.steps[1]: Input should be a valid integer"),
    (BASE + "axes: {calibration.r_min: [0.8, 1.5]}\n", "axes.calibration.r_min[1]: r_min must be a number in the open interval (0, 1), got 1.5"),
    (BASE + "axes: {objective.dual_clip: [0.5]}\n", "axes.objective.dual_clip[0]: dual_clip must be None or a number > 1, got 0.5"),
    (BASE + "axes: {eval.k: [0]}\n", "axes.eval.k[0]: Input should be greater than or equal to 1"),
    (BASE + "axes: {calibration.r_min: []}\n", "axes.calibration.r_min: must be a non-empty list of values (got [])"),
    (BASE + "axes: {calibration.r_min: 0.8}\n", "axes.calibration.r_min: must be a non-empty list of values (got 0.8)"),
    (BASE + "axes: {calibration.r_min: [0.8, 0.7, 0.8]}\n", "axes.calibration.r_min[2]: duplicate value 0.8"),
    (BASE + "axes: {probe.steps: [1, 2]}\noverrides: {kl-mc: {probe: {steps: 3}}}\n", "overrides.kl-mc.probe.steps: also an axis (axes.probe.steps)"),
    (BASE + "axes: {calibration.r_min: [0.7, 0.8]}\noverrides: {kl-mc-s0: {delta: 0.3}}\n", "overrides.kl-mc-s0.delta: an explicit δ would hold this cell still"),
    (BASE + "axes: {calibration.r_min: [0.7, 0.8]}\ncalibration: {delta: {kl: 0.3}}\n", "calibration.delta.kl: an explicit δ would hold its cells still under axes.calibration.r_min"),
    (BASE + "axes: {objective.dual_clip: [5, 10]}\noverrides: {kl-mc: {params: {dual_clip: 3}}}\n", "overrides.kl-mc.params.dual_clip: also an axis (axes.objective.dual_clip)"),
    (BASE + "axes: {calibration.delta.kl: [0.1, 0.2]}\ncalibration: {delta: {kl: 0.3}}\n", "calibration.delta.kl: also an axis (axes.calibration.delta.kl)"),
    (BASE + "axes: {probe.sleep_s: [0.0, 1.0e-9, 2.0e-9, 3.0e-9, 4.0e-9, 5.0e-9, 6.0e-9, 7.0e-9, 8.0e-9, 9.0e-9]}\n"
     "seeds: 1000\n", "axes: 2000 runs a point (cells x seeds) x 10 axis values = 20,000 runs, past the limit of 10,000 runs"),
    (BASE + "axes: {calibration.r_min: [0.8]}\nselect: [probe.steps]\n", "select: 'probe.steps' is not an axis; allowed: calibration.r_min"),
    (BASE + "axes: {probe.steps: [1, 2]}\nselect: [probe.steps]\n", "select: backend 'probe' logs no held-out selection score"),
    (BASE + "axes: {probe.note: ['a b', 'a_b']}\n", "axes.probe.note[1]: 'a_b' and 'a b' would give the same cell id"),
]  # fmt: skip


@pytest.mark.parametrize("command", ["plan", "launch"])
@pytest.mark.parametrize(("text", "expected"), MALFORMED, ids=[e[1][:40] for e in MALFORMED])
def test_malformed_axes_one_line_exit_2_nothing_written(
    tmp_path, monkeypatch, command, text, expected
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "grid.yaml").write_text(text)
    result = CliRunner().invoke(app, [command, "grid.yaml"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("grid.yaml: " + expected), lines[0]
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.yaml"]


def test_size_limit_is_documented():
    """The spec reference (docs/configuration.md, "Axes") states the limit as the code has it."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert f"more than {MAX_RUNS:,} runs in all (`gppo.grid.axes.MAX_RUNS`" in text


def _plan(tmp_path, text):
    (tmp_path / "grid.yaml").write_text(text)
    return load_plan(tmp_path / "grid.yaml")


def test_radius_axis_multiplies_grid_cells_not_baselines(tmp_path):
    plan = _plan(
        tmp_path,
        BASE + "baselines: [gspo]\nseeds: 2\naxes: {calibration.r_min: [0.7, 0.8, 0.9]}\n",
    )
    ids = [c.id for c in plan.cells]
    assert len(ids) == len(set(ids)) == 2 * 3 * 2 + 2  # 2 grid cells x 3 radii x 2 seeds + gspo
    assert ids[:2] == ["tv-mc_r_min0.7-s0", "tv-mc_r_min0.7-s1"]
    gspo = [c for c in plan.cells if c.method == "gspo"]
    assert [c.id for c in gspo] == ["gspo-s0", "gspo-s1"] and all(not c.axes for c in gspo)
    for c in plan.cells:
        if c.method == "gppo":  # δ follows r_min per divergence, as without an axis
            r = c.axes["calibration.r_min"]
            assert c.delta == pytest.approx(calibrate_delta(c.divergence, r))
            assert c.id == cell_id(c.divergence, c.estimator, c.seed, f"_r_min{r}")


def test_cell_at_the_specs_own_value_trains_as_without_the_axis(tmp_path):
    """The r_min = 0.8 cells differ from the plain spec's only in their id and axis record."""
    plain = {c.id: c for c in _plan(tmp_path, BASE + "seeds: 2\n").cells}
    swept = _plan(tmp_path, BASE + "seeds: 2\naxes: {calibration.r_min: [0.7, 0.8]}\n")
    at = [c for c in swept.cells if c.axes == {"calibration.r_min": 0.8}]
    assert len(at) == len(plain) == 4
    for c in at:
        twin = plain[c.id.replace("_r_min0.8", "")]
        assert (c.loss_params, c.settings, c.seed, c.benchmarks, c.eval_k) == (
            twin.loss_params, twin.settings, twin.seed, twin.benchmarks, twin.eval_k,
        )  # fmt: skip


def test_no_axes_keeps_ids_and_hashes():
    """configs/quickstart.yaml's cells: the ids and config hashes they had before axes existed."""
    plan = load_plan(ROOT / "configs" / "quickstart.yaml")
    got = {c.id: c.config_hash for c in plan.cells}
    assert len(got) == 51
    assert "axes" not in plan.cells[0].to_dict() and "select" not in plan.cells[0].to_dict()
    # changed once on purpose by local.cpu_kernels (issue 49; were 0aa1415f690f, 828d7db60962):
    # a pinned cell computes other numbers than the natural runs of an older store
    assert got["kl-atomic-s0"] == "f6e175fd6e61"
    assert got["gspo-s2"] == "b4d563fcba87"


def test_two_axes_ids_params_tags(tmp_path):
    plan = _plan(
        tmp_path,
        BASE
        + "axes: {probe.steps: [1, 2], objective.loss_agg_mode: [token-mean, seq-mean-token-sum]}\n",
    )
    assert len(plan.cells) == 2 * 2 * 2
    c = plan.cells[-1]
    assert c.id == "kl-mc_steps2_loss_agg_modeseq-mean-token-sum-s0"
    assert c.settings["steps"] == 2 and c.loss_params["loss_agg_mode"] == "seq-mean-token-sum"
    tags = cell_tags(c, attempt=1)
    assert json.loads(tags["gppo.axes"]) == c.axes
    assert tags["gppo.axis.probe.steps"] == "2"
    assert cell_params(c)["axis.objective.loss_agg_mode"] == "seq-mean-token-sum"


def test_adding_an_axis_value_keeps_every_existing_cell(tmp_path):
    before = _plan(tmp_path, BASE + "baselines: [gspo]\naxes: {calibration.r_min: [0.7, 0.8]}\n")
    after = _plan(
        tmp_path, BASE + "baselines: [gspo]\naxes: {calibration.r_min: [0.7, 0.8, 0.9]}\n"
    )
    old = {c.id: c.config_hash for c in before.cells}
    new = {c.id: c.config_hash for c in after.cells}
    assert {k: new[k] for k in old} == old
    assert sorted(set(new) - set(old)) == ["kl-mc_r_min0.9-s0", "tv-mc_r_min0.9-s0"]


def test_delta_axis_moves_only_its_divergence(tmp_path):
    plan = _plan(tmp_path, BASE + "axes: {calibration.delta.kl: [0.1, 0.2]}\n")
    assert [c.id for c in plan.cells] == ["tv-mc-s0", "kl-mc_kl0.1-s0", "kl-mc_kl0.2-s0"]


def test_plan_prints_axes_and_run_count(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "grid.yaml").write_text(
        BASE + "baselines: [gspo]\nseeds: 2\naxes: {calibration.r_min: [0.7, 0.8, 0.9]}\n"
    )
    result = CliRunner().invoke(app, ["plan", "grid.yaml"])
    assert result.exit_code == 0, result.output
    assert "axes: calibration.r_min = 0.7, 0.8, 0.9" in result.stdout
    assert "14 runs" in result.stdout
    assert "gspo: not moved by calibration.r_min" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.yaml"]


values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(),
    st.text(min_size=1, max_size=8),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["calibration.r_min", "local.lr", "eval.k"]), values))
def test_axis_suffix_is_safe_and_keeps_the_seed_last(point):
    cid = cell_id("alpha:0.5", "mc", 3, axis_suffix(point))
    assert re.fullmatch(r"[A-Za-z0-9._-]+", cid)
    assert cid.rpartition("-s")[2] == "3"


def test_radius_sweep_at_0_8_is_the_quick_start():
    """configs/radius-sweep.yaml's cells at r_min = 0.8 (and its baselines) train as the quick
    start's: the same loss parameters, settings, seeds, benchmarks and resources."""
    quick = {c.id: c for c in load_plan(ROOT / "configs" / "quickstart.yaml").cells}
    radius = load_plan(ROOT / "configs" / "radius-sweep.yaml").cells
    assert len(radius) == 12 * 3 * 3 + 5 * 3
    at = [c for c in radius if c.axes.get("calibration.r_min", 0.8) == 0.8]
    assert len(at) == len(quick)
    for c in at:
        twin = quick[c.id.replace("_r_min0.8", "")]
        assert (c.method, c.loss_params, c.settings, c.seed, c.benchmarks, c.resources) == (
            twin.method, twin.loss_params, twin.settings, twin.seed, twin.benchmarks, twin.resources,
        )  # fmt: skip


@pytest.mark.slow  # MLflow's SQLite store
def test_plan_forecasts_from_comparable_earlier_runs(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from gppo import metrics as M
    from gppo.backends.base import get_backend
    from gppo.store.cost import cost_key

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    (tmp_path / "grid.yaml").write_text(
        BASE + f"tracking: {{uri: '{uri}'}}\nray: {{max_concurrent: 2}}\n"
        "axes: {calibration.r_min: [0.7, 0.8, 0.9]}\n"
    )
    cell = load_plan(tmp_path / "grid.yaml").cells[0]
    probe = get_backend("probe")
    key = cost_key(cell, probe.job(cell).resources, probe.cost_settings(cell))  # r_min is free
    client = MlflowClient(uri)
    exp = client.create_experiment("earlier")
    for wall_s in (100, 300):  # mean 200 s a run
        run = client.create_run(exp, tags={M.TAG_ROLE: M.ROLE_CELL, M.TAG_COST_KEY: key})
        client.log_metric(run.info.run_id, M.COST_WALL_S, wall_s)
        client.set_terminated(run.info.run_id, "FINISHED")
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(app, ["plan", "grid.yaml"])
    assert result.exit_code == 0, result.output
    # 6 runs x 200 s / 2 at a time = 600 s; 1 CPU each: 6 x 200 / 3600 CPU-h
    assert "0.333 CPU-h [" in result.stdout and "0 GPU-h for 6 runs" in result.stdout
    assert "wall time ≈ 10m00s [" in result.stdout and "at max_concurrent=2" in result.stdout
    assert "(store: mean of 2 comparable finished runs)" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # read only


@pytest.mark.parametrize("columns", ["100", "200"])
def test_plan_table_shows_each_axis_and_never_cuts_an_id(tmp_path, monkeypatch, columns):
    monkeypatch.chdir(tmp_path)
    text = BASE + "baselines: [gspo]\naxes: {calibration.r_min: [0.7, 0.8], probe.steps: [1, 20]}\n"
    (tmp_path / "grid.yaml").write_text(text)
    result = CliRunner().invoke(app, ["plan", "grid.yaml"], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    table = result.stdout.split("job commands")[0]
    assert all(len(line) <= int(columns) for line in table.splitlines())
    header = next(ln for ln in table.splitlines() if " cell " in ln).replace("┃", " ").split()
    assert header[:3] == ["cell", "r_min", "steps"]
    rows = {
        ln.replace("│", " ").split()[0]: ln.replace("│", " ").split()[1:3]
        for ln in table.splitlines()
        if "-s0" in ln
    }
    cells = load_plan(tmp_path / "grid.yaml").cells
    # every id whole, with its axis values; gspo (not moved by r_min) stands at "all" of them
    assert rows == {
        c.id: [str(c.axes.get("calibration.r_min", "all")), str(c.axes["probe.steps"])]
        for c in cells
    }
    assert rows["gspo_steps20-s0"] == ["all", "20"]


@pytest.mark.parametrize(
    ("axes", "home"),
    [
        ("{local.lr: [3.0e-5, 1.0e-4, 3.0e-4]}", {"local.lr": 1.0e-4}),  # the backend's default
        ("{calibration.r_min: [0.9, 0.8]}", {"calibration.r_min": 0.8}),  # the spec's default
        ("{local.steps: [3, 5]}", {"local.steps": 5}),  # the spec's own local: steps: 5
        ("{local.lr: [3.0e-5, 3.0e-4]}", {"local.lr": 3.0e-5}),  # 1e-4 is no point: the first
    ],
)
def test_home_point_is_the_specs_own_resolved_value(tmp_path, axes, home):
    from gppo.grid.axes import plain_values

    spec = tmp_path / "grid.yaml"
    spec.write_text(
        "name: h\nbackend: local\nlocal: {domain: math, steps: 5}\n"
        f"grid: {{divergences: [tv], estimators: [mc]}}\naxes: {axes}\n"
    )
    assert plain_values(load_plan(spec).spec) == home


def test_a_list_valued_axis_expands(tmp_path):
    """An axis whose values are lists (``objective.ratio_bounds``, allowed by the spec's rules)
    expands like any other: each point's cells carry its bounds (was a TypeError: unhashable)."""
    plan = _plan(tmp_path, BASE + "axes: {objective.ratio_bounds: [[0.5, 10.0], [0.5, 20.0]]}\n")
    bounds = {tuple(c.axes["objective.ratio_bounds"]) for c in plan.cells}
    assert bounds == {(0.5, 10.0), (0.5, 20.0)}
    for c in plan.cells:
        assert list(c.loss_params["ratio_bounds"]) == c.axes["objective.ratio_bounds"]
