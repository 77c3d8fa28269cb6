"""The contract every registered backend keeps, parametrised from the backend registry (like
Optuna's sampler contract tests): a new backend is checked by registering it, nothing else.

Per backend: its settings model validates a spec's section and refuses unknown keys; its default
benchmarks are among the known ones; ``job(cell)`` is pure, runs its own entrypoint module, quotes
its argv so that Ray's shell gives it back unchanged, carries the cell (or what the entrypoint
needs of it) and the cell's CPU, memory and custom resources; and the entrypoint module can be found without importing
it (the job runs it as ``python -m``)."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from gppo.backends.base import BACKENDS, Backend, Job, get_backend
from gppo.cell import Cell
from gppo.grid import load_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sweep.probe_backend  # noqa: F401  (the tests' own backends count too)

#: the smallest section each backend needs (the rest: its defaults)
MINIMAL = {
    "verl": {
        "model_path": "Qwen/Qwen2.5-0.5B",
        "train_file": "/data/train.parquet",
        "val_files": {"AIME24": "/data/aime24.parquet"},
    }
}


def _plan(tmp_path: Path, name: str):
    import yaml

    spec = {
        "name": "contract",
        "backend": name,
        "grid": {"divergences": ["kl"], "estimators": ["atomic"]},
        "baselines": ["gspo"],
        "seeds": 1,
    }
    if MINIMAL.get(name):
        spec[name] = MINIMAL[name]
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_plan(path)


@pytest.fixture(params=BACKENDS.names())
def backend(request) -> Backend:
    return get_backend(request.param)


def test_settings_model_validates_and_refuses_unknown_keys(backend):
    model = backend.validate_settings(MINIMAL.get(backend.name, {}))
    assert isinstance(model, backend.settings_model)
    again = backend.validate_settings(model.model_dump(mode="json"))  # a cell's settings
    assert again == model
    with pytest.raises(ValidationError):
        backend.validate_settings({**MINIMAL.get(backend.name, {}), "no_such_setting": 1})


def test_default_benchmarks_are_known(backend):
    settings = backend.validate_settings(MINIMAL.get(backend.name, {}))
    defaults = backend.default_benchmarks(settings)
    known = backend.known_benchmarks(settings)
    assert all(isinstance(b, str) and b for b in defaults)
    if known is not None:
        assert set(defaults) <= set(known)


def test_job_runs_its_entrypoint_with_the_cell(backend, tmp_path):
    plan = _plan(tmp_path, backend.name)
    assert {c.method for c in plan.cells} == {"gppo", "gspo"}
    for cell in plan.cells:
        job = backend.job(cell)
        assert isinstance(job, Job) and backend.job(cell) == job  # pure
        assert shlex.split(job.entrypoint) == list(job.argv)  # Ray's shell gives argv back
        # what the cell asks Ray for (a backend may size GPUs from its own settings: verl n_gpus)
        r, want = job.resources, cell.resources
        assert (r.num_cpus, r.memory_gb, r.custom) == (want.num_cpus, want.memory_gb, want.custom)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in job.env.items())
        module = backend.entrypoint_module
        if "-m" in job.argv:
            assert job.argv[job.argv.index("-m") + 1] == module
        # the cell travels whole (a JSON argument) or the job names the cell's own settings
        payload = [a for a in job.argv if a.startswith("{")]
        if payload:
            assert Cell.from_json(payload[0]) == cell


def test_entrypoint_module_can_be_found(backend):
    module = backend.entrypoint_module
    spec = importlib.util.find_spec(module)
    assert spec is not None, module
    if spec.submodule_search_locations:  # a package: run through its __main__
        assert importlib.util.find_spec(f"{module}.__main__") is not None
