"""Incremental reading of one cycle log: new bytes only, fed to `restart_agent.LogScanner`.

A `TrackedLog` remembers how far it has read (offset, file identity) and feeds what it
reads to the engine's `StreamingScan` (scanner + SHA-256 of the same bytes), so that the
verdict at cycle end costs only the unread tail and the audit record gets the file's
sha256 without a second pass. A file that was replaced or truncated
under us is re-read from the start. Every read opens the file through
`attribution.service.confined.open_confined` (no symlink at any level below the roots,
regular files only), so a path swapped after registration cannot make it read elsewhere.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relaunch.attribution.core.engine import StreamingScan
from relaunch.attribution.service.confined import open_confined
from relaunch.attribution.service.errors import ApiError
from relaunch.restart_agent.budget import AnalysisBudget
from relaunch.restart_agent.facts import trusted_keys

READ_CHUNK = 1 << 20


@dataclass
class TrackedLog:
    """One registered cycle log and its analysis state."""

    path: Path
    job_id: str
    cycle: int
    user: str | None = None
    intent: str = "track_only"
    submitted_at: float = field(default_factory=time.time)
    # where reads are confined to; empty: the log's own directory (tests, tools)
    roots: tuple[Path, ...] = ()
    budget: AnalysisBudget | None = None  # each scan's analysis budget (None: its defaults)
    # incremental scan state (guarded by `lock`)
    scanner: StreamingScan | None = None
    offset: int = 0
    file_id: tuple[int, int] | None = None
    resets: int = 0  # times the file was replaced/truncated and re-read
    read_total: int = 0  # bytes read from the file over the log's life (all passes)
    tail_bytes: int | None = None  # bytes the final analysis still had to read
    # the fact keys in force when the scanner was made (restart_agent.facts.trusted_keys):
    # a scan made before the launcher handed over its key trusted facts by prefix
    scan_keys: tuple[bytes, ...] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # analysis state
    future: Future[dict[str, Any]] | None = None
    verdict: dict[str, Any] | None = None
    error: str | None = None
    cached: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.job_id, self.cycle)

    def status(self) -> str:
        if self.verdict is not None or self.error is not None:
            return "completed"
        return "pending"

    def _open(self) -> int:
        roots = self.roots or (Path(os.path.realpath(self.path.parent)),)
        return open_confined(self.path, roots)

    def _reset(self) -> StreamingScan:
        self.scanner = StreamingScan(str(self.path), budget=self.budget)
        self.scan_keys = trusted_keys()
        self.offset = 0
        return self.scanner

    def feed_new(self, max_bytes: int | None = None) -> int:
        """Read and feed bytes appended since the last call; return how many were read.

        Caller holds `lock`. A missing file reads as empty (it may not exist yet); any
        other refusal of `open_confined` is raised as its `ApiError`.
        """
        try:
            fd = self._open()
        except ApiError as exc:
            if exc.error_code == "not_found":
                return 0
            raise
        return self._feed_fd(fd, max_bytes)

    def _feed_fd(self, fd: int, max_bytes: int | None) -> int:
        """Feed what is new in the open file `fd` (closed on return)."""
        with os.fdopen(fd, "rb", buffering=0) as fh:
            st = os.fstat(fd)
            fid = (st.st_dev, st.st_ino)
            scan = self.scanner
            if scan is None or fid != self.file_id or st.st_size < self.offset:
                if scan is not None:
                    self.resets += 1
                scan = self._reset()
                self.file_id = fid
            fh.seek(self.offset)
            read = 0
            # past the analysis budget nothing more is scanned: the rest is not read
            while (max_bytes is None or read < max_bytes) and not scan.budget_reached:
                want = READ_CHUNK if max_bytes is None else min(READ_CHUNK, max_bytes - read)
                chunk = fh.read(want)
                if not chunk:
                    break
                scan.feed(chunk)
                read += len(chunk)
            self.offset += read
            self.read_total += read
            return read

    def finish(self) -> tuple[Any, dict[str, Any]]:
        """Read the tail, finish the scan; return (CycleEvidence, log identity).

        Caller holds `lock`. Raises `ApiError` (not_found, outside_allowed_root, ...) if
        the file is gone or no longer reachable inside the roots. The scanner is consumed:
        a later analysis of the same log starts from the beginning.
        """
        self.tail_bytes = self._feed_fd(self._open(), None)
        assert self.scanner is not None
        evidence, identity = self.scanner.finish()
        self.scanner, self.offset, self.file_id = None, 0, None
        return evidence, identity.to_dict()
