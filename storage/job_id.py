"""The one job-id rule, used by the launcher, the CLI, the service, MCP and the repository.

A job id is 1-255 characters of letters, digits and `._:@+=-`, starting with a letter or
digit: safe as a folder name (the launcher's log folder), in a URL path segment (`/v1/jobs/
{job_id}`), in an audit file name and on a terminal. A name such as `exp 1` or `a/b` is
rejected everywhere with the same message, so nothing is stored that the API cannot reach.

Standard library only, so every package may import it without pulling in SQL.
"""

from __future__ import annotations

import re
from typing import Any

MAX_LENGTH = 255
ALLOWED = "letters, digits and ._:@+=-"
PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,254}$"
_RE = re.compile(PATTERN)


class InvalidJobId(ValueError):
    """A job id that breaks the rule; the message is one line naming the id."""


def problem(job_id: Any) -> str | None:
    """What is wrong with `job_id` (a phrase to follow its name), or None when it is valid."""
    if not isinstance(job_id, str) or not job_id.strip():
        return f"must be a non-empty string, got {job_id!r}"
    if len(job_id) > MAX_LENGTH:
        return f"is longer than {MAX_LENGTH} characters"
    if not _RE.match(job_id):
        return f"{job_id!r}: must be {ALLOWED}, starting with a letter or digit"
    return None


def check(job_id: Any, name: str = "job_id") -> str:
    """`job_id` unchanged when valid, else `InvalidJobId` ("<name> <problem>")."""
    found = problem(job_id)
    if found is not None:
        raise InvalidJobId(f"{name} {found}")
    return job_id


def is_valid(job_id: Any) -> bool:
    return problem(job_id) is None
