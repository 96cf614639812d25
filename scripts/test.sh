#!/usr/bin/env bash
# Set up (scripts/setup.sh --test), start the servers the tests need, lint, type-check, run
# the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
VENV="${RELAUNCH_VENV:-.venv}"
export PATH="$PWD/$VENV/bin:$PATH"

# NVRx 0.7.0's real client for the drop-in tests (tests/launcher/test_nvrx_*.py), from the package
# index like every other install; without it those tests skip and say so.
if [[ ! -f .cache/nvrx/nvidia_resiliency_ext-0.7.0-cp312-cp312-manylinux_2_39_x86_64.whl ]]; then
  bash scripts/fetch_nvrx.sh || echo "test.sh: NVRx wheel not fetched: tests/launcher/test_nvrx_*.py will skip"
fi

# PostgreSQL on loopback for the storage tests (skipped with a reason when absent).
if command -v pg_ctlcluster >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
  ver=$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1)
  if [[ -n "$ver" ]]; then
    pg_ctlcluster "$ver" main start 2>/dev/null || true
    for _ in $(seq 1 30); do
      su postgres -c "psql -qAtc 'select 1'" >/dev/null 2>&1 && break
      sleep 0.5
    done
    su postgres -c "psql -qc \"DO \\\$\\\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='relaunch') THEN CREATE ROLE relaunch LOGIN SUPERUSER PASSWORD 'relaunch'; END IF; END \\\$\\\$;\"" >/dev/null 2>&1 || true
    su postgres -c "createdb -O relaunch relaunch_test" >/dev/null 2>&1 || true
    export RELAUNCH_TEST_PG_URL="postgresql+psycopg2://relaunch:relaunch@127.0.0.1:5432/relaunch_test"
  fi
fi

ruff check .
ruff format --check .
mypy  # the packages listed in [tool.mypy] of pyproject.toml
python -m pytest -q -rs "$@"
