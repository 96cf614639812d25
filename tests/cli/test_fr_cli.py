"""`relaunch fr`: JSON/text output on real dumps, and what each bad input gets."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._fr_helpers import real_dumps_dir, stalled_allreduce_job, write_dumps

REPO = Path(__file__).resolve().parents[2]


def _fr(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "fr", *map(str, args)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line_error(p: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("relaunch fr: error: ") and fragment in lines[0], lines[0]


def test_json_on_real_set_is_exactly_one_object() -> None:
    p = _fr(real_dumps_dir("gpu_error_2nd"), "--format", "json")
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)  # exactly one JSON document: json.loads rejects extra data
    assert p.stdout.count("\n") == 1
    assert result["culprit_ranks"] == [9, 14]
    assert {"id", "description", "ranks", "stalled_op", "lagging_ranks"} <= set(result["groups"][0])
    assert {"type", "sizes", "dtype", "seq_id"} <= set(result["groups"][0]["stalled_op"])


def test_text_on_real_set() -> None:
    p = _fr(real_dumps_dir("lock_gil_1st"))
    assert p.returncode == 0, p.stderr
    assert "culprit ranks: 9,14" in p.stdout
    assert "group 37 TENSOR_MODEL_PARALLEL_GROUP (4 ranks) stalled" in p.stdout


def test_files_given_one_by_one(tmp_path: Path) -> None:
    files = write_dumps(stalled_allreduce_job(4, culprits=[1]), tmp_path)
    p = _fr(*files, "--format", "json")
    assert p.returncode == 0 and json.loads(p.stdout)["culprit_ranks"] == [1]


def test_partially_readable_set_is_analysed_with_problems_listed(tmp_path: Path) -> None:
    shutil.copytree(real_dumps_dir("lock_gil_1st"), tmp_path / "s")
    (tmp_path / "s" / "_dump_0").write_bytes(b"\x80\x02}q\x00(X")  # truncated
    p = _fr(tmp_path / "s", "--format", "json")
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert [u["rank"] for u in result["unreadable"]] == [0]
    assert result["ranks_read"] == 15
    tp = _fr(tmp_path / "s")
    assert "unreadable: " in tp.stdout and "_dump_0: truncated or corrupt pickle" in tp.stdout


def test_no_arguments_is_a_usage_error() -> None:
    p = _fr()
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1 and "arguments are required" in p.stderr
    assert "see `relaunch fr --help`" in p.stderr


def test_missing_path(tmp_path: Path) -> None:
    _one_line_error(_fr(tmp_path / "nope"), "no such file or directory")


def test_directory_without_dumps(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    _one_line_error(_fr(tmp_path), "no Flight Recorder dump files found")


def test_non_dump_file(tmp_path: Path) -> None:
    f = tmp_path / "_dump_0"
    f.write_text("just text\n")
    _one_line_error(_fr(f), "not a Flight Recorder dump")


def test_malicious_pickle_only(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {marker}",))

    (tmp_path / "_dump_0").write_bytes(pickle.dumps({"entries": [], "version": "2.9", "e": Evil()}))
    _one_line_error(_fr(tmp_path), "refused to load")
    assert not marker.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file: permissions not testable")
def test_unreadable_file(tmp_path: Path) -> None:
    f = write_dumps(stalled_allreduce_job(2, [1]), tmp_path)[0]
    f.chmod(0)
    _one_line_error(_fr(f), "unreadable")


def test_bad_format_flag(tmp_path: Path) -> None:
    p = _fr(tmp_path, "--format", "xml")
    assert p.returncode == 2 and "invalid choice" in p.stderr


def test_broken_link_is_unreadable_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "_dump_0").symlink_to(tmp_path / "gone")
    _one_line_error(_fr(tmp_path), "_dump_0: a symbolic link (not followed)")
    write_dumps(stalled_allreduce_job(3, [2]), tmp_path / "more")
    (tmp_path / "more" / "_dump_0").unlink()
    (tmp_path / "more" / "_dump_0").symlink_to(tmp_path / "gone")
    p = _fr(tmp_path / "more", "--format", "json")
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert result["unreadable"][0]["rank"] == 0 and result["culprit_ranks"] == [0, 2]
