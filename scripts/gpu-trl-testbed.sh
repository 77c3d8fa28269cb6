#!/usr/bin/env bash
# The TRL testbed preset on one CUDA GPU: configs/trl-cpu-testbed.yaml with only the hardware
# changed (num_gpus: 1), tv/mc, one seed, 2 steps, through `gppo-sweep launch`; checks that the
# run finished with the base evaluation at the shipped record and a final evaluation.
#   scripts/gpu-trl-testbed.sh [STEPS]      (needs the trl extra and a CUDA torch)
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-2}"
work="$(mktemp -d)"
python - "$work" "$steps" <<'PY'
import sys, yaml
work, steps = sys.argv[1], int(sys.argv[2])
spec = yaml.safe_load(open("configs/trl-cpu-testbed.yaml"))
spec["name"] = "trl-gpu-testbed"
spec["grid"] = {"divergences": ["tv"], "estimators": ["mc"]}
spec["seeds"] = [0]
spec["trl"].update(steps=steps, save_every=steps, num_gpus=1, checkpoint_dir=f"{work}/ckpt")
spec["ray"] = {"max_concurrent": 1, "resources": {"num_cpus": 1, "num_gpus": 1},
               "local_head": {"num_cpus": 4, "num_gpus": 1}}
spec["tracking"] = {"uri": f"sqlite:///{work}/mlflow.db"}
yaml.safe_dump(spec, open(f"{work}/grid.yaml", "w"))
PY
(cd "$work" && gppo-sweep launch grid.yaml)
python - "$work" <<'PY'
import csv, glob, sys
from gppo.backends.local.shipped import shipped_record
(table,) = glob.glob(f"{sys.argv[1]}/reports/*/table1.csv")
rows = {r["cell"]: r for r in csv.DictReader(open(table))}
record = shipped_record("math")["avg_at_8"]
base = 100 * sum(record.values()) / len(record)
assert abs(float(rows["base"]["avg"]) - base) <= 0.05, rows["base"]
print(f"gpu-trl-testbed: base {rows['base']['avg']} tv/mc {rows['tv/mc']['avg']} (ok)")
PY
