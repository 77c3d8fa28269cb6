"""The cost key holds every setting that changes a run's time (issue 57, item 4), as each backend's
settings model marks its fields (``DRIVES_COST`` / ``NO_COST``), without Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gppo.backends.base import built_in_backends, get_backend
from gppo.backends.local.timing import cache_path
from gppo.grid import load_plan
from gppo.store.cost import cost_key, cost_settings, drives_cost
from gppo.sweep.planning.forecast import NONE, STORE, forecast


def local_plan(tmp_path: Path, local: dict[str, Any], **extra: Any):
    spec = {
        "name": "key",
        "backend": "local",
        "local": {"domain": "math", "steps": 10, **local},
        "grid": {"divergences": ["tv"], "estimators": ["mc"]},
        "seeds": 1,
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db"},
        **extra,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_plan(path)


def key_of(cell) -> str:
    backend = get_backend(cell.backend)
    return cost_key(cell, backend.job(cell).resources, backend.cost_settings(cell))


@pytest.mark.parametrize("name", built_in_backends())
def test_every_field_of_every_backend_is_marked_as_driving_cost_or_not(name):
    model = get_backend(name).settings_model
    unmarked = [k for k, f in model.model_fields.items() if drives_cost(f) is None]
    assert model.model_fields and not unmarked, f"{name}: mark {unmarked} DRIVES_COST or NO_COST"


def test_the_local_fields_the_key_left_out_are_in_it_and_the_learning_rate_is_not(tmp_path):
    base = key_of(local_plan(tmp_path, {}).cells[0])
    moved = {
        "d_model": 64, "n_layers": 3, "n_heads": 8, "warmstart_steps": 2000,
        "warmstart_check_every": 25, "warmstart_noise": 0.2, "warmstart_seed": 3,
        "cpu_kernels": "natural", "num_threads": 2, "steps": 20,
    }  # fmt: skip
    for field, value in moved.items():
        assert key_of(local_plan(tmp_path, {field: value}).cells[0]) != base, field
    for field, value in {"lr": 3e-4, "eval_seed": 7, "weight_decay": 0.1}.items():
        assert key_of(local_plan(tmp_path, {field: value}).cells[0]) == base, field


def test_an_unmarked_plugin_field_counts_as_driving_cost():
    from pydantic import BaseModel

    class Plugin(BaseModel):
        size: int = 1

    assert cost_settings(Plugin, {"size": 2}) == {"size": 2}


def test_two_model_sizes_forecast_differently(tmp_path):
    plan = local_plan(tmp_path, {}, axes={"local.d_model": [128, 64]})
    by_size = {c.settings["d_model"]: c for c in plan.cells}
    assert set(by_size) == {128, 64} and key_of(by_size[128]) != key_of(by_size[64])
    # the store holds runs of the larger model only: the smaller one is not forecast from them
    big = key_of(by_size[128])
    fc = forecast(
        plan, preflight=False, walls=lambda _u, keys: {k: [300.0] for k in keys if k == big}
    )
    assert fc.cells[by_size[128].id].source.kind == STORE
    assert fc.cells[by_size[128].id].seconds == 300.0
    assert fc.cells[by_size[64].id].source.kind == NONE
    # each size from its own runs
    walls = {big: [300.0], key_of(by_size[64]): [90.0]}
    fc = forecast(plan, preflight=False, walls=lambda _u, keys: {k: walls[k] for k in keys})
    assert [fc.cells[by_size[s].id].seconds for s in (128, 64)] == [300.0, 90.0]


def test_the_step_timing_cache_keeps_each_model_size_and_kernel_mode_apart(tmp_path):
    paths = {
        cache_path(local_plan(tmp_path, local).cells[0])
        for local in ({}, {"d_model": 64}, {"cpu_kernels": "natural"}, {"warmstart_steps": 10})
    }
    assert len(paths) == 4
