"""The shared exclusion decision file (`--ft-exclusion-file`): who must not join the job.

Every launcher reads the file before each rendezvous; a node that finds its id listed does
not join. A node that fails its own health check appends itself. The file is one JSON
object, `{"version": 1, "excluded": [{"node": ID, "reason": ..., "job_id": ...,
"at": UNIX_TIME}, ...]}`; a schedule or an operator may write it too (only `node` is
required; a bare list of ids or of such objects is read as well).

Appending takes an exclusive `flock` on `<file>.lock`, reads the current entries, merges
(one entry per node: the first decision is kept) and replaces the file by write-temp +
fsync + rename, so a concurrent writer's entry is never lost and a reader never sees a
half-written file. Reading fails open: a missing, unreadable or malformed file excludes
nobody, and the caller warns (as NVRx's segment health consumer does).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaunch.launcher.safe_read import loads_json, read_small_text

VERSION = 1
MAX_BYTES = 4 * 1024 * 1024  # a job's exclusion list; a bigger file is not one
LOCK_TIMEOUT_S = 30.0  # how long an append waits for the lock
LOCK_POLL_S = 0.02


class ExclusionFileError(Exception):
    """The file exists but cannot be used (unreadable, not JSON, wrong shape)."""


@dataclass(frozen=True)
class Exclusions:
    """What was read: node id -> its entry."""

    entries: dict[str, dict[str, Any]]

    def find(self, node_id: str) -> dict[str, Any] | None:
        return self.entries.get(node_id)


def _entries(doc: Any) -> dict[str, dict[str, Any]]:
    items = doc.get("excluded") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise ExclusionFileError("expected an object with an 'excluded' list")
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        if isinstance(item, str) and item:
            entry: dict[str, Any] = {"node": item}
        elif isinstance(item, dict) and isinstance(item.get("node"), str) and item["node"]:
            entry = dict(item)
        else:
            raise ExclusionFileError(f"entry {item!r} has no node id")
        out.setdefault(entry["node"], entry)
    return out


def _parse(text: str) -> dict[str, dict[str, Any]]:
    if not text.strip():
        return {}  # an empty file: nobody excluded yet
    try:
        doc = loads_json(text)
    except ValueError as exc:
        raise ExclusionFileError(f"not JSON: {exc}") from None
    return _entries(doc)


def read_exclusions(path: str | os.PathLike[str]) -> Exclusions:
    """The excluded nodes. FileNotFoundError when missing; ExclusionFileError when the file
    is unusable (unreadable, not a regular file (a FIFO would block), over MAX_BYTES, too
    deeply nested: the error is wrapped)."""
    try:
        text = read_small_text(path, MAX_BYTES)
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise ExclusionFileError(f"cannot read: {exc}") from None
    return Exclusions(_parse(text))


def _lock(fd: int, lock_path: Path, timeout_s: float) -> None:
    """flock(LOCK_EX), giving up after `timeout_s` (a writer stuck on a hung shared mount
    must not keep a failing node from leaving): ExclusionFileError."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise ExclusionFileError(
                    f"{lock_path} held by another process for more than {timeout_s:g} s"
                ) from None
            time.sleep(LOCK_POLL_S)


def append_exclusion(
    path: str | os.PathLike[str],
    node_id: str,
    reason: str,
    *,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
    **extra: Any,
) -> bool:
    """Add `node_id` under the lock; False when it was already listed. A malformed file is
    not overwritten (ExclusionFileError): its content may be someone's decision; nor is
    anything written when the lock stays held past `lock_timeout_s` (ExclusionFileError)."""
    target = Path(path)
    lock_path = target.with_name(target.name + ".lock")
    with open(lock_path, "a+b") as lock:
        _lock(lock.fileno(), lock_path, lock_timeout_s)
        try:
            try:
                entries = read_exclusions(target).entries
            except FileNotFoundError:
                entries = {}
            if node_id in entries:
                return False
            entries[node_id] = {
                "node": node_id,
                "reason": reason,
                "at": round(time.time(), 3),
                **extra,
            }
            doc = {"version": VERSION, "excluded": list(entries.values())}
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(doc, fh, indent=1, sort_keys=True)
                    fh.write("\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, target)
            except BaseException:
                _unlink_quietly(tmp)
                raise
            return True
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
