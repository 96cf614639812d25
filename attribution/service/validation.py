"""Request validation of the service: job ids, cycle numbers, analysis intents.

Each check returns the value when it is valid and raises `ApiError("invalid_parameter",
...)` (a 400 JSON body) when not. The job-id rule itself is `storage.job_id`, shared with
the launcher, the CLI and the repository.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from relaunch.attribution.service.errors import ApiError
from relaunch.storage import job_id as job_id_rule

INTENTS = ("track_only", "progressive", "terminal")
MAX_CYCLE = 2**31 - 1
JOB_ID_PATTERN = job_id_rule.PATTERN


def check_job_id(job_id: Any) -> str:
    problem = job_id_rule.problem(job_id)
    if problem is not None:
        raise ApiError("invalid_parameter", f"job_id {problem}")
    return job_id


def check_cycle(cycle: Any) -> int:
    if isinstance(cycle, bool) or not isinstance(cycle, int) or not 0 <= cycle <= MAX_CYCLE:
        raise ApiError("invalid_parameter", "cycle_id must be a non-negative integer")
    return cycle


def check_intent(intent: Any) -> str:
    if intent not in INTENTS:
        raise ApiError("invalid_parameter", f"analysis_intent must be one of {INTENTS}")
    return str(intent)


def default_job_id(path: Path) -> str:
    """Job id for NVRx clients that send only a path: file stem plus a short path hash."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem)[:64].strip("._-") or "log"
    return f"{stem}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
