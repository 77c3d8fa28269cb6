"""The grid spec's JSON Schema for editors (gppo.grid.json_schema; issue 61): shipped, never stale,
every grid spec in configs/ names it and passes it, structural errors fail it at their place."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from gppo.cli import app
from gppo.grid.json_schema import MODELINE, SHIPPED, grid_spec_schema, schema_text

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def grid_specs() -> list[Path]:
    """The shipped grid specs (a tuning spec, with ``tune:``, is outside the grid schema)."""
    return [p for p in CONFIGS if "tune" not in yaml.safe_load(p.read_text())]


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SHIPPED.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_the_shipped_schema_is_a_fresh_generation():
    assert SHIPPED.read_text() == schema_text(grid_spec_schema()), (
        "gppo/grid/spec.schema.json is stale: python -m gppo.grid.json_schema"
    )


def test_the_schema_command_prints_it():
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert {"local", "verl", "trl"} <= set(printed["properties"])
    result = CliRunner().invoke(app, ["schema", "--path"])
    assert result.stdout.strip() == str(SHIPPED)


def test_sections_and_descriptions_come_from_the_models():
    schema = json.loads(SHIPPED.read_text())
    props = schema["properties"]
    assert "settings" not in props and schema["required"] == ["name"]
    assert props["local"]["$ref"] == "#/$defs/LocalSettings"
    assert set(schema["$defs"]["Override"]["properties"]) >= {"local", "verl", "trl", "delta"}
    ray = schema["$defs"]["RaySpec"]["properties"]
    assert ray["unreachable_timeout_s"]["description"].startswith("seconds without an answer")
    assert "ClusterUnreachable" in ray["unreachable_timeout_s"]["description"]
    assert ":class:" not in SHIPPED.read_text()
    steps = schema["$defs"]["LocalSettings"]["properties"]["steps"]
    assert steps["type"] == "integer" and steps["description"]


@pytest.mark.parametrize("path", grid_specs(), ids=lambda p: p.name)
def test_every_grid_spec_in_configs_names_the_schema_and_passes_it(path, validator):
    first = path.read_text().splitlines()[0]
    assert first.startswith(MODELINE), f"{path.name}: first line {first!r}"
    assert (path.parent / first.removeprefix(MODELINE)).resolve() == SHIPPED
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(
        yaml.safe_load(path.read_text()))]  # fmt: skip
    assert not errors, errors


def test_tuning_specs_are_outside_it():
    tuning = [p.name for p in CONFIGS if p not in grid_specs()]
    assert tuning == ["tune-quickstart.yaml"]
    assert not (ROOT / "configs" / tuning[0]).read_text().startswith(MODELINE)


@pytest.mark.parametrize(
    ("spec", "where", "says"),
    [
        ({"seedz": 3}, [], "'seedz' was unexpected"),
        ({"ray": {"max_concurrent": "two"}}, ["ray", "max_concurrent"], "is not of type 'integer'"),
        ({"ray": {"resources": {"num_gpu": 1}}}, ["ray", "resources"], "'num_gpu' was unexpected"),
        ({"max_concurrent": 2}, [], "'max_concurrent' was unexpected"),
        ({"grid": {"local": {"steps": 3}}}, ["grid"], "'local' was unexpected"),
        ({"local": {"stepz": 1}}, ["local"], "'stepz' was unexpected"),
        ({"verl": {"lr": 1e-6}}, ["verl"], "should not be valid"),  # backend: local, the default
        ({"backend": "trl", "local": {}}, ["local"], "should not be valid"),
        ({"local": {"steps": "many"}}, ["local", "steps"], "is not of type 'integer'"),
        ({"seeds": "three"}, ["seeds"], "is not valid under any of the given schemas"),
        ({"objective": {"ratio_bounds": [1, 2, 3]}}, ["objective", "ratio_bounds"], "not valid"),
        ({"overrides": {"kl-mc": {"local": {"lrr": 1}}}}, ["overrides", "kl-mc", "local"], "'lrr'"),
        ({"tracking": "sqlite:///x.db"}, ["tracking"], "is not of type 'object'"),
    ],
)
def test_structural_errors_are_rejected_where_they_are(validator, spec, where, says):
    errors = list(validator.iter_errors({"name": "x", **spec}))
    assert errors, spec
    found = [(list(e.absolute_path), e.message) for e in errors]
    assert any(path == where and says in message for path, message in found), found


def test_names_and_axes_stay_the_loaders(validator):
    """Structure only: a registry name or an axis the loader refuses passes the schema."""
    spec = {"name": "x", "grid": {"divergences": ["kll"]}, "axes": {"name": [1, 2]}}
    assert not list(validator.iter_errors(spec))
