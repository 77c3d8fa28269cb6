#!/usr/bin/env bash
# Regenerate requirements/constraints.txt: the whole dependency set of pyproject.toml (the base
# install and every extra), resolved once by uv for every platform and Python >= 3.10, against the
# pins in requirements/pins.in. Existing pins are kept unless you pass --upgrade (or
# --upgrade-package NAME); any other uv pip compile flag passes through.
#
#   scripts/lock.sh                 # after editing pyproject.toml's requirements
#   scripts/lock.sh --upgrade       # move every pin to the newest allowed release
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v uv >/dev/null 2>&1; then
  python -m pip install -q 'uv>=0.5'
fi
uv pip compile pyproject.toml \
  --all-extras \
  --universal \
  --python-version 3.10 \
  --constraint requirements/pins.in \
  --custom-compile-command 'scripts/lock.sh' \
  --output-file requirements/constraints.txt \
  "$@"
