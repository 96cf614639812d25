"""relaunch.checkpoint through a real 2-launcher `relaunch run` job (gloo on loopback).

One job (tests/workers/ckpt_job.py, run once for the module) tells the whole story; each
test checks one part of it: a save killed in flight leaves the previous complete one, a
node whose local tier was removed restores from its peer's replica, an aborted save
leaves nothing visible, finalization runs exactly once per complete checkpoint and rank,
the launcher records `checkpoint` facts and tells the restarted workers where to resume.
The checksum and discovery rules are checked on the job's files and on hand-made folders.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from relaunch.checkpoint import CheckpointCorrupted, CheckpointError, latest_complete, load
from relaunch.checkpoint.layout import MARKER, final_name
from tests._launcher_helpers import REPO, facts_of, run_two_nodes

WORKER = REPO / "tests" / "workers" / "ckpt_job.py"


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("ckpt")
    root = tmp / "root"
    codes, errs = run_two_nodes(
        tmp,
        "ckpt",
        ["--max-restarts", "2", "--workers-stop-timeout", "3", str(WORKER), "--root", str(root)],
        timeout=240,
    )
    logs = {p.name: p.read_text() for p in (tmp / "logs" / "ckpt").glob("cycle_*.log")}
    return {
        "codes": codes,
        "errs": errs,
        "root": root,
        "logs": logs,
        "log_dir": tmp / "logs" / "ckpt",
    }


def _log(job: dict, name: str) -> str:
    logs = job["logs"]
    assert name in logs, (sorted(logs), job["errs"])
    return logs[name]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kill_during_save_resumes_from_the_previous_complete_step(job: dict) -> None:
    assert job["codes"] == [0, 0], job["errs"]
    assert "rank 1 killed by signal SIGKILL" in _log(job, "cycle_0.node1.log")
    for node in (0, 1):
        text = _log(job, f"cycle_1.node{node}.log")
        # step 2 was in flight when rank 1 died: never visible, step 1 is restored intact
        assert re.search(rf"rank {node}: restored step 1 from local tier content_ok=True", text)
    root: Path = job["root"]
    for tier in ("persistent", "node0", "node1"):
        assert not (root / tier / final_name(2)).exists()
        # its temporary folders were removed by the restarted cycle's managers
        assert not [
            p for p in (root / tier).iterdir() if p.name.startswith(".partial-step_000000002")
        ]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_node_that_lost_its_local_tier_restores_from_a_peer_replica(job: dict) -> None:
    text = _log(job, "cycle_1.node1.log")
    got = re.search(
        r"rank 1: restored step 1 from local tier content_ok=True from_peers=\[(.*)\]", text
    )
    assert got, text
    # every file came from node 0 (rank 1's own shard as node 0's replica of it)
    assert got.group(1).split(",") == [
        ".metadata<-rank 0",
        "__0_0.distcp<-rank 0",
        "__1_0.distcp<-rank 0",
    ]
    assert "from_peers=[]" in _log(job, "cycle_1.node0.log")  # node 0 had its own


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_abort_leaves_no_checkpoint_visible(job: dict) -> None:
    assert "rank 0: abort=True outcome=aborted" in _log(job, "cycle_1.node0.log")
    assert "rank 1: abort=False outcome=aborted" in _log(job, "cycle_1.node1.log")
    root: Path = job["root"]
    for tier in ("persistent", "node0", "node1"):
        assert not (root / tier / final_name(4)).exists()
        visible = sorted(p.name for p in (root / tier).iterdir() if not p.name.startswith("."))
        assert visible == [final_name(1), final_name(3)]
    info = latest_complete(root / "persistent")
    assert info is not None and info.step == 3


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_writer_process_fails_the_save_and_shows_nothing(job: dict) -> None:
    for node in (0, 1):
        text = _log(job, f"cycle_1.node{node}.log")
        assert f"rank {node}: writer killed: step 5 failed" in text, text
        assert f"rank {node}: newest persistent 3" in text
    root: Path = job["root"]
    for tier in ("persistent", "node0", "node1"):
        assert not (root / tier / final_name(5)).exists()
    info = latest_complete(root / "persistent")
    assert info is not None and info.step == 3
    # a failed save's temporary folder stays hidden until the next manager removes it
    assert [p.name for p in (root / "node0").iterdir() if p.name.startswith(".partial-")] == [
        p.name for p in (root / "node0").iterdir() if p.name.startswith(".partial-step_000000005-")
    ]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_finalization_runs_once_per_complete_checkpoint_and_rank(job: dict) -> None:
    lines = (job["root"] / "finalized.txt").read_text().splitlines()
    assert sorted(lines) == ["rank=0 step=1", "rank=0 step=3", "rank=1 step=1", "rank=1 step=3"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_launcher_records_checkpoints_and_tells_the_restart(job: dict) -> None:
    c0 = facts_of(_log(job, "cycle_0.node0.log"), "checkpoint")
    assert [(f["step"], f["tier"]) for f in c0] == [(1, "local"), (1, "persistent")]
    assert c0[1]["path"].endswith("persistent/step_000000001") and c0[1]["size"] > 0
    # the restart agent reads the launcher's checkpoint line: the verdict (history) has it
    from relaunch.restart_agent import scan_file

    ev = scan_file(job["log_dir"] / "cycle_0.node0.log")
    assert ev.progress.checkpoint_iteration == 1
    assert str(ev.progress.last_checkpoint).endswith("persistent/step_000000001")
    # cycle 1 reported no iteration: its complete checkpoint of step 3 counts as progress
    for node in (0, 1):
        its = facts_of(_log(job, f"cycle_1.node{node}.log"), "iterations")
        assert its and its[-1]["last"] == {str(node): 3}, its
    root: Path = job["root"]
    for node in (0, 1):
        hint = f"rank {node} resume hint: {root / 'persistent' / final_name(1)}"
        assert hint in _log(job, f"cycle_1.node{node}.log")
        assert f"rank {node} resume hint: None" in _log(job, f"cycle_0.node{node}.log")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_corrupted_shard_is_named_at_load(job: dict, tmp_path: Path) -> None:
    src = job["root"] / "persistent" / final_name(3)
    copy = tmp_path / final_name(3)
    shutil.copytree(src, copy)
    sd = {"w": torch.zeros(64, 1024), "r0": torch.zeros(16, 1024)}
    assert load(sd, copy).step == 3 and bool((sd["w"] == 3.0).all())  # intact: loads
    shard = copy / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorrupted) as exc:
        load(sd, copy)
    msg = str(exc.value)
    assert "\n" not in msg and str(shard) in msg and "crc32" in msg


def _fake(root: Path, step: int, files: dict[str, bytes], marker: object = "good") -> Path:
    import zlib

    folder = root / final_name(step)
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    rec = {
        "step": step,
        "world_size": 1,
        "files": {n: {"size": len(d), "crc32": zlib.crc32(d)} for n, d in files.items()},
    }
    if marker == "good":
        (folder / MARKER).write_text(json.dumps(rec))
    elif marker is not None:
        (folder / MARKER).write_text(str(marker))
    return folder


def test_latest_complete_never_returns_a_torn_checkpoint(tmp_path: Path) -> None:
    good = {".metadata": b"m", "__0_0.distcp": b"abc"}
    _fake(tmp_path, 1, good)
    _fake(tmp_path, 2, good, marker=None)  # killed before the commit: no marker
    _fake(tmp_path, 3, good, marker="{not json")  # a marker cut short
    torn = _fake(tmp_path, 4, good)
    (torn / "__0_0.distcp").write_bytes(b"ab")  # a file shorter than recorded
    (tmp_path / ".partial-step_000000005-x").mkdir()  # a save in flight
    _fake(tmp_path, 6, {"__0_0.distcp": b"abc"})  # no DCP metadata recorded
    info = latest_complete(tmp_path)
    assert info is not None and info.step == 1
    assert latest_complete(tmp_path / "missing") is None


def test_prune_keeps_the_newest_complete_checkpoints(tmp_path: Path) -> None:
    from relaunch.checkpoint.layout import prune

    good = {".metadata": b"m", "__0_0.distcp": b"abc"}
    for step in (1, 2, 3, 4):
        _fake(tmp_path, step, good)
    _fake(tmp_path, 5, good, marker=None)  # torn: neither counted nor removed here
    assert prune(tmp_path, 2) == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == [final_name(s) for s in (3, 4, 5)]
    assert prune(tmp_path, 0) == []


def test_loading_a_folder_that_is_not_a_checkpoint_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as exc:
        load({}, tmp_path)
    assert str(exc.value) == f"{tmp_path} is not a complete checkpoint (no valid COMMITTED marker)"


def test_the_launcher_and_the_package_name_one_resume_variable() -> None:
    """The launcher spells the resume variable itself (the package imports torch's DCP);
    both must be the same name or a restart silently starts from scratch."""
    from relaunch.checkpoint.manager import ENV_RESUME as PACKAGE
    from relaunch.launcher.agent import ENV_RESUME as LAUNCHER

    assert PACKAGE == LAUNCHER == "RELAUNCH_RESUME_CHECKPOINT"
