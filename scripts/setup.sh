#!/usr/bin/env bash
# Set up a fresh machine for relaunch: a virtual environment with the CPU build of
# torch and the project (plus test extras with --test). Idempotent and safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RELAUNCH_VENV:-.venv}"
WITH_TEST=0
[[ "${1:-}" == "--test" ]] && WITH_TEST=1

if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
# The CPU build of torch from the local file; a looser spec would download gigabytes.
"$PY" -m pip install -q torch==2.13.0
if [[ "$WITH_TEST" == 1 ]]; then
  "$PY" -m pip install -q -e '.[test]'
else
  "$PY" -m pip install -q -e .
fi

if [[ "$WITH_TEST" == 1 ]]; then
  # System packages the tests use: headless Chromium for browser tests, PostgreSQL
  # for the storage tests against a second database engine.
  need=()
  command -v chromium >/dev/null 2>&1 || need+=(chromium chromium-driver)
  command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql)
  if (( ${#need[@]} )) && command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
    apt-get update -qq >/dev/null || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
      || echo "setup: could not install ${need[*]}; the tests that need them will be skipped" >&2
  fi
fi
echo "setup: ready ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
