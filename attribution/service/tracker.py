"""Incremental reading of one cycle log: new bytes only, fed to `restart_agent.LogScanner`.

A `TrackedLog` remembers how far it has read (offset, file identity) and hashes what it
reads, so that the verdict at cycle end costs only the unread tail and the audit record
gets the file's sha256 without a second pass. A file that was replaced or truncated
under us is re-read from the start.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from restart_agent import LogScanner

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
    # incremental scan state (guarded by `lock`)
    scanner: Any = None
    offset: int = 0
    file_id: tuple[int, int] | None = None
    sha: Any = None
    resets: int = 0  # times the file was replaced/truncated and re-read
    read_total: int = 0  # bytes read from the file over the log's life (all passes)
    tail_bytes: int | None = None  # bytes the final analysis still had to read
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

    def _reset(self) -> None:
        self.scanner = LogScanner()
        self.offset = 0
        self.sha = hashlib.sha256()

    def feed_new(self, max_bytes: int | None = None) -> int:
        """Read and feed bytes appended since the last call; return how many were read.

        Caller holds `lock`. A missing file reads as empty (it may not exist yet).
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return 0
        with os.fdopen(fd, "rb", buffering=0) as fh:
            st = os.fstat(fd)
            fid = (st.st_dev, st.st_ino)
            if self.scanner is None or fid != self.file_id or st.st_size < self.offset:
                if self.scanner is not None:
                    self.resets += 1
                self._reset()
                self.file_id = fid
            fh.seek(self.offset)
            read = 0
            while max_bytes is None or read < max_bytes:
                want = READ_CHUNK if max_bytes is None else min(READ_CHUNK, max_bytes - read)
                chunk = fh.read(want)
                if not chunk:
                    break
                self.scanner.feed(chunk)
                self.sha.update(chunk)
                read += len(chunk)
            self.offset += read
            self.read_total += read
            return read

    def finish(self) -> tuple[Any, dict[str, Any]]:
        """Read the tail, finish the scan; return (CycleEvidence, log identity).

        Caller holds `lock`. Raises FileNotFoundError if the file is gone. The scanner is
        consumed: a later analysis of the same log starts from the beginning.
        """
        if not self.path.exists():
            raise FileNotFoundError(str(self.path))
        self.tail_bytes = self.feed_new()
        evidence = self.scanner.finish()
        identity = {"path": str(self.path), "size": self.offset, "sha256": self.sha.hexdigest()}
        self.scanner, self.offset, self.file_id, self.sha = None, 0, None, None
        return evidence, identity
