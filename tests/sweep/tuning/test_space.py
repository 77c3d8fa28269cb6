"""Search space → Optuna params → one cell through the grid loader (pure, real Optuna)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from gppo.cell import cell_id
from gppo.objectives import calibrate_delta
from gppo.sweep.tuning import load_tune_spec
from gppo.sweep.tuning.cells import trial_cell
from gppo.sweep.tuning.space import (
    alpha_name,
    best_grid,
    best_spec,
    config_from_params,
    corner_configs,
    suggest,
    trial_grid,
)

from .conftest import spec_dict, write


def _spec(tmp_path: Path, **extra):
    return load_tune_spec(write(tmp_path, spec_dict(tmp_path, **extra)))


def test_trial_maps_to_one_cell_with_calibrated_delta(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    params = {"divergence": "kl", "estimator": "atomic", "r_min": 0.75, "lr": 2e-3}
    cfg = config_from_params(params, spec.tune.space)
    cell, grid = trial_cell(spec, cfg, 7)
    assert cell.id == "kl-atomic-s3" and cell.method == "gppo" and cell.seed == 3
    assert cell.delta == pytest.approx(calibrate_delta("kl", 0.75))
    assert cell.settings["lr"] == pytest.approx(2e-3) and cell.backend == "tuneprobe"
    assert cell.benchmarks == ("p1", "p2") and cell.eval_k == 4
    assert grid.name == "tp-t7"


def test_alpha_family_delta_per_divergence_and_settings(tmp_path: Path) -> None:
    space = {
        "divergence": ["tv", "alpha"],
        "alpha": {"low": 0.3, "high": 2.5},
        "estimator": "binary",
        "radius": {"param": "delta", "low": 0.01, "high": 0.3},
        "lr": None,
        "settings": {"width": {"low": 2, "high": 8, "int": True, "log": False}, "steps": [3, 5]},
    }
    spec = _spec(tmp_path, tune={"space": space})
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(0))
    seen = set()
    for _ in range(12):
        trial = study.ask()
        cfg = suggest(trial, spec.tune.space)
        cell, _ = trial_cell(spec, cfg, trial.number)
        family = trial.params["divergence"]
        assert set(trial.params) == {"divergence", f"delta_{family}", "width", "steps"} | (
            {"alpha"} if family == "alpha" else set()
        )
        assert cell.delta == pytest.approx(trial.params[f"delta_{family}"])
        assert cell.settings["width"] == trial.params["width"] and cell.settings["steps"] in (3, 5)
        if family == "alpha":
            assert cell.divergence == alpha_name(trial.params["alpha"])
            assert cell.id == cell_id(cell.divergence, "binary", 3)
        seen.add(family)
        study.tell(trial, 0.0)
    assert seen == {"tv", "alpha"}
    assert alpha_name(0.99996) == "alpha:0.9999" and alpha_name(1.00004) == "alpha:1.0001"
    assert len(corner_configs(spec.tune.space)) == 4


def test_base_overrides_kept_for_their_cell_only_and_best_grid(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        overrides={
            "tv-mc": {"tuneprobe": {"width": 9}},
            "kl-atomic-s3": {"tuneprobe": {"width": 7}},
        },
        calibration={"delta": {"kl": 0.5}},
    )
    tv = config_from_params(
        {"divergence": "tv", "estimator": "mc", "r_min": 0.8, "lr": 1e-3}, spec.tune.space
    )
    kl = config_from_params(
        {"divergence": "kl", "estimator": "atomic", "r_min": 0.8, "lr": 1e-3}, spec.tune.space
    )
    assert trial_cell(spec, tv, 0)[0].settings["width"] == 9
    cell = trial_cell(spec, kl, 1)[0]
    assert cell.settings["width"] == 7
    assert cell.delta == pytest.approx(calibrate_delta("kl", 0.8))  # tuned r_min wins over δ
    assert trial_grid(spec, tv, 0)["overrides"] == {"tv-mc": {"tuneprobe": {"width": 9}}}
    best = best_grid(spec, kl)
    assert best["seeds"] == [3, 4] and best["name"] == "tp-best"
    assert best["grid"] == {"divergences": ["kl"], "estimators": ["atomic"]}


def test_a_search_key_may_be_any_path_an_axis_may_vary(tmp_path):
    """``objective.loss_agg_mode`` in tune.space.settings reaches the trial's loss, as
    ``axes: {objective.loss_agg_mode: [...]}`` would; a plain key stays a backend setting."""
    from gppo.grid import expand
    from gppo.sweep.tuning import load_tune_spec
    from gppo.sweep.tuning.space import TrialConfig, trial_spec

    from .conftest import merge, spec_dict, write

    data = merge(
        spec_dict(tmp_path),
        {"tune": {"space": {"settings": {"objective.loss_agg_mode": ["seq-mean-token-sum"]}}}},
    )
    spec = load_tune_spec(write(tmp_path, data))
    cfg = TrialConfig("tv", "mc", settings={"objective.loss_agg_mode": "seq-mean-token-sum"})
    (cell,) = expand(trial_spec(spec, cfg, 0))
    assert cell.loss_params["loss_agg_mode"] == "seq-mean-token-sum"
    cfg = TrialConfig("tv", "mc", lr_key="lr", lr=0.003)
    (cell,) = expand(trial_spec(spec, cfg, 1))
    assert cell.settings["lr"] == 0.003


def test_a_base_with_adaptive_seeds_tunes_on_its_first_seed_and_keeps_them_in_best(tmp_path):
    """``tune`` is unaffected by adaptive seeds (issue 48): a trial runs the base's first seed,
    ``best.yaml`` keeps ``seeds: {min, max}``, and its one-cell sweep runs ``min`` seeds."""
    from gppo.grid.expand import expand
    from gppo.grid.load import Plan
    from gppo.stats.rounds import Rounds

    spec = _spec(
        tmp_path, seeds={"min": 2, "max": 5}, overrides={"tv-mc-s4": {"tuneprobe": {"width": 9}}}
    )
    tv = config_from_params(
        {"divergence": "tv", "estimator": "mc", "r_min": 0.8, "lr": 1e-3}, spec.tune.space
    )
    assert trial_cell(spec, tv, 0)[0].seed == 0
    best = best_grid(spec, tv)
    assert best["seeds"] == {"min": 2, "max": 5}
    assert best["overrides"] == {"tv-mc-s4": {"tuneprobe": {"width": 9}}}  # a seed of max's
    grid = best_spec(spec, tv)
    rounds = Rounds.of_plan(Plan("best.yaml", grid, "best", tuple(expand(grid, "best.yaml"))))
    assert rounds.wanted({}) == {"tv-mc-s0", "tv-mc-s1"}
    assert rounds.wanted({"tv-mc-s0": 40.0, "tv-mc-s1": 42.0}) == {"tv-mc-s0", "tv-mc-s1"}
