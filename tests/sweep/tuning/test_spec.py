"""Malformed tuning specs: one line ``FILE: field.path: message``, exit 2, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gppo.cli import app
from gppo.sweep.tuning import TuneSpecError, load_tune_spec
from gppo.sweep.tuning.cells import check_spec

from .conftest import BASE, merge, spec_dict, write


def _broken(tmp_path: Path) -> list[tuple[str, object, str]]:
    """(case, spec, expected ``field.path: ...`` fragment)."""
    ok = spec_dict(tmp_path)
    without_tune = {k: v for k, v in ok.items() if k != "tune"}
    alpha_no_range = merge(ok, {"tune": {"space": {"divergence": ["tv", "alpha"]}}})
    return [
        ("unknown tune key", merge(ok, {"tune": {"n_trial": 3}}), "tune.n_trial: unknown key"),
        ("r_min >= 1", merge(ok, {"tune": {"space": {"radius": {"high": 1.2}}}}), "tune.space.radius: r_min must lie in (0, 1)"),
        ("log range <= 0", merge(ok, {"tune": {"space": {"lr": {"low": 0.0}}}}), "tune.space.lr: a log-uniform range needs low > 0"),
        ("alpha without range", alpha_no_range, "tune.space: divergence 'alpha' needs"),
        ("unknown divergence", merge(ok, {"tune": {"space": {"divergence": ["tv", "klx"]}}}), "tune.space.divergence: unknown divergence 'klx'"),
        ("unknown estimator", merge(ok, {"tune": {"space": {"estimator": "mcc"}}}), "tune.space.estimator: unknown estimator 'mcc'"),
        ("bad pruner", merge(ok, {"tune": {"pruner": {"kind": "sha"}}}), "tune.pruner"),
        ("pruner field", merge(ok, {"tune": {"pruner": {"kind": "hyperband", "reduction_factor": 1}}}), "tune.pruner.reduction_factor"),
        ("n_parallel 0", merge(ok, {"tune": {"n_parallel": 0}}), "tune.n_parallel:"),
        ("grid key", merge(ok, {"grid": {"divergences": ["tv"]}}), "grid: not allowed in a tuning spec"),
        ("no tune", without_tune, "tune: required field is missing"),
        ("base error", merge(ok, {"tuneprobe": {"steps": "many"}}), "tuneprobe.steps:"),
        ("lr key unknown", merge(ok, {"tune": {"space": {"lr": {"key": "learning_rate"}}}}), "tune.space.lr: unknown key 'learning_rate'"),
        ("bad study name", merge(ok, {"tune": {"study": "a b"}}), "tune.study:"),
        # the search space's keys go through the axes' path parser (gppo/grid/axes.py)
        ("fixed path", merge(ok, {"tune": {"space": {"settings": {"tracking.uri": ["a", "b"]}}}}), "tune.space.settings.tracking.uri: 'tracking.uri' cannot vary within one sweep"),
        ("unknown section path", merge(ok, {"tune": {"space": {"settings": {"objective.clip": [1, 2]}}}}), "tune.space.settings.objective.clip: 'objective.clip' cannot vary"),
        ("bad value at a spec path", merge(ok, {"tune": {"space": {"settings": {"objective.loss_agg_mode": ["mean"]}}}}), "tune.space.settings.objective.loss_agg_mode: Input should be 'token-mean'"),
        ("not yaml", "name: [unclosed\n", "invalid YAML at line 2, column 1"),
        ("comments only", "# nothing\n", ": the file is empty (comments only)"),
    ]  # fmt: skip


def test_malformed_specs_one_line(tmp_path: Path) -> None:
    for case, data, expected in _broken(tmp_path):
        path = write(tmp_path, data)
        with pytest.raises(TuneSpecError) as info:
            check_spec(load_tune_spec(path))
        line = str(info.value)
        assert "\n" not in line, case
        assert line.startswith(f"{path}: "), (case, line)
        assert expected in line, (case, line)
    with pytest.raises(TuneSpecError, match=r"missing\.yaml: file not found$"):
        load_tune_spec(tmp_path / "missing.yaml")  # the grid loader's wording, one line


def test_cli_malformed_spec_exits_2_and_starts_nothing(tmp_path: Path) -> None:
    cases = _broken(tmp_path)
    for case, data, expected in cases[:4] + cases[-4:]:
        path = write(tmp_path, data)
        result = CliRunner().invoke(app, ["tune", str(path)])
        assert result.exit_code == 2, (case, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (case, result.stderr)
    # nothing was started: no MLflow store, no Optuna store, no state dir
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tune.yaml"]


def test_valid_spec_and_quickstart_config(tmp_path: Path) -> None:
    spec = load_tune_spec(write(tmp_path, spec_dict(tmp_path)))
    assert spec.study_name == "tp" and spec.tune.n_parallel == 2
    assert check_spec(spec).settings["steps"] == BASE["tuneprobe"]["steps"]
    quick = Path(__file__).resolve().parents[3] / "configs" / "tune-quickstart.yaml"
    q = load_tune_spec(quick)
    assert q.tune.space.alpha is not None and q.tune.space.radius.param == "r_min"
    assert yaml.safe_load(quick.read_text())["backend"] == "local"
