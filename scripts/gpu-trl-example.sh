#!/usr/bin/env bash
# The TRL real-model preset on one CUDA GPU: configs/trl-gpu-example.yaml with tiny math data
# written by `gppo-sweep data prepare`'s converter (scripts/gpu_common.py), tv/mc, one seed,
# 2 steps, through `gppo-sweep launch`; checks that the cell's row is in Table 1 beside the
# base's (the run finished with the base and the final evaluation).
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
python scripts/gpu_common.py tiny-math "$work"

python - "$work" "$steps" "${MODEL:-}" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
from gpu_common import launch_on_one_gpu, launch_table1, write_spec

work, steps, model = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]


def hardware(spec):
    spec["seeds"] = [0]
    spec["eval"] = {"k": 2}
    spec["trl"].update(
        train_file=f"{work}/train.parquet", val_files={"aime24": f"{work}/aime24.parquet"},
        steps=steps, save_every=steps, prompts_per_step=2, group_size=4, minibatches=2,
        max_new_tokens=256, checkpoint_dir=f"{work}/ckpt",
    )
    if model:
        spec["trl"]["model_path"] = model
    launch_on_one_gpu(spec, work)


rows = launch_table1(write_spec("trl-gpu-example.yaml", work, "trl-gpu-example", hardware),
                     "gpu-trl-example")
assert {"base", "tv/mc"} <= set(rows), sorted(rows)
print(f"gpu-trl-example: base {rows['base']['avg']} tv/mc {rows['tv/mc']['avg']} (ok)")
PY
