"""Spec overrides on the command line (gppo.grid.overrides; issue 61): KEY=VALUE tokens are edits
of the file, checked by the spec's own models, one line naming the override when wrong."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gppo.cli import app
from gppo.errors import SpecError, TuneSpecError
from gppo.grid import load_plan
from gppo.grid.overrides import is_override, resolve, split_args

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))
import sweep.probe_backend  # noqa: E402, F401

SPEC = """\
name: ovtest
backend: probe
probe: {steps: 1}
grid: {divergences: [tv, kl], estimators: [mc, atomic]}
baselines: [gspo]
seeds: 2
tracking: {uri: "sqlite:///TMP/mlflow.db"}
"""


def write(tmp_path: Path, text: str = SPEC, name: str = "grid.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text.replace("TMP", str(tmp_path)))
    return path


def cells(plan) -> list[tuple[str, str]]:
    return [(c.id, c.config_hash) for c in plan.cells]


def test_a_token_with_equals_is_an_override():
    assert is_override("seeds=5") and not is_override("kl-mc-s0")
    assert split_args(["kl-mc-s0", "seeds=5", "x=a=b"]) == (["kl-mc-s0"], ["seeds=5", "x=a=b"])


def test_overrides_are_edits_of_the_file(tmp_path):
    """The same sweep id and plan as the file edited on disk; the plan keeps the tokens."""
    overrides = [
        "seeds=3",
        "probe.steps=4",
        "grid.estimators=[mc,binary]",
        "tracking.experiment=other",
        "calibration.delta.kl=0.3",
        "overrides.tv-mc.probe.note=hi",
        "ray.resources.custom.trainer.node=1",
    ]
    plan = load_plan(write(tmp_path), overrides)
    edited = SPEC.replace("steps: 1", "steps: 4").replace("seeds: 2", "seeds: 3")
    edited = edited.replace("estimators: [mc, atomic]", "estimators: [mc, binary]")
    edited = edited.replace('"}', '", experiment: other}') + (
        "calibration: {delta: {kl: 0.3}}\n"
        "overrides: {tv-mc: {probe: {note: hi}}}\n"
        "ray: {resources: {custom: {trainer.node: 1}}}\n"
    )
    on_disk = load_plan(write(tmp_path, edited, "edited.yaml"))
    assert plan.sweep_id == on_disk.sweep_id != load_plan(write(tmp_path)).sweep_id
    assert cells(plan) == cells(on_disk) and len(plan.cells) == 15
    assert plan.spec == on_disk.spec
    assert plan.overrides == tuple(overrides) and on_disk.overrides == ()


def test_an_override_replaces_a_mapping_and_a_later_one_wins(tmp_path):
    plan = load_plan(write(tmp_path), ["tracking={experiment: x}", "seeds=1", "seeds=[4, 5]"])
    assert plan.spec.tracking.uri is None and plan.spec.experiment == "x"
    assert plan.spec.seed_list == [4, 5]


def test_a_cell_id_with_a_dot_and_an_axis_path_are_one_key(tmp_path):
    spec = SPEC.replace("[tv, kl]", "[tv, 'alpha:0.5']")
    plan = load_plan(
        write(tmp_path, spec), ["overrides.alpha0.5-mc.delta=0.3", "axes.probe.steps=[1, 2]"]
    )
    assert plan.spec.overrides["alpha0.5-mc"].delta == 0.3
    assert plan.spec.axes == {"probe.steps": [1, 2]}


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("probe.stepz=30", "override 'probe.stepz=30': unknown field probe.stepz; allowed: domain, steps,"),
        ("seedz=5", "override 'seedz=5': unknown field seedz; allowed: name, backend, probe, grid,"),
        ("ray.max_concurent=3", "override 'ray.max_concurent=3': unknown field ray.max_concurent; allowed: address,"),
        ("probe.steps=abc", "override 'probe.steps=abc': probe.steps: Input should be a valid integer"),
        ("ray.max_concurrent=0", "override 'ray.max_concurrent=0': ray.max_concurrent: Input should be greater than or equal to 1"),
        ("grid.divergences=[tv,kll]", "override 'grid.divergences=[tv,kll]': grid.divergences[1]: unknown divergence 'kll'"),
        ("seeds.min=1", "override 'seeds.min=1': seeds: min must be at least 2"),
        ("tracking.uri.x=1", "override 'tracking.uri.x=1': tracking.uri is a str, not a mapping"),
        ("grid.estimators=[mc", "override 'grid.estimators=[mc': grid.estimators: the value is not YAML"),
        ("=3", "override '=3': '' is not a dotted path"),
        ("trainer.n_gpus_per_node=8", "override 'trainer.n_gpus_per_node=8': trainer is one of verl's own Hydra keys, not a spec path: it goes to verl.extra_overrides with backend: verl (this spec's backend is probe)"),
    ],
)  # fmt: skip
def test_a_wrong_override_is_one_line_naming_it(tmp_path, override, says):
    with pytest.raises(SpecError) as err:
        load_plan(write(tmp_path), [override])
    assert str(err.value).startswith(says), str(err.value)
    assert "\n" not in str(err.value)


def test_an_error_no_single_override_explains_names_the_file_and_the_overrides(tmp_path):
    with pytest.raises(SpecError) as err:  # the default reference tv/mc left the grid
        load_plan(write(tmp_path), ["reference=kl/binary"])
    assert str(err.value).startswith("override 'reference=kl/binary': reference:")


def test_verl_hydra_keys_go_to_extra_overrides():
    spec = ROOT / "configs" / "paper-math.yaml"
    tokens = ["trainer.n_gpus_per_node=8", "actor_rollout_ref.actor.optim.lr=1e-6", "verl.lr=2e-6"]
    plan = load_plan(spec, [*tokens, "+trainer.val_before_train=false"])
    assert plan.spec.settings["extra_overrides"] == [
        "trainer.n_gpus_per_node=8",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "+trainer.val_before_train=false",
    ]
    assert plan.cells[0].settings["extra_overrides"][-1] == "+trainer.val_before_train=false"
    assert plan.cells[0].settings["lr"] == 2e-6
    with pytest.raises(SpecError, match=r"unknown field trainr; allowed: .*verl's own Hydra keys"):
        load_plan(spec, ["trainr.x=1"])


def test_the_cli_refuses_a_misspelled_override_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = str(write(tmp_path))
    for cmd in (
        ["launch", spec, "probe.stepz=30"],
        ["status", spec, "probe.stepz=30"],
        ["logs", spec, "tv-mc-s0", "probe.stepz=30"],
        ["cancel", spec, "probe.stepz=30"],
        ["report", spec, "probe.stepz=30"],
        ["ui", spec, "probe.stepz=30"],
        ["check", spec, "probe.stepz=30"],
        ["plan", spec, "probe.stepz=30"],
    ):
        result = CliRunner().invoke(app, cmd)
        assert result.exit_code == 2, (cmd, result.output)
        assert result.stderr.startswith("override 'probe.stepz=30': unknown field probe.stepz")
        assert len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.yaml"]  # no store, no state


def test_positionals_and_overrides_in_any_order(tmp_path):
    spec = str(write(tmp_path))
    result = CliRunner().invoke(app, ["logs", spec, "kl-mc-s2"])  # seeds: 2 in the file
    assert result.exit_code == 2 and result.stderr.startswith(f"{spec}: no cell 'kl-mc-s2'")
    result = CliRunner().invoke(app, ["logs", spec, "seeds=3", "kl-mc-s2"])
    assert result.exit_code == 0, result.output  # the cell exists; no run yet, no log
    result = CliRunner().invoke(app, ["logs", spec, "seeds=3"])
    assert result.exit_code == 2 and result.stderr == "missing argument CELL\n"
    result = CliRunner().invoke(app, ["status", spec, "kl-mc-s0"])
    assert result.exit_code == 2 and result.stderr.startswith("unexpected argument 'kl-mc-s0'")
    result = CliRunner().invoke(app, ["cancel", spec, "kl-mc-s9", "seeds=3"])
    assert result.exit_code == 2 and result.stderr.startswith(f"{spec}: no cell 'kl-mc-s9'")


def test_status_with_overrides_plans_the_edited_spec(tmp_path):
    spec = str(write(tmp_path))
    result = CliRunner().invoke(app, ["status", spec, "seeds=1", "baselines=[]", "--json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 4


def test_plan_prints_the_overrides_and_the_resolved_spec(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = write(tmp_path)
    result = CliRunner().invoke(app, ["plan", str(spec), "seeds=1", "grid.estimators=[mc]"])
    assert result.exit_code == 0, result.output
    assert "overrides: seeds=1 'grid.estimators=[mc]'" in result.stdout
    result = CliRunner().invoke(app, ["plan", str(spec), "seeds=1", "--resolved"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"# {spec} with seeds=1, resolved (sweep ovtest-")
    resolved = yaml.safe_load(result.stdout)
    assert resolved["seeds"] == 1 and resolved["probe"]["domain"] == "probe"  # defaults filled
    assert resolved["ray"]["max_concurrent"] == 2
    again = tmp_path / "resolved.yaml"
    again.write_text(result.stdout)
    plan, from_resolved = load_plan(spec, ["seeds=1"]), load_plan(again)
    assert plan.sweep_id == from_resolved.sweep_id and cells(plan) == cells(from_resolved)


def test_an_explicit_option_wins_over_an_override(tmp_path, monkeypatch):
    """launch --max-concurrent / --address over ray.max_concurrent= / ray.address=."""
    import gppo.sweep.launch

    seen = {}

    class Launcher:
        def __init__(self, plan, **kwargs):
            seen.update(plan=plan, **kwargs)

        def run(self):
            raise KeyboardInterrupt

    monkeypatch.setattr(gppo.sweep.launch, "Launcher", Launcher)
    spec = str(write(tmp_path))
    cmd = ["launch", spec, "ray.max_concurrent=5", "--max-concurrent", "3", "ray.address=a:1"]
    result = CliRunner().invoke(app, [*cmd, "--address", "b:2"])
    assert result.exit_code == 130, result.output
    assert seen["plan"].spec.ray.max_concurrent == 5 and seen["max_concurrent"] == 3
    assert seen["plan"].spec.ray.address == "a:1" and seen["address"] == "b:2"
    assert seen["plan"].overrides == ("ray.max_concurrent=5", "ray.address=a:1")


def test_report_takes_overrides_and_its_tracking_uri_option_wins(tmp_path, monkeypatch):
    import gppo.store.records

    seen = {}

    def find_sweep(sweep_id, uri, experiment=None):
        seen.update(sweep_id=sweep_id, uri=uri, experiment=experiment)
        raise ValueError("no sweep")

    monkeypatch.setattr(gppo.store.records, "find_sweep", find_sweep)
    spec = str(write(tmp_path))
    cmd = ["report", spec, "tracking.uri=sqlite:///a.db", "tracking.experiment=e"]
    result = CliRunner().invoke(app, [*cmd, "--tracking-uri", "sqlite:///b.db"])
    assert result.exit_code == 2 and result.stderr == "no sweep\n"
    assert seen == {"sweep_id": seen["sweep_id"], "uri": "sqlite:///b.db", "experiment": "e"}
    result = CliRunner().invoke(app, ["report", "--from-csv", "a.csv", "seeds=2"])
    assert result.exit_code == 2
    assert result.stderr == "override 'seeds=2': --from-csv reads no spec to edit\n"


def test_tune_spec_overrides(tmp_path):
    from gppo.sweep.tuning.spec import load_tune_spec, with_overrides

    spec = ROOT / "configs" / "tune-quickstart.yaml"
    ts = load_tune_spec(spec, ["tune.n_trials=7", "local.steps=5", "ray.max_concurrent=3"])
    assert ts.tune.n_trials == 7 and ts.base["local"]["steps"] == 5
    assert ts.base["ray"] == {"address": None, "resources": {"num_cpus": 1, "num_gpus": 0},
                              "max_concurrent": 3}  # fmt: skip
    assert ts.overrides == ("tune.n_trials=7", "local.steps=5", "ray.max_concurrent=3")
    assert with_overrides(ts, n_trials=2).tune.n_trials == 2  # --n-trials wins
    for override, says in [
        ("tune.n_trialz=3", "override 'tune.n_trialz=3': unknown field tune.n_trialz; allowed:"),
        ("grid.estimators=[mc]", "override 'grid.estimators=[mc]': grid: not allowed in a tuning"),
        ("tune.n_trials=0", "override 'tune.n_trials=0': tune.n_trials: Input should be greater"),
    ]:
        with pytest.raises(TuneSpecError) as err:
            load_tune_spec(spec, [override])
        assert str(err.value).startswith(says), str(err.value)


def test_the_tune_command_names_a_wrong_override(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = str(ROOT / "configs" / "tune-quickstart.yaml")
    result = CliRunner().invoke(app, ["tune", spec, "local.stepz=3"])
    assert result.exit_code == 2
    assert result.stderr.startswith("override 'local.stepz=3': unknown field local.stepz")
    result = CliRunner().invoke(app, ["tune", spec, "local.steps=-1"])  # the grid base's check
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("override 'local.steps=-1': local.steps: Input should be")
    result = CliRunner().invoke(app, ["tune", spec, "calibration.r_min=2"])  # the space's check
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"{spec} (with overrides calibration.r_min=2): tune.space:")
    assert list(tmp_path.iterdir()) == []


def test_resolve_keeps_keys_as_the_file_writes_them():
    raw = {"name": "x", "backend": "local"}
    keys = [o.keys for o in resolve(["local.lr=1", "axes.local.lr=[1]", "budget.runs=3"], raw)]
    assert keys == [("local", "lr"), ("axes", "local.lr"), ("budget", "runs")]
