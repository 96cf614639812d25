#!/usr/bin/env bash
# Set up a fresh machine and run the main job end to end: `relaunch demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${RELAUNCH_VENV:-.venv}/bin/relaunch" demo "$@"
