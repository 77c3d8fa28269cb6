"""The verl Backend: the golden command of one cell (also shown in docs/cluster-guide.md), its
environment against verl's own Ray runtime env, one-line errors, and no verl import at import."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import replace

import pytest

from gppo.backends.base import get_backend
from gppo.backends.verl.backend import VERL_RESERVED_ENV, VerlBackend
from gppo.backends.verl.validate import VerlConfigError

from .conftest import DATA, REPO

GOLDEN = DATA / "golden_paper-math_kl-atomic-s0.json"
GUIDE = REPO / "docs" / "cluster-guide.md"
UPDATE = os.environ.get("GPPO_UPDATE_GOLDEN") == "1"
START, END = "<!-- golden-command:start -->", "<!-- golden-command:end -->"


def display(argv) -> str:
    """The command as the cluster guide prints it: one argument per line for the overrides."""
    head = shlex.join(argv[: argv.index("--") + 1])
    tail = [shlex.quote(a) for a in argv[argv.index("--") + 1 :]]
    return " \\\n  ".join([head, *tail])


def _cell(all_paper_cells, config="paper-math", cid="kl-atomic-s0"):
    return next(c for c in all_paper_cells[config] if c.id == cid)


@pytest.mark.slow
def test_golden_command(all_paper_cells):
    job = get_backend("verl").job(_cell(all_paper_cells))
    resources = json.loads(json.dumps(vars(job.resources)))  # custom resources: tuple -> list
    got = {"argv": list(job.argv), "env": dict(job.env), "resources": resources}
    block = f"{START}\n```bash\n{display(job.argv)}\n```\n{END}"
    if UPDATE:
        GOLDEN.write_text(json.dumps(got, indent=1) + "\n")
        text = GUIDE.read_text()
        GUIDE.write_text(re.sub(f"{START}.*?{END}", lambda _: block, text, flags=re.S))
    assert got == json.loads(GOLDEN.read_text()), "rerun with GPPO_UPDATE_GOLDEN=1 if intended"
    assert block in GUIDE.read_text(), "docs/cluster-guide.md does not show the golden command"
    assert job.argv[:3] == ("python", "-m", "gppo.backends.verl")
    assert job.resources.num_gpus == 8
    assert job.entrypoint == shlex.join(job.argv)
    assert VerlBackend.reuse_run_on_retry and not VerlBackend.entrypoint_holds_resources


def test_job_env_merges_with_verls_ray_runtime_env(all_paper_cells, composed, monkeypatch):
    """Ray merges the job's runtime env with verl's ray.init(runtime_env=...) and fails on any
    shared key: run verl's own get_ppo_ray_runtime_env in the job's environment and merge."""
    from ray.runtime_env.runtime_env import _merge_runtime_env
    from verl.trainer import constants_ppo

    cell = _cell(all_paper_cells)
    job = get_backend("verl").job(cell)
    env = {**job.env, "MLFLOW_TRACKING_URI": "http://mlflow:5000", "MLFLOW_RUN_ID": "abc"}
    for key, value in env.items():  # the driver of a Ray job sees its runtime env
        monkeypatch.setenv(key, value)
    cfg = composed["paper-math", cell.id][2]
    verl_env = constants_ppo.get_ppo_ray_runtime_env(cfg)
    assert _merge_runtime_env({"env_vars": env}, verl_env) is not None
    # our reserved list covers every variable verl may put there
    for key in ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "NCCL_ALGO", "NCCL_DETERMINISTIC"):
        monkeypatch.setenv(key, "1")
    for key in constants_ppo.PPO_RAY_RUNTIME_ENV["env_vars"]:
        monkeypatch.delenv(key, raising=False)
    assert set(constants_ppo.get_ppo_ray_runtime_env(cfg)["env_vars"]) <= VERL_RESERVED_ENV
    assert env["VERL_USE_EXTERNAL_MODULES"] == "gppo.backends.verl.plugin"


def test_errors_are_one_line(all_paper_cells):
    backend = get_backend("verl")
    cell = _cell(all_paper_cells)
    bad_env = replace(cell, settings={**cell.settings, "env": {"NCCL_DEBUG": "INFO"}})
    with pytest.raises(ValueError, match="may not set NCCL_DEBUG"):
        backend.job(bad_env)
    extra = ["actor_rollout_ref.actor.policy_loss.estimator=exact"]
    bad = replace(cell, settings={**cell.settings, "extra_overrides": extra})
    with pytest.raises(VerlConfigError) as err:
        backend.job(bad)
    assert "\n" not in str(err.value) and "unknown estimator 'exact'" in str(err.value)
    missing = replace(cell, benchmarks=("aime24", "hmmt25"))
    with pytest.raises(ValueError, match=r"no val_files entry for benchmark.*hmmt25"):
        backend.job(missing)


def test_entrypoint_check_only(all_paper_cells, capsys):
    from gppo.backends.verl.__main__ import main

    argv = list(get_backend("verl").job(_cell(all_paper_cells)).argv[3:])
    assert main([*argv[: argv.index("--")], "--check-only", *argv[argv.index("--") :]]) == 0
    assert "overrides valid" in capsys.readouterr().out
    bad = [*argv[: argv.index("--")], "--check-only", "--", "trainer.nope=1"]
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err


def test_wrapper_hands_the_overrides_to_verls_own_hydra_main(all_paper_cells, capsys):
    """The wrapper calls verl.trainer.main_ppo.main with sys.argv = overrides: Hydra's CLI path
    (here with `--cfg job`, which prints the composed config instead of training)."""
    import yaml

    from gppo.backends.verl.__main__ import _run_verl

    argv = list(get_backend("verl").job(_cell(all_paper_cells)).argv)
    overrides = argv[argv.index("--") + 1 :]
    capsys.readouterr()
    _run_verl(["--cfg", "job", *overrides])
    cfg = yaml.safe_load(capsys.readouterr().out)
    loss = cfg["actor_rollout_ref"]["actor"]["policy_loss"]
    assert loss["_target_"] == "gppo.backends.verl.plugin.GPPOPolicyLossConfig"
    assert (loss["loss_mode"], loss["divergence"], loss["estimator"]) == ("gppo", "kl", "atomic")
    assert cfg["data"]["val_files"][3] == "/shared/data/gppo/smt25.parquet"
    assert cfg["trainer"]["experiment_name"] == "kl-atomic-s0"


@pytest.mark.slow
def test_import_and_job_without_verl(all_paper_cells):
    """`import gppo.backends.verl.backend` (and job()) work where verl is not installed."""
    cell = _cell(all_paper_cells)
    code = (
        "import sys\n"
        "sys.modules['verl'] = None  # as if not installed\n"
        "from gppo.cell import Cell\n"
        "from gppo.backends.base import get_backend\n"
        "import gppo.backends.verl.backend, gppo.cli.data\n"
        f"job = get_backend('verl').job(Cell.from_json({cell.to_json()!r}))\n"
        "assert not [m for m in sys.modules if m.startswith('verl.')]\n"
        "print(job.entrypoint)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == get_backend("verl").job(cell).entrypoint
