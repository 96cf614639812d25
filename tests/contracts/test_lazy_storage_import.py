"""`relaunch analyze LOG` (no `--db`) and the shared job-id rule never import SQLAlchemy.

`relaunch.storage` hands out its names on first use (PEP 562), so `from relaunch.storage import job_id` (the
CLI's `--job-id` check) costs no SQL import (~0.35 s of every `relaunch analyze`), while
every name of `storage.__all__` is still there and is the object of its module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOG = "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_analyze_without_db_imports_no_sqlalchemy(tmp_path: Path) -> None:
    log = tmp_path / "cycle.log"
    log.write_text(LOG, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "relaunch.cli", "analyze", str(log)]
        + ["--job-id", "exp-1", "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdict = json.loads(proc.stdout)
    assert verdict["decision"] == "RESTART"
    assert verdict["primary"]["failure_class"] == "cuda_illegal_memory_access"
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()]
    assert "relaunch.storage.job_id" in imported  # the --job-id check ran
    assert not [m for m in imported if m.split(".")[0] == "sqlalchemy"]


def test_storage_names_resolve_to_their_modules() -> None:
    proc = _run(
        "import sys\nimport relaunch.storage as storage, relaunch.storage.job_id\n"
        "assert 'sqlalchemy' not in sys.modules\n"
        "import relaunch.storage.db, relaunch.storage.records, relaunch.storage.repository\n"
        "for name in storage.__all__:\n"
        "    assert getattr(storage, name) is not None, name\n"
        "assert storage.StorageError is storage.db.StorageError\n"
        "assert storage.HistoryRepository is storage.repository.HistoryRepository\n"
        "assert storage.JobRecord is storage.records.JobRecord\n"
        "from relaunch.storage import *  # noqa: F403\n"
        "try:\n"
        "    storage.no_such_name\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "module 'relaunch.storage' has no attribute 'no_such_name'"


def test_bad_cycle_bound_is_still_a_storage_error(monkeypatch) -> None:
    from relaunch import storage

    monkeypatch.setenv(storage.MAX_CYCLES_ENV, "0")
    try:
        storage.max_cycles_from_env()
    except storage.StorageError as exc:
        assert "must be a positive integer" in str(exc)
    else:
        raise AssertionError("no StorageError")
