"""Incremental reading (attribution.service.tracker.TrackedLog) equals one-shot scanning.

A log is written in many different chunkings (1-byte, mid-line, mid-UTF-8, CRLF, a
partial last line, random sizes) while `feed_new` reads what is new after every write;
the finished evidence must equal `restart_agent.scan_file` of the whole file, and each
byte must be read exactly once. A replaced or truncated file is re-read from its start.
"""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest

from tests._service_helpers import require_restart_agent

require_restart_agent()

from relaunch.attribution.service.errors import ApiError  # noqa: E402
from relaunch.attribution.service.tracker import TrackedLog  # noqa: E402
from relaunch.restart_agent import scan_file  # noqa: E402


def corpus() -> bytes:
    rng = random.Random(7)
    lines = []
    for i in range(400):
        r = rng.randrange(8)
        lines.append(f"[rank{r}]: iteration {i} | lm loss {rng.random():.3f} | ünïcödé ✓")
    lines += [
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "/w/train.py", line 10, in <module>',
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "[rank0]: [E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
        "[rank1]: RuntimeError: NCCL communicator was aborted on rank 1",
    ]
    body = "\r\n".join(lines[:200]) + "\n" + "\n".join(lines[200:])  # CRLF then LF
    return body.encode() + b"\n\xff\xfe binary \x00 junk\n[rank2]: partial last li"


def chunkings(data: bytes):
    yield "whole", [len(data)]
    yield "bytes", [1] * len(data[:3000]) + [len(data) - 3000]
    yield "lines-1", [997] * (len(data) // 997 + 1)
    utf8 = data.index("ü".encode()) + 1  # a cut inside a 2-byte character
    yield "mid-utf8", [utf8, 1, len(data)]
    for seed in range(12):
        rng = random.Random(seed)
        yield f"random-{seed}", [rng.randrange(1, 4096) for _ in range(len(data) // 512 + 20)]


def write_in(path: Path, data: bytes, sizes: list[int], tl: TrackedLog) -> None:
    pos = 0
    with open(path, "wb") as fh:
        for n in sizes:
            if pos >= len(data):
                break
            fh.write(data[pos : pos + n])
            fh.flush()
            pos += n
            with tl.lock:
                tl.feed_new()


@pytest.mark.parametrize(
    "name,sizes", list(chunkings(corpus())), ids=lambda x: x if isinstance(x, str) else ""
)
def test_incremental_equals_one_shot(tmp_path: Path, name: str, sizes: list[int]):
    data = corpus()
    path = tmp_path / "cycle.log"
    tl = TrackedLog(path=path, job_id="j", cycle=0)
    write_in(path, data, sizes, tl)
    with tl.lock:
        evidence, identity = tl.finish()
    assert evidence == scan_file(path)
    assert identity == {
        "path": str(path),
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert tl.read_total == len(data)  # every byte read exactly once


def test_finish_reads_only_the_tail(tmp_path: Path):
    data = corpus()
    path = tmp_path / "cycle.log"
    path.write_bytes(data[:-100])
    tl = TrackedLog(path=path, job_id="j", cycle=0)
    with tl.lock:
        assert tl.feed_new() == len(data) - 100
    with open(path, "ab") as fh:
        fh.write(data[-100:])
    with tl.lock:
        evidence, _ = tl.finish()
    assert tl.tail_bytes == 100
    assert evidence == scan_file(path)


def test_truncated_or_replaced_file_is_reread(tmp_path: Path):
    data = corpus()
    path = tmp_path / "cycle.log"
    path.write_bytes(data)
    tl = TrackedLog(path=path, job_id="j", cycle=0)
    with tl.lock:
        tl.feed_new()
    path.write_bytes(data[:500])  # truncated: shorter than what was read
    with tl.lock:
        tl.feed_new()
        assert tl.resets == 1
    replacement = tmp_path / "new.log"
    replacement.write_bytes(data[:2000])
    os.replace(replacement, path)  # same name, new file
    with tl.lock:
        evidence, identity = tl.finish()
    assert tl.resets == 2
    assert identity["size"] == 2000
    assert evidence == scan_file(path)


def test_missing_file_reads_as_empty_until_it_appears(tmp_path: Path):
    path = tmp_path / "later.log"
    tl = TrackedLog(path=path, job_id="j", cycle=0)
    with tl.lock:
        assert tl.feed_new() == 0
        with pytest.raises(ApiError) as gone:
            tl.finish()
        assert gone.value.error_code == "not_found"
    path.write_bytes(corpus())
    with tl.lock:
        evidence, _ = tl.finish()
    assert evidence == scan_file(path)
