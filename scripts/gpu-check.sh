#!/usr/bin/env bash
# One-command GPU check for the verl path. For one GPU (H200 class) with torch,
# transformers and CUDA installed; no network; verl, Ray, MLflow and vLLM may be missing.
#
#   scripts/gpu-check.sh [OUT_DIR]        (default: ./gpu-check-out)
#   WHEELS=DIR scripts/gpu-check.sh       extra wheels to put on the path (no deps, <= 64 MiB)
#
# Sections (gppo/backends/verl/gpucheck.py; each records its figures, or the exact error):
#   loss    every GPPO grid cell's loss forward+backward on (B, T) = (512, 8192), bf16 log pi,
#           timed against a copy of verl's vanilla arithmetic: ms, ratio, peak memory;
#   engine  one bf16 step of verl's FSDPEngineWithLMHead with ppo_loss / loss mode gppo on a
#           small random Qwen2, if verl imports here (verl's __init__ imports Ray: Ray's wheel,
#           ~75 MiB, is over the 64 MiB budget, so without Ray installed this section reports
#           the ImportError);
#   testbed not applicable: the local testbed has no device setting (CPU only).
# Budget: under 8 minutes (the python run is capped at 420 s). Output: OUT_DIR/gpu-check.json
# and OUT_DIR/gpu-check.log. Nothing in CI runs this.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-${OUT:-$PWD/gpu-check-out}}
PY=${PYTHON:-python3}
mkdir -p "$OUT"

SITE=$(mktemp -d)
trap 'rm -rf "$SITE"' EXIT
if [[ -n "${WHEELS:-}" ]]; then
    shopt -s nullglob
    wheels=("$WHEELS"/*.whl)
    if ((${#wheels[@]})); then
        mib=$(du -cm "${wheels[@]}" | tail -1 | cut -f1)
        if ((mib > 64)); then
            echo "gpu-check: WHEELS holds ${mib} MiB of wheels; the budget is 64 MiB" >&2
            exit 2
        fi
        "$PY" -m pip install --quiet --no-index --no-deps --target "$SITE" "${wheels[@]}"
    fi
fi
export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false

"$PY" - <<'PYEOF' 2>&1 | tee "$OUT/gpu-check.log"
import importlib.util, torch
print("[gpu-check] torch", torch.__version__, "cuda", torch.version.cuda,
      "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
for name in ("transformers", "verl", "ray", "tensordict", "peft", "omegaconf", "pydantic"):
    print(f"[gpu-check] {name}: {'present' if importlib.util.find_spec(name) else 'missing'}")
PYEOF

status=0
# GPU_CHECK_ARGS: extra flags, e.g. "--b 8 --t 64 --device cpu" for a dry run on a laptop
timeout 420 "$PY" "$REPO/gppo/backends/verl/gpucheck.py" --out "$OUT" ${GPU_CHECK_ARGS:-} 2>&1 \
    | tee -a "$OUT/gpu-check.log" || status=$?
echo "[gpu-check] done (exit $status); report: $OUT/gpu-check.json"
exit "$status"
