"""A TRL cell of more than one process: ``num_gpus: N`` (or ``num_processes: N`` on a CPU) runs
the entrypoint as N data-parallel processes under ``accelerate launch``. The job's argv and
resources, the settings' one-line refusals, and a real two-process CPU cell (gloo) on the
testbed route, run by the backend's own job into a SQLite MLflow run: both processes train the
same weights, the run has each step and evaluation once and the finished tag; a second attempt
resumes both processes from TRL's checkpoint in the same run."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from gppo import metrics as M
from gppo.backends.base import get_backend
from gppo.backends.cell_run import protocol_violations
from gppo.backends.checkpoints import OWNER_FILE
from gppo.backends.trl.__main__ import cell_checkpoint_dir
from gppo.backends.trl.settings import TrlSettings
from gppo.cell import Cell
from gppo.errors import GppoError
from gppo.grid import load_plan
from gppo.metrics import PERF_RESUMED_FROM as RESUMED_FROM

STEPS, K, MINIBATCHES = 2, 2, 2
BENCHMARKS = ("add-small",)


def _cell(**settings) -> Cell:
    return Cell(id="tv-mc-s0", method="gppo", seed=0, backend="trl", settings=settings,
                loss_params={"divergence": "tv", "estimator": "mc"}, benchmarks=BENCHMARKS,
                eval_k=K)  # fmt: skip


def test_n_gpus_run_n_processes_under_accelerate_launch():
    job = get_backend("trl").job(_cell(num_gpus=4, prompts_per_step=4, dtype="bfloat16"))
    argv = list(job.argv)
    assert argv[:4] == [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"]
    assert argv[argv.index("--num_processes") + 1] == "4"
    assert argv[argv.index("--mixed_precision") + 1] == "bf16"
    assert argv[argv.index("--main_process_port") + 1] == "0"  # a free port: cells share nodes
    assert argv[-4:-1] == ["-m", "gppo.backends.trl", "--cell"]
    assert job.resources.num_gpus == 4.0
    one = get_backend("trl").job(_cell(num_gpus=1))
    assert list(one.argv[:3]) == [sys.executable, "-m", "gppo.backends.trl"]
    cpu = get_backend("trl").job(_cell(num_processes=3, prompts_per_step=3))
    assert "--num_processes" in cpu.argv and cpu.resources.num_cpus == 3.0


@pytest.mark.parametrize(
    ("trl", "names"),
    [
        ({"num_gpus": 3}, ("prompts_per_step * group_size", "minibatches: 8", "num_gpus: 3")),
        ({"num_processes": 3}, ("prompts_per_step * group_size", "num_processes: 3")),
        ({"num_gpus": 2, "num_processes": 4}, ("num_processes: 4", "num_gpus: 2")),
    ],
)
def test_processes_that_do_not_split_a_step_are_refused_in_one_line(tmp_path, trl, names):
    spec = {"name": "trl-n", "backend": "trl", "trl": trl, "seeds": [0],
            "grid": {"divergences": ["tv"], "estimators": ["mc"]}}  # fmt: skip
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(GppoError) as info:
        load_plan(path)
    message = str(info.value)
    assert "\n" not in message and all(n in message for n in names), message


def _attempt(cell: Cell, env: dict[str, str], log) -> str:
    job = get_backend("trl").job(cell)
    proc = subprocess.run(
        list(job.argv), env={**env, **job.env}, capture_output=True, text=True, timeout=540
    )
    out = proc.stdout + proc.stderr
    log.write_text(out)
    assert proc.returncode == 0, out[-4000:]
    return out


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_cpu_processes_train_one_cell_and_log_it_once(tmp_path):
    from mlflow.tracking import MlflowClient

    cell = _cell(
        steps=STEPS, prompts_per_step=4, group_size=8, minibatches=MINIBATCHES, num_processes=2,
        save_every=1, checkpoint_dir=str(tmp_path / "ckpt"),
    )  # fmt: skip
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("trl-n")).info.run_id
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update({M.ENV_RUN_ID: run_id, M.ENV_TRACKING_URI: uri})
    out = _attempt(cell, env, tmp_path / "attempt1.log")
    trained = _trained(out)
    assert trained["0"].startswith(f"{STEPS * MINIBATCHES} updates"), trained
    assert out.count("avg@2:") == 2, out[-3000:]  # the base and the final policy, by one process

    def check(attempt: str, final: int, evaluated: list[int]) -> None:
        problems = protocol_violations(client, run_id, eval_k=K, benchmarks=BENCHMARKS,
                                       final_step=final)  # fmt: skip
        assert problems == [], (attempt, problems)
        for name in (M.TRAIN_SCORE, M.train_metric("entropy")):
            steps = [int(m.step) for m in client.get_metric_history(run_id, name)]
            assert sorted(steps) == list(range(1, final + 1)), (attempt, name, steps)  # once
        evals = client.get_metric_history(run_id, M.eval_metric(BENCHMARKS[0], K))
        assert sorted(int(m.step) for m in evals) == evaluated, (attempt, evals)
        assert client.get_run(run_id).data.tags[M.TAG_FINISHED] == "true"

    check("first", STEPS, [0, STEPS])
    # a retried attempt that has one more step to go: the same cell's checkpoint at STEPS under
    # the longer cell's directory (its settings hash differs); both processes resume it
    longer = dataclasses.replace(cell, settings={**cell.settings, "steps": STEPS + 1})
    done = cell_checkpoint_dir(cell, TrlSettings.model_validate(cell.settings))
    ahead = cell_checkpoint_dir(longer, TrlSettings.model_validate(longer.settings))
    shutil.copytree(
        done / f"checkpoint-{STEPS * MINIBATCHES}", ahead / f"checkpoint-{STEPS * MINIBATCHES}"
    )
    shutil.copy(done / OWNER_FILE, ahead / OWNER_FILE)  # the same run's checkpoints
    out = _attempt(longer, env, tmp_path / "attempt2.log")
    assert out.count("[trl] resuming from") == 2, out[-3000:]
    assert _trained(out)["0"].startswith(f"{(STEPS + 1) * MINIBATCHES} updates")
    check("second", STEPS + 1, [0, STEPS, STEPS + 1])
    assert client.get_run(run_id).data.metrics[RESUMED_FROM] == STEPS


def _trained(out: str) -> dict[str, str]:
    """Each process's line: both processes trained, to the same weights."""
    trained = dict(re.findall(r"process (\d) of 2: (\d+ updates, weights sum \S+)", out))
    assert set(trained) == {"0", "1"}, out[-3000:]
    assert trained["0"] == trained["1"], trained
    return trained


def test_more_gpus_than_the_machine_shows_are_refused_in_one_line():
    """The cell's processes refuse, before any set-up, to run on fewer CUDA GPUs than
    ``num_gpus`` (this machine's count, here none or one)."""
    import torch

    from gppo.backends.trl.__main__ import process_state
    from gppo.errors import BackendError

    n = torch.cuda.device_count() + 1
    s = TrlSettings(num_gpus=n, prompts_per_step=4 * n)
    with pytest.raises(BackendError) as info:
        process_state(s)
    message = str(info.value)
    assert "\n" not in message and f"num_gpus: {n}" in message, message


def test_a_cell_of_two_processes_run_as_one_is_refused_in_one_line(tmp_path):
    """Without ``accelerate launch`` each process would take half of every step for the whole."""
    from gppo.backends.trl.__main__ import run_cell
    from gppo.errors import BackendError

    cell = _cell(num_processes=2, prompts_per_step=2, checkpoint_dir=str(tmp_path / "ckpt"))
    with pytest.raises(BackendError) as info:
        run_cell(cell, None)
    message = str(info.value)
    assert "\n" not in message and "2 processes" in message and "accelerate launch" in message
