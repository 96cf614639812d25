"""`relaunch fr` against hostile dump sets (issue 12, item 5): a FIFO, a symlink to
/dev/zero, huge numbers, escape sequences. Each is an unreadable-dump note in the report
(exit 0) or, when nothing else is readable, a one-line error (exit 2); never a hang, never
a traceback, never a read past the size limit."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from relaunch.attribution.fr import reader
from tests._fr_helpers import stalled_allreduce_job, write_dumps

REPO = Path(__file__).resolve().parents[2]
BASE = {
    "version": "2.9",
    "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
    "pg_status": {
        "0": {
            "last_enqueued_collective": 5,
            "last_started_collective": 5,
            "last_completed_collective": 4,
        }
    },
    "entries": [],
}


def fr(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "fr", *map(str, args)],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=timeout,  # the hang detector: a FIFO read would block forever
    )


def one_line_error(p: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("relaunch fr: error: ") and fragment in lines[0], lines[0]


def _set_with(tmp_path: Path, name: str, make) -> Path:
    d = tmp_path / "set"
    write_dumps(stalled_allreduce_job(3, [2]), d)
    (d / name).unlink()
    make(d / name)
    return d


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (os.mkfifo, "not a regular file"),
        (lambda p: p.symlink_to("/dev/zero"), "symbolic link"),
    ],
    ids=["fifo", "symlink-to-dev-zero"],
)
def test_fifo_and_device_link_in_a_set_are_skipped_not_read(tmp_path, make, why):
    d = _set_with(tmp_path, "_dump_0", make)
    p = fr(d, "--format", "json")
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert result["ranks_read"] == 2
    (problem,) = result["unreadable"]
    assert problem["path"].endswith("_dump_0") and why in problem["error"]


@pytest.mark.parametrize("target", ["fifo", "/dev/zero"])
def test_fifo_or_device_named_alone_is_a_one_line_error(tmp_path, target):
    path = tmp_path / "_dump_0"
    if target == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(target)
    one_line_error(fr(path), "not a regular file")


def _dump(tmp_path: Path, doc: dict, name: str = "_dump_0") -> Path:
    d = tmp_path / "huge"
    d.mkdir(exist_ok=True)
    (d / name).write_bytes(pickle.dumps(doc))
    return d


def _with(**changes: object) -> dict:
    doc = json.loads(json.dumps(BASE))
    for key, value in changes.items():
        doc[key] = value
    return doc


HUGE = 10**5000  # str() of it raises ValueError (more than 4300 digits)
HUGE_CASES = {
    "pg_status": _with(
        pg_status={"0": {"last_enqueued_collective": HUGE, "last_completed_collective": HUGE - 1}}
    ),
    "pg_config_ranks": _with(pg_config={"0": {"name": "0", "desc": "x", "ranks": [0, HUGE]}}),
    "entry_fields": _with(
        entries=[
            {
                "pg_id": 0,
                "process_group": ["0", "default_pg"],
                "collective_seq_id": HUGE,
                "profiling_name": "nccl:all_reduce",
                "state": "scheduled",
                "record_id": 0,
                "input_sizes": [[HUGE]],
            }
        ]
    ),
    "peer_in_name": _with(
        entries=[
            {
                "pg_id": 0,
                "process_group": ["0", "default_pg"],
                "p2p_seq_id": 1,
                "is_p2p": True,
                "profiling_name": "nccl:send 0->" + "9" * 4400,
                "state": "scheduled",
                "record_id": 0,
            }
        ]
    ),
}


@pytest.mark.parametrize("case", sorted(HUGE_CASES))
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_huge_numbers_in_a_dump_do_not_crash(tmp_path, case, fmt):
    p = fr(_dump(tmp_path, HUGE_CASES[case]), "--format", fmt)
    assert "Traceback" not in p.stderr, p.stderr[-1500:]
    assert p.returncode in (0, 2), p.stderr
    if p.returncode == 0:
        assert len(p.stdout) < 20_000
        if fmt == "json":
            json.loads(p.stdout)
    else:
        one_line_error(p, "")


def test_rank_number_in_a_name_is_bounded(tmp_path):
    d = _dump(tmp_path, BASE, name="_dump_" + "9" * 200)
    one_line_error(fr(d), "rank")


def test_read_is_bounded_by_bytes_read_not_by_size(monkeypatch):
    """A regular file whose size says 0 (a /proc file, or one that grows while read) is
    still cut at the limit: the bound counts bytes read, not `st_size`."""
    maps = Path("/proc/self/maps")
    if not maps.exists() or os.stat(maps).st_size != 0:
        pytest.skip("no /proc/self/maps with st_size 0 on this system")
    monkeypatch.setattr(reader, "MAX_DUMP_BYTES", 1000)
    with pytest.raises(reader.DumpError, match="over the 1000-byte limit"):
        reader.read_dump(maps, rank=0)


def test_escape_sequences_in_dumps_are_not_printed_raw(tmp_path):
    doc = _with(
        pg_config={"0": {"name": "0", "desc": "\x1b]0;pwned\x07\x1b[2J", "ranks": "[0, 1]"}}
    )
    p = fr(_dump(tmp_path, doc))
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout
    assert "\\x1b]0;pwned\\x07" in p.stdout
