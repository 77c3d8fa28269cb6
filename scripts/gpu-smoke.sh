#!/usr/bin/env bash
# GPU smoke test of the verl backend: ONE cell of a tiny grid, 2 training steps, a tiny model.
#
# Needs a machine with NVIDIA GPU(s), vLLM and verl 0.9.x installed next to gppo-sweep, and a
# small chat model on local disk (nothing is downloaded). Never run by CI.
#
#   GPUS=1 scripts/gpu-smoke.sh                                     # the tiny random model
#   MODEL=/models/Qwen2.5-0.5B-Instruct GPUS=1 scripts/gpu-smoke.sh  # a real small model
#
# The spec is configs/verl-cpu-smoke.yaml, the CPU mode's preset, with only the hardware settings
# changed (no `cpu`, real GPUs, vLLM's GPU memory share), so the GPU route runs the same cells.
#
# Variables: MODEL (a local chat model; default: the preset's tiny random Qwen2), GPUS (default 1), CELL (default kl-atomic-s0), WORK (scratch
# directory, default a new /tmp dir), PYTHON (default python), DRY_RUN=1 (stop after checking
# the cell's overrides with verl's config: runs without a GPU).
#
# What it does (scripts/gpu_common.py): with MODEL, writes two tiny math datasets, converted by
# `gppo-sweep data prepare`'s converter;
# writes a grid spec (backend verl, 2 steps, eval at steps 0 and 2, checkpoint every step);
# builds the cell's Job with the verl backend (overrides checked against verl's config); creates
# an MLflow run in $WORK/mlflow.db and runs the job's command with the job's environment plus
# MLFLOW_TRACKING_URI / MLFLOW_RUN_ID (verl starts a local Ray itself); then checks that the run
# has eval/avg_at_2 at steps 0 and 2, train/score at steps 1 and 2 and tag gppo.finished=true.
set -euo pipefail
cd "$(dirname "$0")/.."

GPUS="${GPUS:-1}"
CELL="${CELL:-tv-atomic-s0}"
PYTHON="${PYTHON:-python}"
WORK="${WORK:-$(mktemp -d /tmp/gppo-smoke.XXXXXX)}"
mkdir -p "$WORK"
echo "gpu-smoke: work dir $WORK"

# --- 1. data (only with MODEL: otherwise the preset's smoke assets, built locally) ------------
if [ -n "${MODEL:-}" ]; then
  "$PYTHON" scripts/gpu_common.py tiny-math "$WORK"
fi

# --- 2. spec: configs/verl-cpu-smoke.yaml (the CPU mode's preset), hardware settings changed --
# --- 3. run the cell's job as the dispatcher would (minus Ray Jobs), then check its run --------
"$PYTHON" - "$WORK" "$GPUS" "${MODEL:-}" "$PYTHON" "$CELL" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
from gpu_common import run_cell_job, write_spec

work, gpus, model, python, cell_id = Path(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:]


def hardware(spec):
    verl = spec["verl"]
    verl.update(cpu=False, gpus_per_node=gpus, rollout_gpu_memory_utilization=0.4,
                checkpoint_dir=f"{work}/checkpoints", python=python)
    verl["extra_overrides"] = ["actor_rollout_ref.rollout.enforce_eager=true",
                               "actor_rollout_ref.actor.use_torch_compile=false",
                               "data.dataloader_num_workers=0"]
    if model:  # a real chat model and two-row datasets instead of the tiny random model
        verl.update(smoke_assets=False, model_path=model, train_file=f"{work}/train.parquet",
                    val_files={"aime24": f"{work}/aime24.parquet"}, max_prompt_length=256,
                    max_response_length=256)
        spec["benchmarks"] = ["aime24"]
    spec["ray"] = {"resources": {"num_cpus": 1, "num_gpus": gpus}}


spec_path = write_spec("verl-cpu-smoke.yaml", work, "gpu-smoke", hardware)
client, run_id, cell, _ = run_cell_job(spec_path, cell_id, "gpu-smoke")
run = client.get_run(run_id)
def steps(key):
    return sorted(m.step for m in client.get_metric_history(run_id, key))
problems = []
if steps("eval/avg_at_2") != [0, 2]:
    problems.append(f"eval/avg_at_2 at steps {steps('eval/avg_at_2')}, wanted [0, 2]")
bench = cell.benchmarks[0]
if steps(f"eval/{bench}/avg_at_2") != [0, 2]:
    problems.append(f"eval/{bench}/avg_at_2 at steps {steps(f'eval/{bench}/avg_at_2')}")
if steps("train/score") != [1, 2]:
    problems.append(f"train/score at steps {steps('train/score')}, wanted [1, 2]")
if run.data.tags.get("gppo.finished") != "true":
    problems.append("tag gppo.finished is not true")
if not any(k.startswith("train/clip_frac") for k in run.data.metrics):
    problems.append("no GPPO clip diagnostics (train/clip_frac*): was the gppo loss used?")
if problems:
    sys.exit("gpu-smoke: FAILED: " + "; ".join(problems))
print("gpu-smoke: OK", {k: v for k, v in sorted(run.data.metrics.items()) if k.startswith(("eval/", "train/score"))})
PY
