"""``gppo-sweep check SPEC``: the shipped paper specs pass cell by cell; a cell verl
refuses, or a loss that disagrees, fails its own line and the exit code; other backends are
refused in one line."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from gppo.cli import app

from .conftest import REPO


def _lines(out: str, prefix: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(prefix)]


def test_paper_math_passes_every_cell(math_actors):  # math_actors: the composition is cached
    result = CliRunner().invoke(app, ["check", str(REPO / "configs" / "paper-math.yaml")])
    assert result.exit_code == 0, result.output
    ok = _lines(result.output, "ok ")
    assert len(ok) == 17 and not _lines(result.output, "FAIL")
    assert any("kl-binary-s0: loss mode gppo" in line for line in ok)
    assert any("gmpo-s0: loss mode geo_mean" in line for line in ok)
    assert "17/17 cells ok" in result.output


def _check_kl_binary_with(tmp_path, raw_override: str) -> str:
    """``check`` on kl/mc and kl/binary, kl/binary given one raw verl override: exit 1, kl/mc
    ok, and kl/binary's one FAIL line (returned)."""
    spec = yaml.safe_load((REPO / "configs" / "paper-math.yaml").read_text())
    spec["grid"] = {"divergences": ["kl"], "estimators": ["mc", "binary"]}
    spec["baselines"] = []
    spec["reference"] = "kl/mc"
    spec["overrides"] = {"kl-binary": {"verl": {"extra_overrides": [raw_override]}}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 1, result.output
    assert len(_lines(result.output, "ok    kl-mc-s0")) == 1
    assert "1/2 cells ok" in result.output
    (fail,) = _lines(result.output, "FAIL")
    return fail


def test_a_failing_cell_fails_its_line_and_the_exit_code(tmp_path):
    fail = _check_kl_binary_with(tmp_path, "actor_rollout_ref.actor.loss_agg_mode=bogus")
    assert fail.startswith("FAIL  kl-binary-s0: config:") and "bogus" in fail


def test_a_backend_without_pre_flight_checks_is_refused_in_one_line():
    result = CliRunner().invoke(app, ["check", str(REPO / "configs" / "quickstart.yaml")])
    assert result.exit_code == 2
    assert "backend: 'local' has no pre-flight checks" in result.output


def test_check_runs_the_trl_backends_own_pre_flight():
    """The CLI's check is the backend's hook: the TRL preset's cells each get their loss line."""
    result = CliRunner().invoke(app, ["check", str(REPO / "configs" / "trl-cpu-testbed.yaml")])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("ok    ")]
    assert len(lines) == 6 and all("gradient finite" in line for line in lines)


def test_a_loss_that_disagrees_with_ours_fails_its_line(tmp_path):
    """A raw verl override that changes the loss behind the spec's back (δ 0.5 in verl's policy
    loss config, the spec's calibrated δ in gppo.objectives): verl's loss and ours disagree, and
    the check says so on the cell's own line."""
    fail = _check_kl_binary_with(tmp_path, "actor_rollout_ref.actor.policy_loss.delta=0.5")
    assert fail.startswith("FAIL  kl-binary-s0: loss: verl "), fail
    assert "!= gppo.objectives" in fail, fail
