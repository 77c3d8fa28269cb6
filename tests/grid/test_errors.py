"""Malformed specs: each gives ONE line ``FILE: path: message`` on stderr, exit 2, no traceback,
nothing launched and nothing written (plan and launch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gppo.cli import app

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
import sweep.probe_backend  # noqa: E402, F401

BASE = "name: bad\nbackend: probe\nprobe: {steps: 1}\n"

#: (yaml text, expected stderr line after "grid.yaml: ")
CORPUS = [
    (BASE + "grid: {divergences: [tv, kl, kll]}\n",
     "grid.divergences[2]: unknown divergence 'kll'; known: tv, chi2, kl, hellinger, rkl, js (and alpha:<a>)"),
    (BASE + "grid: {estimators: [mc, atomc]}\n",
     "grid.estimators[1]: unknown estimator 'atomc'; known: mc, atomic, binary"),
    (BASE + "grid: {divergences: [tv, tv]}\n", "grid.divergences: duplicate divergence 'tv'"),
    (BASE + "grid: {divergences: []}\n", "grid.divergences: List should have at least 1 item"),
    (BASE + "baselines: [gspo, ppo]\n",
     "baselines[1]: unknown baseline 'ppo'; known: gspo, gmpo, sapo, cispo, clip_cov"),
    (BASE + "colour: red\n", "colour: unknown key 'colour'; allowed: name, backend, probe, grid,"),
    (BASE + "ray: {max_concurent: 3}\n",
     "ray.max_concurent: unknown key 'max_concurent'; allowed: address, local_head, max_concurrent, resources"),
    (BASE + "ray: {max_concurrent: 0}\n", "ray.max_concurrent: Input should be greater than or equal to 1 (got 0)"),
    (BASE + "calibration: {r_min: 1.5}\n", "calibration.r_min: r_min must be a number in the open interval (0, 1), got 1.5"),
    (BASE + "calibration: {delta: {kl: .inf}}\n", "calibration.delta.kl: delta must be a finite number > 0, got inf"),
    (BASE + "objective: {dual_clip: 1}\n", "objective.dual_clip: dual_clip must be None or a number > 1, got 1.0"),
    (BASE + "seeds: -1\n", "seeds: seeds must be a count in 1..10000, a list of seeds or {min, max} (got -1)"),
    (BASE + "seeds: [0, 0]\n", "seeds: duplicate seed 0"),
    (BASE + "eval: {k: zero}\n", "eval.k: Input should be a valid integer"),
    (BASE + "reference: kl/binary\ngrid: {divergences: [tv], estimators: [mc]}\n",
     "reference: reference 'kl/binary' is not a cell of this grid"),
    (BASE + "benchmarks: [b1, nope]\n", "benchmarks[1]: unknown benchmark 'nope'; known: b1, b2"),
    (BASE + "overrides: {kl-mcc: {delta: 0.1}}\n", "overrides.kl-mcc: no cell 'kl-mcc' in this grid"),
    (BASE + "overrides: {kl-mc-s7: {delta: 0.1}}\n", "overrides.kl-mc-s7: no cell 'kl-mc-s7' in this grid"),
    (BASE + "overrides: {kl-mc: {probe: {stepz: 3}}}\n", "overrides.kl-mc.probe.stepz: unknown key 'stepz'"),
    (BASE + "overrides: {kl-mc: {lr: 3}}\n", "overrides.kl-mc.lr: unknown key 'lr'; allowed: probe, delta, params, resources"),
    (BASE + "overrides: {kl-mc: {params: {clip: 3}}}\n", "overrides.kl-mc.params.clip: unknown parameter 'clip' for a gppo cell"),
    (BASE + "overrides: {kl-mc: {delta: -1}}\n", "overrides.kl-mc.delta: delta must be a finite number > 0, got -1.0"),
    (BASE + "overrides: {kl-mc: {delta: .inf}}\n", "overrides.kl-mc.delta: delta must be a finite number > 0, got inf"),
    (BASE + "overrides: {kl-mc: {params: {dual_clip: 0.5}}}\n", "overrides.kl-mc.params.dual_clip: dual_clip must be None or a number > 1, got 0.5"),
    (BASE + "overrides: {kl-mc: {settings: {steps: 2}}}\n", "overrides.kl-mc.settings: unknown key 'settings'; write the section as 'probe'"),
    ("name: bad\nbackend: probe\nprobe: {steps: many}\n", "probe.steps: Input should be a valid integer"),
    ("name: bad\nbackend: probe\nprobe: {stepz: 1}\n", "probe.stepz: unknown key 'stepz'"),
    ("name: bad\nbackend: probe\nprobe: [1]\n", "probe: must be a mapping of backend settings (got list)"),
    ("name: bad\nbackend: probe\nlocal: {steps: 1}\n", "local: unknown key 'local'; allowed: name, backend, probe,"),
    ("name: bad\nbackend: tpu\n", "backend: unknown backend 'tpu'; known: "),  # order: discovery's
    ("name: 'a b'\nbackend: probe\n", "name: invalid name 'a b'"),
    ("backend: probe\n", "name: required field is missing"),
    ("name: bad\n  backend: [\n", "invalid YAML at line"),
    ("- just\n- a list\n", "the spec must be a YAML mapping (got list)"),
    ("", "the file is empty"),
    ("name: !!python/object/apply:os.system ['touch pwned']\n", "invalid YAML at line 1"),
    (BASE + "baselines: [gspo]\nbaseline_params: {gspo: {bogus: 1}}\n", "baseline_params.gspo: "),
    (BASE + "baseline_params: {sapo: {}}\n", "baseline_params.sapo: 'sapo' is not in baselines"),
    (BASE + "objective: {ratio_bounds: [2, 10]}\n", "objective.ratio_bounds: ratio_bounds must be None or a pair (low, high) with 0 <= low < 1 < high"),
    (BASE + "objective: {loss_agg_mode: mean}\n", "objective.loss_agg_mode: Input should be 'token-mean'"),
    (BASE + "calibration: {delta: {kll: 0.1}}\n", "calibration.delta.kll: 'kll' is neither a divergence"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("command", ["plan", "launch"])
@pytest.mark.parametrize(("text", "expected"), CORPUS, ids=[e[1][:40] for e in CORPUS])
def test_malformed_spec_one_line(tmp_path, monkeypatch, command, text, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "grid.yaml").write_text(text)
    result = CliRunner().invoke(app, [command, "grid.yaml"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("grid.yaml: " + expected), lines[0]
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.yaml"]  # nothing written
    assert not (tmp_path / "pwned").exists()


def test_missing_file(tmp_path):
    result = CliRunner().invoke(app, ["plan", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"{tmp_path / 'nope.yaml'}: file not found"


@pytest.mark.slow
def test_real_process_has_no_traceback_and_writes_nothing(tmp_path):
    (tmp_path / "grid.yaml").write_text("name: bad\ngrid: {divergences: [tv, kl, kll]}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gppo.cli", "launch", "grid.yaml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "grid.yaml: grid.divergences[2]: unknown divergence 'kll'; known: tv, chi2, kl, "
        "hellinger, rkl, js (and alpha:<a>)"
    ]
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.yaml"]
