"""Run sharing at the plan: which cells one run serves (gppo.grid.sharing), plan's count."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gppo.cell import Resources
from gppo.cli import app
from gppo.grid import load_plan, parse_spec
from gppo.grid.expand import expand
from gppo.grid.sharing import lead_of, run_count, run_groups, run_key

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"


def test_quickstart_plan_prints_51_cells_48_runs(tmp_path, monkeypatch, timed_preflight) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["plan", str(QUICKSTART)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "51 cells, 48 runs" in result.stdout
    assert "chi2-mc-s0 = tv-mc-s0" in result.stdout
    rows = json.loads(CliRunner().invoke(app, ["plan", str(QUICKSTART), "--json"]).stdout)
    same = {r["cell"]: r["same_runs"] for r in rows if r["same_runs"]}
    assert same == {f"chi2-mc-s{s}": f"tv-mc-s{s}" for s in range(3)}
    assert len({r["run_key"] for r in rows}) == 48


def _cells(**extra):
    spec = {
        "name": "share",
        "backend": "local",
        "grid": {"divergences": ["tv", "chi2", "kl", "alpha:2"], "estimators": ["mc", "atomic"]},
        "baselines": ["gspo"],
        "seeds": 2,
        **extra,
    }
    return expand(parse_spec(spec))


def test_groups_follow_the_function_across_divergences_and_axis_points() -> None:
    # tv/mc at δ 0.2 and 0.3 is [0.8, 1.2] and [0.7, 1.3]; so is chi2/mc at δ 0.04 and 0.09
    cells = _cells(
        axes={"calibration.delta.tv": [0.2, 0.3], "calibration.delta.chi2": [0.04, 0.09]}
    )
    groups = [sorted(c.id for c in g) for g in run_groups(cells) if len(g) > 1]
    for s in (0, 1):  # one run a seed serves each function at every axis point that gives it
        ids = {c.id for c in cells}
        same = sorted(i for i in ids if i.endswith(f"-s{s}") and (
            i.startswith("tv-mc_tv0.2") or i.startswith("chi2-mc_tv0.2_chi20.04")
            or i.startswith("chi2-mc_chi20.04") or i.startswith("alpha2-mc")
        ))  # fmt: skip
        assert same in groups, (same, groups)
        assert (
            sorted(
                i
                for i in ids
                if i.endswith(f"-s{s}") and i.startswith(("tv-mc_tv0.3", "chi2-mc_chi20.09"))
            )
            in groups
        )
    # atomic cells never share (their regions move with μ), nor does the baseline
    assert not any("atomic" in cid or "gspo" in cid for g in groups for cid in g)
    assert run_count(cells) == len(run_groups(cells)) < len(cells)
    # the lead is the group's first cell in plan order; every follower points at it
    leads = lead_of(cells)
    for g in run_groups(cells):
        assert g[0].id not in leads and all(leads[c.id] == g[0].id for c in g[1:])


def test_a_radius_axis_shares_at_each_point_not_across() -> None:
    cells = _cells(axes={"calibration.r_min": [0.7, 0.8]})
    leads = lead_of(cells)
    assert leads["chi2-mc_r_min0.7-s0"] == "tv-mc_r_min0.7-s0"
    assert leads["chi2-mc_r_min0.8-s1"] == "tv-mc_r_min0.8-s1"
    assert run_key(next(c for c in cells if c.id == "tv-mc_r_min0.7-s0")) != run_key(
        next(c for c in cells if c.id == "tv-mc_r_min0.8-s0")
    )


def test_an_override_on_one_twin_keeps_it_apart() -> None:
    cells = _cells(overrides={"chi2-mc-s1": {"local": {"lr": 2e-4}}})
    leads = lead_of(cells)
    assert leads["chi2-mc-s0"] == "tv-mc-s0" and "chi2-mc-s1" not in leads


# any bit of difference outside the loss's name keeps two cells apart
_CHANGES = [
    lambda c: {"seed": c.seed + 1},
    lambda c: {"settings": {**c.settings, "lr": c.settings["lr"] * (1 + 2**-52)}},
    lambda c: {"settings": {**c.settings, "steps": c.settings["steps"] + 1}},
    lambda c: {"resources": Resources(num_cpus=2.0)},
    lambda c: {"resources": dataclasses.replace(c.resources, memory_gb=1.0)},
    lambda c: {"eval_k": c.eval_k + 1},
    lambda c: {"benchmarks": (*c.benchmarks, "extra")},
    lambda c: {"select": True},
    lambda c: {"backend": "trl"},
    lambda c: {"loss_params": {**c.loss_params, "dual_clip": 11.0}},
    lambda c: {"loss_params": {**c.loss_params, "loss_agg_mode": "seq-mean-token-mean"}},
]


@functools.cache
def _quickstart():
    return load_plan(QUICKSTART).cells


@settings(max_examples=40, deadline=None)
@given(index=st.integers(0, 1000), change=st.sampled_from(_CHANGES))
def test_any_other_difference_is_another_run(index, change) -> None:
    cells = _quickstart()
    cell = cells[index % len(cells)]
    changed = change(cell)
    params = changed.get("loss_params", {})
    assume(set(params) <= set(cell.loss_params) | {"loss_agg_mode"})  # a baseline: no dual_clip
    other = dataclasses.replace(cell, **changed)
    assert run_key(other) != run_key(cell)
    twin = next((c for c in cells if lead_of(cells).get(c.id) == cell.id), None)
    if twin is not None:  # ... and the same change to both twins keeps them together
        assert run_key(dataclasses.replace(twin, **change(twin))) == run_key(other)


@pytest.mark.parametrize("extra", [{}, {"seeds": [3, 7]}])
def test_naming_does_not_enter_the_key(extra) -> None:
    cells = _cells(**extra)
    tv = next(c for c in cells if c.id.startswith("tv-mc"))
    renamed = dataclasses.replace(tv, id="other-s9", axes={"x": 1})
    assert run_key(renamed) == run_key(tv)
