"""Process exits that torch elastic (torchrun) reports, with the ranks and PIDs they name.

Two forms, both printed by the elastic agent (not by a worker):

- the agent's line when a worker dies:
  `failed (exitcode: -9) local_rank: 3 (pid: 812917) of binary: /usr/bin/python`
- the `ChildFailedError` summary block, whose entries read
  ```
  Root Cause (first observed failure):
  [0]:
    time      : 2025-05-21_15:43:03
    host      : worker-0
    rank      : 0 (local_rank: 0)
    exitcode  : -9 (pid: 14750)
    error_file: <N/A>
    traceback : Signal 9 (SIGKILL) received by PID 14750
  ```
  (entries under `Failures:` have the same form; the one after `Root Cause` is the first
  observed failure).

A Root Cause entry cut after its `rank` line (an excerpt that ends there) still names the
first observed failure's rank (`ElasticReader.result()`, exit code unknown).

`ElasticReader.line(body, lineno)` takes each candidate line without its rank prefix, in
log order, and returns the (rank, rank_source) that an `exitcode` line of a block speaks
for (so a signal matched on that line gets the rank). Numbers are bounded: an over-long
number is no number.
"""

from __future__ import annotations

import re

from relaunch.restart_agent.facts import signal_name
from relaunch.restart_agent.model import ProcessExit
from relaunch.restart_agent.prefixes import bounded_int

# Each field may follow a lead (a timestamp, a logger's or a worker pool's tag) and the
# older layout (torch 1.9: `Root Cause:`, `rank: 1 (local_rank: 1)`, `exitcode: 1 (pid: P)`)
# spells the fields without the padding.
_LEAD = r"(?:^|[\s:\]\)|])"
_ROOT_CAUSE = re.compile(_LEAD + r"Root Cause(?: \(first observed failure\))?:")
_RANK = re.compile(_LEAD + r"rank\s*:\s*(\d{1,8})\s*\(local_rank:\s*(\d{1,8})\)")
_HOST = re.compile(_LEAD + r"host\s*:\s*(\S{1,200})\s*$")
_EXITCODE = re.compile(_LEAD + r"exitcode\s*:\s*(-?\d{1,4})\s*\(pid:\s*(\d{1,10})\)")
# torch 1.9's `msg:` field holds the worker's error file as JSON: `"message": "Err: text"`
MESSAGE = re.compile(r'^"message":\s*"(?P<text>(?:[^"\\]|\\.){1,4000})",?\s*$')
_FAILED = re.compile(r"failed \(exitcode: (-?\d{1,4})\) local_rank: (\d{1,8}) \(pid: (\d{1,10})\)")
MAX_EXITS = 100_000


def _code(text: str) -> int | None:
    neg = text.startswith("-")
    v = bounded_int(text.lstrip("-"), 4)
    return None if v is None else (-v if neg else v)


class ElasticReader:
    """Reads torch elastic's exit reports out of candidate lines."""

    def __init__(self) -> None:
        self.exits: list[ProcessExit] = []
        self._root_next = False  # the next entry is the Root Cause entry
        self._rank: tuple[int, int, bool] | None = None  # (rank, local_rank, is_root)
        self._rank_line = 0  # where `_rank` was read
        self._host: str | None = None
        self._entry: tuple[int, str] | None = None  # (rank, source) of the last entry read

    def line(self, body: str, lineno: int) -> tuple[int, str] | None:
        if MESSAGE.match(body):
            return self._entry  # the error of the entry whose exit was read last
        if _ROOT_CAUSE.search(body):
            self._root_next = True
            self._rank = None
            return None
        m = _RANK.search(body)
        if m:
            rank, local = bounded_int(m.group(1)), bounded_int(m.group(2))
            if rank is not None and local is not None:
                self._rank = (rank, local, self._root_next)
                self._rank_line = lineno
                self._root_next = False
            return None
        m = _HOST.search(body)
        if m:
            self._host = m.group(1)
            return None
        m = _EXITCODE.search(body)
        if m:
            entry, self._rank = self._rank, None
            self._entry = None
            if entry is None:
                return None
            rank, local, root = entry
            code = _code(m.group(1))
            self._add(
                ProcessExit(
                    source="elastic_root_cause" if root else "elastic_failure",
                    line=lineno,
                    rank=rank,
                    local_rank=local,
                    exitcode=code,
                    signal=signal_name(code),
                    pid=bounded_int(m.group(2), 10),
                    node=self._host,
                    first=root,
                )
            )
            self._entry = (rank, "elastic_root_cause" if root else "elastic_failure")
            return self._entry
        m = _FAILED.search(body)
        if m:
            code = _code(m.group(1))
            self._add(
                ProcessExit(
                    source="elastic_exit",
                    line=lineno,
                    local_rank=bounded_int(m.group(2)),
                    exitcode=code,
                    signal=signal_name(code),
                    pid=bounded_int(m.group(3), 10),
                )
            )
        return None

    def result(self) -> list[ProcessExit]:
        """The exits read, and the Root Cause entry whose block was cut after its `rank`
        line (a pasted excerpt): the first observed failure's rank, its exit code unknown
        (`exitcode` None)."""
        out = list(self.exits)
        if self._rank is not None and self._rank[2] and len(out) < MAX_EXITS:
            rank, local, _ = self._rank
            cut = ProcessExit(
                source="elastic_root_cause",
                line=self._rank_line,
                rank=rank,
                local_rank=local,
                node=self._host,
                first=True,
            )
            out.append(cut)
        return out

    def _add(self, e: ProcessExit) -> None:
        if len(self.exits) < MAX_EXITS:
            self.exits.append(e)
