#!/usr/bin/env bash
# Fetch NVRx 0.7.0 (nvidia-resiliency-ext) for the drop-in tests (tests/launcher/test_nvrx_*.py).
# Its wheels are for CPython 3.12; its client and launcher modules are pure Python and import
# under this venv's Python once psutil and defusedxml are present. The wheel lands in
# .cache/nvrx/ (the tests unpack it; nothing is installed from it); the two small dependencies
# are installed into .venv. Needs the package index (scripts/test.sh runs it when the wheel is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .cache/nvrx
"${RELAUNCH_VENV:-.venv}"/bin/pip download --no-deps --python-version 3.12 --only-binary=:all: \
  --platform manylinux_2_39_x86_64 nvidia-resiliency-ext==0.7.0 -d .cache/nvrx
"${RELAUNCH_VENV:-.venv}"/bin/pip install psutil defusedxml
echo "fetch_nvrx: $(ls .cache/nvrx/*.whl)"
