"""The shared exclusion file: reading (fail open), appending under a lock (no lost entry
with concurrent writers, real processes), and real `relaunch run` launchers that consume
and publish it."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest

from relaunch.launcher.health.exclusion_file import (
    ExclusionFileError,
    append_exclusion,
    read_exclusions,
)
from tests._launcher_helpers import REPO, cycle_logs, job_args, relaunch_env, run_relaunch

WORKER = REPO / "tests" / "workers" / "health_job.py"


def test_append_and_read(tmp_path: Path) -> None:
    path = tmp_path / "excl.json"
    assert append_exclusion(path, "gpu-3", "xid 79", job_id="j") is True
    assert append_exclusion(path, "gpu-3", "again") is False  # the first decision is kept
    assert append_exclusion(path, "gpu-4", "ib down") is True
    doc = json.loads(path.read_text())
    assert doc["version"] == 1
    assert [(e["node"], e["reason"]) for e in doc["excluded"]] == [
        ("gpu-3", "xid 79"),
        ("gpu-4", "ib down"),
    ]
    assert doc["excluded"][0]["job_id"] == "j"
    ex = read_exclusions(path)
    assert ex.find("gpu-3")["reason"] == "xid 79" and ex.find("gpu-5") is None


@pytest.mark.parametrize(
    "text, nodes",
    [
        ("", []),
        ('["a", {"node": "b", "reason": "r"}]', ["a", "b"]),  # a bare list from a scheduler
        ('{"excluded": []}', []),
    ],
)
def test_accepted_shapes(tmp_path: Path, text: str, nodes: list[str]) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    assert list(read_exclusions(path).entries) == nodes


@pytest.mark.parametrize(
    "text, message",
    [
        ("{bad", "not JSON"),
        ('{"excluded": 3}', "expected an object with an 'excluded' list"),
        ('{"excluded": [{"reason": "no node"}]}', "has no node id"),
        ("42", "expected an object"),
    ],
)
def test_malformed_files_are_errors_and_never_overwritten(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(ExclusionFileError, match=message):
        read_exclusions(path)
    with pytest.raises(ExclusionFileError):
        append_exclusion(path, "n", "r")
    assert path.read_text() == text  # someone's decision is not replaced


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_exclusions(tmp_path / "none.json")


def _writer(path: str, who: int, count: int) -> None:
    for i in range(count):
        append_exclusion(path, f"w{who}-n{i}", f"writer {who}")


def test_concurrent_writers_lose_no_entry(tmp_path: Path) -> None:
    """Four processes append 25 nodes each to one file at the same time."""
    path = str(tmp_path / "excl.json")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    nodes = set(read_exclusions(path).entries)
    assert nodes == {f"w{w}-n{i}" for w in range(4) for i in range(25)}


# -- real launchers ---------------------------------------------------------------------------
def test_excluded_node_does_not_join(tmp_path: Path) -> None:
    path = tmp_path / "excl.json"
    append_exclusion(path, "rack1-n7", "NVLink errors")
    r = run_relaunch(
        tmp_path,
        job_args(
            tmp_path, "ex", "--ft-attribution-endpoint", "off",
            "--ft-exclusion-file", str(path), "--ft-node-id", "rack1-n7",
        ) + [str(WORKER)],
    )  # fmt: skip
    assert r.returncode == 4, r.stderr
    assert (
        "node unhealthy, not joining the rendezvous: exclusion_file: node rack1-n7 listed "
        f"in {path}: NVLink errors"
    ) in r.stderr
    assert cycle_logs(tmp_path, "ex") == []
    record = json.loads((tmp_path / "logs/ex/node_health/rack1-n7.first.json").read_text())
    assert record["healthy"] is False and record["checks"][0]["name"] == "exclusion_file"


def test_node_not_listed_joins(tmp_path: Path) -> None:
    path = tmp_path / "excl.json"
    append_exclusion(path, "other", "bad")
    r = run_relaunch(
        tmp_path,
        job_args(
            tmp_path, "in", "--ft-attribution-endpoint", "off",
            "--ft-exclusion-file", str(path), "--ft-node-id", "me",
        ) + [str(WORKER)],
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "exclusion file" not in r.stderr
    assert list(read_exclusions(path).entries) == ["other"]


@pytest.mark.parametrize(
    "content, warning",
    [
        (None, "not found; failing open (joining)"),
        ("{not json", "unusable (not JSON"),
        ('{"excluded": "all"}', "unusable (expected an object with an 'excluded' list)"),
    ],
)
def test_missing_or_malformed_file_fails_open(
    tmp_path: Path, content: str | None, warning: str
) -> None:
    path = tmp_path / "excl.json"
    if content is not None:
        path.write_text(content)
    r = run_relaunch(
        tmp_path,
        job_args(tmp_path, "fo", "--ft-attribution-endpoint", "off", "--ft-exclusion-file",
                 str(path)) + [str(WORKER)],
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"relaunch: warning: exclusion file {path} {warning}" in r.stderr
    assert cycle_logs(tmp_path, "fo") == ["cycle_0.log"]


def test_two_failing_launchers_both_publish(tmp_path: Path) -> None:
    """Two launchers fail their health check (a real failing nvhcd service) at the same
    time and append themselves to one file: both entries are there."""
    from tests._health_helpers import start_health_service

    path = tmp_path / "excl.json"
    with start_health_service("failing") as endpoint:
        procs = []
        for node in ("n-a", "n-b"):
            d = tmp_path / node
            d.mkdir()
            args = job_args(
                d, "pub", "--ft-attribution-endpoint", "off", "--ft-exclusion-file",
                str(path), "--ft-node-id", node, "--ft-node-health-check-endpoint", endpoint,
            ) + [str(WORKER)]  # fmt: skip
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "relaunch.cli", "run", *args],
                    cwd=d,
                    env=relaunch_env(d),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )  # fmt: skip
            )
        outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [4, 4], outs
    entries = read_exclusions(path).entries
    assert set(entries) == {"n-a", "n-b"}
    assert all("ib check failed" in e["reason"] for e in entries.values())
    for node, (_, err) in zip(("n-a", "n-b"), outs, strict=True):
        assert f"node {node} added to exclusion file {path}" in err
