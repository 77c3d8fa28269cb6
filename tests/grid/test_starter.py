"""``gppo-sweep init`` (gppo.grid.starter; issue 61): a commented starter spec per backend that
`plan` accepts, the schema named on its first line, an existing file never overwritten."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from gppo.backends.base import get_backend
from gppo.cli import app
from gppo.grid.json_schema import MODELINE, SHIPPED
from gppo.grid.starter import backends


@pytest.fixture
def no_preflight(monkeypatch, tmp_path):
    """plan forecasts from the backend's timing of one step, which the testbed measures in a
    process: none here (the fast tier starts none)."""
    for name in backends():
        monkeypatch.setattr(type(get_backend(name)), "step_timing", lambda self, cell: None)
    monkeypatch.setenv("GPPO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)


def test_a_starter_per_built_in_backend():
    assert backends() == ["local", "trl", "verl"]


@pytest.mark.parametrize(
    "backend",
    # verl's plan renders each cell's Hydra overrides through verl itself (~50 s on a loaded
    # 2-core machine): the slow tier; the fast one loads and expands its starter below
    ["local", pytest.param("verl", marks=pytest.mark.slow), "trl"],
)
def test_init_then_plan(tmp_path, no_preflight, backend):
    (tmp_path / "specs").mkdir()
    path = tmp_path / "specs" / f"my {backend} study.yaml"
    result = CliRunner().invoke(app, ["init", str(path), "--backend", backend])
    assert result.exit_code == 0, result.output
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0].startswith(MODELINE)
    assert (path.parent / lines[0].removeprefix(MODELINE)).resolve() == SHIPPED
    spec = yaml.safe_load(text)
    assert spec["name"] == f"my-{backend}-study" and spec["backend"] == backend
    for line in lines:  # every section explained in one line
        if line and not line.startswith((" ", "#")):
            assert "  # " in line, f"no comment: {line!r}"
    errors = list(jsonschema.Draft7Validator(json.loads(SHIPPED.read_text())).iter_errors(spec))
    assert not errors, errors
    result = CliRunner().invoke(app, ["plan", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"sweep my-{backend}-study-" in result.stdout
    result = CliRunner().invoke(app, ["plan", str(path), "seeds=1", "--json"])
    assert result.exit_code == 0, result.output
    assert {r["seed"] for r in json.loads(result.stdout)} == {0}


def test_the_verl_starter_loads_and_expands(tmp_path):
    from gppo.grid import load_plan
    from gppo.grid.starter import write_starter

    plan = load_plan(write_starter(tmp_path / "paper.yaml", "verl"), ["seeds=2"])
    assert plan.spec.backend == "verl" and len(plan.cells) == 26  # 4 x 3 + gspo, 2 seeds
    assert plan.cells[0].settings["model_path"] == "/shared/models/Qwen3-8B-Base"


def test_init_writes_grid_yaml_by_default_and_never_overwrites(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["init"])
    assert result.exit_code == 0, result.output
    written = (tmp_path / "grid.yaml").read_text()
    assert "backend: local" in written and "name: grid " in written
    result = CliRunner().invoke(app, ["init", "--backend", "verl"])
    assert result.exit_code == 2
    assert result.stderr == "grid.yaml: the file exists; give another PATH (nothing written)\n"
    assert (tmp_path / "grid.yaml").read_text() == written


def test_init_refuses_an_unknown_backend_and_a_missing_folder(tmp_path):
    result = CliRunner().invoke(app, ["init", str(tmp_path / "x.yaml"), "-b", "jax"])
    assert result.exit_code == 2
    assert result.stderr.endswith("backend: no starter spec for 'jax'; known: local, trl, verl\n")
    result = CliRunner().invoke(app, ["init", str(tmp_path / "no" / "x.yaml")])
    assert result.exit_code == 2 and "no folder" in result.stderr
    assert list(tmp_path.iterdir()) == []
