"""The service's multi-node cycle state stays bounded (attribution/service/gather.py): a
cycle whose verdict is stored is retired, only the newest `max_finished` retired cycles stay
in memory, and an evicted cycle is answered from the history with the same verdict. Real
SQLite history, real engine, real analysis threads; node logs written here."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from relaunch.attribution.core.engine import AttributionEngine
from relaunch.attribution.service.gather import CycleGather
from relaunch.storage import open_repository

BUG = [
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/app/train.py", line 9, in <module>',
    "[rank1]: ValueError: bad config value for layer 7",
]


def _log(path: Path, cycle: int) -> None:
    fact = {"fact": "cycle_start", "cycle": cycle, "job": "mem", "node": 0, "ranks": [0, 1],
            "world_size": 2, "t": 1_796_283_413.0 + cycle}  # fmt: skip
    lines = ["[relaunch] fact: " + json.dumps(fact, separators=(",", ":")), *BUG]
    path.write_text("\n".join(lines) + "\n")


def _completed(gather: CycleGather, cycle: int) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        st = gather.status("mem", cycle)
        if st["status"] in ("completed", "failed") or time.monotonic() > deadline:
            return st
        time.sleep(0.02)


def _opener(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)


@contextlib.contextmanager
def _gather(tmp_path: Path, max_finished: int) -> Iterator[tuple[Path, CycleGather]]:
    """A service's gatherer over a real SQLite history and one analysis thread."""
    root = Path(os.path.realpath(tmp_path))
    repo = open_repository(f"sqlite:///{root / 'h.db'}")
    pool = ThreadPoolExecutor(max_workers=1)
    gather = CycleGather(
        repo, AttributionEngine(repo), pool, [root], _opener, node_wait_s=3600,
        max_finished=max_finished,
    )  # fmt: skip
    try:
        yield root, gather
    finally:
        gather.close()
        pool.shutdown(wait=True)


def test_retired_cycles_leave_memory_and_are_answered_from_the_history(tmp_path: Path) -> None:
    with _gather(tmp_path, max_finished=2) as (root, gather):
        answers = []
        for cycle in range(5):
            p = root / f"cycle_{cycle}.node0.log"
            _log(p, cycle)
            gather.register("mem", cycle, "node0", str(p), nodes=1, group_rank=0, host=None)
            gather.end("mem", cycle, "node0", "failed")
            st = _completed(gather, cycle)
            assert st["status"] == "completed", st
            answers.append(st["verdict"])
        # bounded: the newest two retired cycles stay, the older three left memory
        assert sorted(c for _, c in gather._cycles) == [3, 4]
        for cycle in range(5):  # every cycle still reads the same verdict (older: history)
            st = gather.status("mem", cycle)
            assert st["status"] == "completed"
            assert st["verdict"]["decision"] == answers[cycle]["decision"]
            assert st["verdict"]["primary"] == answers[cycle]["primary"]
        assert answers[0]["primary"]["rank"] == 1


def test_a_cycle_waiting_for_a_node_is_never_evicted(tmp_path: Path) -> None:
    with _gather(tmp_path, max_finished=1) as (root, gather):
        # cycle 0 waits for its second node (a timer runs): it must stay however many others end
        p = root / "cycle_0.node0.log"
        _log(p, 0)
        gather.register("mem", 0, "node0", str(p), nodes=2, group_rank=0, host=None)
        assert gather.end("mem", 0, "node0", "failed")["status"] == "waiting"
        for cycle in range(1, 4):
            q = root / f"cycle_{cycle}.node0.log"
            _log(q, cycle)
            gather.register("mem", cycle, "node0", str(q), nodes=1, group_rank=0, host=None)
            gather.end("mem", cycle, "node0", "failed")
            assert _completed(gather, cycle)["status"] == "completed"
        assert ("mem", 0) in gather._cycles
        assert gather.status("mem", 0)["expected"] == 2  # its in-memory state is intact
