"""Grid schema, defaults, expansion, cell ids, sweep id and per-cell hashes."""

from __future__ import annotations

import math

import pytest

from gppo.grid import SpecError, expand, load_plan, parse_spec, sweep_id
from gppo.grid.schema import BASELINES

LOCALISH = {"name": "t", "backend": "probe", "probe": {"steps": 1}}


@pytest.fixture(autouse=True)
def _probe():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import sweep.probe_backend  # noqa: F401


def spec(**kw):
    return parse_spec({**LOCALISH, **kw}, "g.yaml")


def test_defaults_are_the_papers_grid():
    s = spec()
    assert s.grid.divergences == ["tv", "chi2", "kl", "hellinger"]
    assert s.grid.estimators == ["mc", "atomic", "binary"]
    assert s.baselines == [] and s.seeds == 1 and s.reference == "tv/mc"
    assert s.calibration.r_min == 0.8 and s.eval.k == 8
    assert s.retries.max == 2 and s.ray.max_concurrent == 2 and s.ray.address is None
    assert s.tracking.uri is None and s.experiment == "t"
    cells = expand(s)
    assert [c.id for c in cells[:3]] == ["tv-mc-s0", "tv-atomic-s0", "tv-binary-s0"]
    assert len(cells) == 12 and all(c.method == "gppo" for c in cells)


def test_calibrated_deltas_and_loss_params():
    cells = {c.id: c for c in expand(spec())}
    assert cells["tv-mc-s0"].delta == pytest.approx(0.2)
    assert cells["chi2-atomic-s0"].delta == pytest.approx(0.04)
    assert cells["kl-binary-s0"].delta == pytest.approx(-math.log(0.8))
    assert cells["hellinger-mc-s0"].delta == pytest.approx((1 - math.sqrt(0.8)) ** 2)
    p = cells["kl-atomic-s0"].loss_params
    assert p["divergence"] == "kl" and p["estimator"] == "atomic"
    assert p["ratio_bounds"] == [0.5, 10.0] and p["dual_clip"] == 10.0
    assert p["loss_agg_mode"] == "token-mean"


def test_baselines_seeds_alpha_and_order():
    s = spec(
        grid={"divergences": ["alpha:0.5", "kl"], "estimators": ["mc"]},
        baselines=["gspo", "cispo"],
        seeds=[3, 1],
    )
    ids = [c.id for c in expand(s)]
    assert ids == [
        "alpha0.5-mc-s3", "alpha0.5-mc-s1", "kl-mc-s3", "kl-mc-s1",
        "gspo-s3", "gspo-s1", "cispo-s3", "cispo-s1",
    ]  # fmt: skip
    gspo = next(c for c in expand(s) if c.id == "gspo-s1")
    assert gspo.method == "gspo" and gspo.divergence is None and gspo.delta is None
    assert gspo.seed == 1 and gspo.loss_params  # paper defaults resolved by the registry


def test_delta_precedence():
    s = spec(
        grid={"divergences": ["kl", "tv"], "estimators": ["mc", "atomic"]},
        seeds=2,
        calibration={"r_min": 0.9, "delta": {"kl": 0.3, "kl-atomic": 0.4, "kl-atomic-s1": 0.5}},
        overrides={"tv-mc-s1": {"delta": 0.7}},
    )
    d = {c.id: c.delta for c in expand(s)}
    assert d["kl-mc-s0"] == 0.3 and d["kl-atomic-s0"] == 0.4 and d["kl-atomic-s1"] == 0.5
    assert d["tv-mc-s0"] == pytest.approx(0.1) and d["tv-mc-s1"] == 0.7


def test_overrides_merge_settings_and_resources():
    s = spec(
        grid={"divergences": ["kl"], "estimators": ["mc", "atomic"]},
        seeds=2,
        overrides={
            "kl-atomic": {"probe": {"steps": 5}, "resources": {"num_cpus": 2}},
            "kl-atomic-s1": {"probe": {"sleep_s": 0.5}},
        },
    )
    cells = {c.id: c for c in expand(s)}
    assert cells["kl-mc-s0"].settings["steps"] == 1
    assert cells["kl-atomic-s0"].settings["steps"] == 5
    assert cells["kl-atomic-s1"].settings == {**cells["kl-atomic-s0"].settings, "sleep_s": 0.5}
    assert cells["kl-atomic-s1"].resources.num_cpus == 2
    assert cells["kl-mc-s0"].resources.num_cpus == 1


def test_expansion_is_deterministic_and_cells_round_trip():
    a, b = expand(spec(seeds=3)), expand(spec(seeds=3))
    assert [c.to_json() for c in a] == [c.to_json() for c in b]
    from gppo.grid import Cell

    assert all(Cell.from_json(c.to_json()) == c for c in a)


def test_a_cell_stores_its_coordinates_and_delta_once_and_keeps_its_config_hash():
    """δ, divergence and estimator live in ``loss_params`` only (read through properties); the
    serialised cell still names them, so a sweep's existing runs keep their config hashes."""
    import dataclasses

    from helpers import make_cell

    from gppo.grid import Cell

    assert {"delta", "divergence", "estimator"}.isdisjoint(f.name for f in dataclasses.fields(Cell))
    cells = {c.id: c for c in expand(spec())}
    kl = cells["kl-atomic-s0"]
    assert (kl.divergence, kl.estimator, kl.delta) == ("kl", "atomic", kl.loss_params["delta"])
    gspo = make_cell(method="gspo", seed=1, loss_params={"clip_ratio_low": 3e-4})
    assert (gspo.divergence, gspo.estimator, gspo.delta) == (None, None, None)
    assert Cell.from_json(kl.to_json()) == kl
    # hashes of these cells before δ moved into loss_params (5a052fc..8f9c221): resume unchanged
    assert make_cell("kl", "atomic", delta=0.2).config_hash == "364f06f5f2b0"
    assert gspo.config_hash == "a0137f43e0ac"


def test_sweep_id_is_stable_and_a_changed_cell_gets_a_new_hash():
    base = spec(seeds=2)
    changed = spec(seeds=2, overrides={"kl-atomic-s1": {"probe": {"steps": 9}}})
    assert sweep_id(base) == sweep_id(changed)
    assert sweep_id(base).startswith("t-") and len(sweep_id(base)) == len("t-") + 8
    h0 = {c.id: c.config_hash for c in expand(base)}
    h1 = {c.id: c.config_hash for c in expand(changed)}
    assert [k for k in h0 if h0[k] != h1[k]] == ["kl-atomic-s1"]
    assert sweep_id(spec(tracking={"experiment": "other"})) != sweep_id(base)


def test_benchmarks_default_and_checked():
    assert expand(spec())[0].benchmarks == ("b1",)
    assert expand(spec(benchmarks=["b2"]))[0].benchmarks == ("b2",)
    with pytest.raises(SpecError, match=r"benchmarks\[1\]: unknown benchmark 'zz'; known: b1, b2"):
        expand(spec(benchmarks=["b1", "zz"]), "g.yaml")


def test_baseline_list_is_the_papers():
    assert set(BASELINES) == {"gspo", "gmpo", "sapo", "cispo", "clip_cov"}


def test_load_plan_from_file(tmp_path):
    p = tmp_path / "grid.yaml"
    p.write_text("name: fromfile\nbackend: probe\nprobe: {steps: 1}\nseeds: [0]\n")
    plan = load_plan(p)
    assert len(plan.cells) == 12 and plan.sweep_id.startswith("fromfile-")
    assert plan.cell("kl-mc-s0").divergence == "kl"


def test_a_spec_without_backend_or_eval_gets_the_defaults_written_once():
    """``backend`` and ``eval.k`` default to gppo.cell's constants, in the YAML reader, the schema
    and the cells alike; the tuner reads a base spec's backend through the same reader."""
    from gppo.cell import DEFAULT_BACKEND, DEFAULT_EVAL_K
    from gppo.grid.load import backend_of, spec_from_yaml

    plain = spec_from_yaml({"name": "t"}, "g.yaml")
    assert (plain.backend, plain.eval.k) == (DEFAULT_BACKEND, DEFAULT_EVAL_K) == ("local", 8)
    cell = expand(spec(), "g.yaml")[0]
    assert cell.eval_k == DEFAULT_EVAL_K and cell.backend == "probe"
    assert backend_of({"name": "t"}) == DEFAULT_BACKEND
    assert backend_of({"name": "t", "backend": "verl"}) == "verl"
