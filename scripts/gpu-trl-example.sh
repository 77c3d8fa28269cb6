#!/usr/bin/env bash
# The TRL real-model preset on one CUDA GPU: configs/trl-gpu-example.yaml with tiny math data
# written by `gppo-sweep data prepare -b trl`, tv/mc, one seed, 2 steps, through
# `gppo-sweep launch`; checks that the cell's row is in Table 1 beside the base's (the run
# finished with the base and the final evaluation).
#
#   MODEL=/models/Qwen2.5-0.5B-Instruct scripts/gpu-trl-example.sh [STEPS]
#
# MODEL: a local Hugging Face chat model (default: the preset's model_path). Needs the trl and
# verl extras (verl's math scorer) and a CUDA torch; nothing is downloaded. Never run by CI.
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-2}"
work="$(mktemp -d /tmp/gppo-trl-gpu.XXXXXX)"
echo "gpu-trl-example: work dir $work"

cat > "$work/train.jsonl" <<'JSONL'
{"problem": "What is 2 + 3?", "answer": "5"}
{"problem": "What is 7 - 4?", "answer": "3"}
{"problem": "What is 3 * 3?", "answer": "9"}
{"problem": "What is 8 / 2?", "answer": "4"}
JSONL
cat > "$work/val.jsonl" <<'JSONL'
{"problem": "What is 1 + 1?", "answer": "2"}
{"problem": "What is 5 + 5?", "answer": "10"}
JSONL
gppo-sweep data prepare -b trl "$work/train.jsonl" "$work/train.parquet" -s dapo_math_17k
gppo-sweep data prepare -b trl "$work/val.jsonl" "$work/aime24.parquet" -s aime24 --split test

python - "$work" "$steps" "${MODEL:-}" <<'PY'
import sys, yaml
work, steps, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
spec = yaml.safe_load(open("configs/trl-gpu-example.yaml"))
spec["name"] = "trl-gpu-example"
spec["seeds"] = [0]
spec["eval"] = {"k": 2}
trl = spec["trl"]
trl.update(train_file=f"{work}/train.parquet", val_files={"aime24": f"{work}/aime24.parquet"},
           steps=steps, save_every=steps, prompts_per_step=2, group_size=4, minibatches=2,
           max_new_tokens=256, checkpoint_dir=f"{work}/ckpt")
if model:
    trl["model_path"] = model
spec["ray"] = {"max_concurrent": 1, "resources": {"num_cpus": 1, "num_gpus": 1},
               "local_head": {"num_cpus": 4, "num_gpus": 1}}
spec["tracking"] = {"uri": f"sqlite:///{work}/mlflow.db"}
yaml.safe_dump(spec, open(f"{work}/grid.yaml", "w"))
PY
(cd "$work" && gppo-sweep launch grid.yaml)
python - "$work" <<'PY'
import csv, glob, sys
(table,) = glob.glob(f"{sys.argv[1]}/reports/*/table1.csv")
rows = {r["cell"]: r for r in csv.DictReader(open(table))}
assert {"base", "tv/mc"} <= set(rows), sorted(rows)
print(f"gpu-trl-example: base {rows['base']['avg']} tv/mc {rows['tv/mc']['avg']} (ok)")
PY
