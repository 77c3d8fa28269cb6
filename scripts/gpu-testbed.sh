#!/usr/bin/env bash
# The verl learning preset on one CUDA GPU: configs/verl-cpu-testbed.yaml (the testbed's shipped
# math base exported as GPT-2, its tasks and exact reward, its RL settings, float32) with only the
# hardware settings changed, so a GPU check learns too and lands where the CPU run lands.
#
# Needs a machine with an NVIDIA GPU, vLLM and verl 0.9.x installed next to gppo-sweep (nothing is
# downloaded: the model and data are built here from the package). Never run by CI.
#
#   scripts/gpu-testbed.sh                         # tv-mc-s0, the preset's 60 steps
#   CELL=tv-atomic-s1 STEPS=30 scripts/gpu-testbed.sh
#
# Variables: GPUS (default 1), CELL (default tv-mc-s0), STEPS (default: the preset's), MIN_GAIN
# (points of avg@8 over the base the final policy must reach; default 10, the hidden check's bar
# for 60 steps), WORK (scratch directory, default a new /tmp dir), PYTHON (default python),
# DRY_RUN=1 (stop after checking the cell's overrides with verl's config: runs without a GPU).
#
# What it does: writes the preset with `cpu: false`, real GPUs and vLLM's GPU memory share; builds
# the cell's Job with the verl backend (the assets are built, the overrides checked against verl's
# config); creates an MLflow run in $WORK/mlflow.db and runs the job's command with the job's
# environment (verl starts a local Ray itself); then reads the testbed evaluator's avg@8 of the
# base (step 0) and of the final policy from the run, and checks the gain.
set -euo pipefail
cd "$(dirname "$0")/.."

GPUS="${GPUS:-1}"
CELL="${CELL:-tv-mc-s0}"
PYTHON="${PYTHON:-python}"
MIN_GAIN="${MIN_GAIN:-10}"
WORK="${WORK:-$(mktemp -d /tmp/gppo-gpu-testbed.XXXXXX)}"
mkdir -p "$WORK"
echo "gpu-testbed: work dir $WORK"

"$PYTHON" - "$WORK" "$GPUS" "${STEPS:-}" "$PYTHON" "$CELL" "$MIN_GAIN" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
from gpu_common import run_cell_job, write_spec

work, gpus, steps, python, cell_id = Path(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:6]
min_gain = float(sys.argv[6])


def hardware(spec):
    verl = spec["verl"]
    verl.update(cpu=False, gpus_per_node=gpus, rollout_gpu_memory_utilization=0.3,
                checkpoint_dir=f"{work}/checkpoints", python=python)
    if steps:
        verl.update(total_steps=int(steps), eval_every=int(steps), save_every=int(steps))
    spec["ray"] = {"resources": {"num_cpus": 1, "num_gpus": gpus}}


spec_path = write_spec("verl-cpu-testbed.yaml", work, "gpu-testbed", hardware)
client, run_id, cell, settings = run_cell_job(spec_path, cell_id, "gpu-testbed")
k = cell.eval_k
scores = {m.step: m.value for m in client.get_metric_history(run_id, f"eval/avg_at_{k}")}
base, final = scores.get(0), scores.get(settings.total_steps)
if base is None or final is None:
    sys.exit(f"gpu-testbed: FAILED: eval/avg_at_{k} at steps {sorted(scores)}")
gain = 100 * (final - base)
print(f"gpu-testbed: base {100 * base:.1f} %, final {100 * final:.1f} %, gain {gain:+.1f} points")
if gain < min_gain:
    sys.exit(f"gpu-testbed: FAILED: gain {gain:+.1f} points < {min_gain}")
print("gpu-testbed: OK")
PY
