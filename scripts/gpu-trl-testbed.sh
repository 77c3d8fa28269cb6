#!/usr/bin/env bash
# The TRL testbed preset on one CUDA GPU: configs/trl-cpu-testbed.yaml with only the hardware
# changed (num_gpus: 1), tv/mc, one seed, 2 steps, through `gppo-sweep launch`; checks that the
# run finished with the base evaluation at the shipped record and a final evaluation.
#   scripts/gpu-trl-testbed.sh [STEPS]      (needs the trl extra and a CUDA torch)
# (benchmarks/gpu_trl_cells.py runs the same preset's cells without Ray or MLflow, over seeds.)
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-2}"
work="$(mktemp -d)"
python - "$work" "$steps" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
from gpu_common import launch_on_one_gpu, launch_table1, write_spec
from gppo.testbed.shipped import shipped_record

work, steps = Path(sys.argv[1]), int(sys.argv[2])


def hardware(spec):
    spec["grid"] = {"divergences": ["tv"], "estimators": ["mc"]}
    spec["seeds"] = [0]
    spec["trl"].update(steps=steps, save_every=steps, num_gpus=1, checkpoint_dir=f"{work}/ckpt")
    launch_on_one_gpu(spec, work)


rows = launch_table1(write_spec("trl-cpu-testbed.yaml", work, "trl-gpu-testbed", hardware),
                     "gpu-trl-testbed")
record = shipped_record("math")["avg_at_8"]
base = 100 * sum(record.values()) / len(record)
assert abs(float(rows["base"]["avg"]) - base) <= 0.05, rows["base"]
print(f"gpu-trl-testbed: base {rows['base']['avg']} tv/mc {rows['tv/mc']['avg']} (ok)")
PY
