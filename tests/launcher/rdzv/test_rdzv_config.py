"""Config-time checks of the rendezvous options through the real CLI: each bad input is a
one-line error with exit code 2 before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from relaunch.launcher.rdzv import node as rdzv_node
from tests._launcher_helpers import run_relaunch
from tests._rdzv_helpers import RDZV_WORKER

pytestmark = pytest.mark.timeout(120)

MULTI = ["--rdzv-endpoint", "127.0.0.1:29999", "--ft-gpu-health", "off"]


def _usage_error(tmp_path: Path, args: list[str], env: dict[str, str] | None = None) -> str:
    import os
    import subprocess
    import sys

    from tests._launcher_helpers import relaunch_env

    full = relaunch_env(tmp_path)
    for k in ("SLURM_PROCID", "SLURM_NODEID", "GROUP_RANK", "RELAUNCH_SEGMENT_ID"):
        full.pop(k, None)
    full.update(env or {})
    r = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "run", *args, str(RDZV_WORKER)],
        cwd=tmp_path, env=full, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert os.path.exists(tmp_path)  # nothing else to check: nothing was started
    return lines[0]


def test_min_nodes_must_be_a_multiple_of_the_segment(tmp_path: Path) -> None:
    line = _usage_error(
        tmp_path, ["--nnodes", "3:4", "--ft-segment", "2", *MULTI], {"RELAUNCH_SEGMENT_ID": "A"}
    )
    assert "--ft-segment 2: the minimum node count 3 (--nnodes) must be a multiple" in line


def test_segment_without_an_nvlink_domain_says_how_to_give_one(tmp_path: Path) -> None:
    line = _usage_error(tmp_path, ["--nnodes", "2:4", "--ft-segment", "2", *MULTI])
    assert "--ft-segment:" in line and "RELAUNCH_SEGMENT_ID" in line


def test_segment_file_that_cannot_be_read(tmp_path: Path) -> None:
    line = _usage_error(
        tmp_path,
        ["--nnodes", "2:4", "--ft-segment", "2", *MULTI],
        {"RELAUNCH_SEGMENT_ID_FILE": str(tmp_path / "missing")},
    )
    assert "RELAUNCH_SEGMENT_ID_FILE=" in line and "No such file" in line


def test_segment_zero_is_a_bad_value(tmp_path: Path) -> None:
    line = _usage_error(tmp_path, ["--nnodes", "2:4", "--ft-segment", "0", *MULTI])
    assert "must be >= 1" in line


def test_infra_group_rank_missing_or_bad(tmp_path: Path) -> None:
    args = ["--nnodes", "2:4", "--ft-use-infra-group-rank", *MULTI]
    line = _usage_error(tmp_path, args)
    assert "none of SLURM_PROCID, SLURM_NODEID, GROUP_RANK is set" in line
    line = _usage_error(tmp_path, args, {"SLURM_PROCID": "x1"})
    assert "SLURM_PROCID='x1' is not a non-negative integer" in line


def test_infra_rank_precedence() -> None:
    env = {"GROUP_RANK": "7", "SLURM_NODEID": "5", "SLURM_PROCID": "3"}
    assert rdzv_node.infra_group_rank(env) == (3, "SLURM_PROCID")
    assert rdzv_node.infra_group_rank({"GROUP_RANK": "7", "SLURM_NODEID": "5"}) == (
        5,
        "SLURM_NODEID",
    )
    assert rdzv_node.infra_group_rank({"GROUP_RANK": "7"}) == (7, "GROUP_RANK")


def test_segment_id_sources(tmp_path: Path) -> None:
    f = tmp_path / "seg"
    f.write_text("domain-7\nignored\n")
    assert rdzv_node.segment_id({"RELAUNCH_SEGMENT_ID_FILE": str(f)}) == (
        "domain-7",
        "RELAUNCH_SEGMENT_ID_FILE",
    )
    env = {"RELAUNCH_SEGMENT_ID": "d1", "RELAUNCH_SEGMENT_ID_FILE": str(f)}
    assert rdzv_node.segment_id(env) == ("d1", "RELAUNCH_SEGMENT_ID")


def test_unknown_rdzv_impl_is_a_usage_error(tmp_path: Path) -> None:
    r = run_relaunch(tmp_path, ["--ft-rdzv-impl", "fancy", str(RDZV_WORKER)], timeout=60)
    assert r.returncode == 2
    assert "must be barrier (default) or c10d" in r.stderr


def test_bad_rendezvous_conf_numbers(tmp_path: Path) -> None:
    line = _usage_error(
        tmp_path, ["--nnodes", "2:4", "--rdzv-conf", "keep_alive_interval=x", *MULTI]
    )
    assert "--rdzv-conf keep_alive_interval='x': not a number" in line
    line = _usage_error(tmp_path, ["--nnodes", "2:4", "--rdzv-conf", "join_timeout=0", *MULTI])
    assert "--rdzv-conf join_timeout='0': must be >= 1" in line


def test_cluster_id_from_nvml_fabric_info() -> None:
    done, uid = rdzv_node.FABRIC_STATE_COMPLETED, bytes(range(1, 17))
    expected = "01020304-0506-0708-090a-0b0c0d0e0f10"
    assert rdzv_node.cluster_id_from([(done, 0, uid), (done, 0, uid)]) == expected
    # GPUs not (yet) in a fabric, or with an error status, are not a domain
    with pytest.raises(ValueError, match="no GPU of this node reports"):
        rdzv_node.cluster_id_from([(1, 0, uid), (done, 5, uid), (done, 0, bytes(16))])
    with pytest.raises(ValueError, match="no GPU of this node reports"):
        rdzv_node.cluster_id_from([])
    with pytest.raises(ValueError, match="different ClusterUUIDs"):
        rdzv_node.cluster_id_from([(done, 0, uid), (done, 0, bytes(range(2, 18)))])


def test_segment_id_through_the_real_nvml() -> None:
    """Here (no driver) and on a GPU machine without an NVLink fabric: a one-line reason
    naming the override; on an NVSwitch system: the fabric's ClusterUUID."""
    try:
        value, source = rdzv_node.segment_id({})
    except ValueError as exc:
        assert "RELAUNCH_SEGMENT_ID" in str(exc) and "\n" not in str(exc)
    else:
        assert source == "nvml" and len(value) == 36


def test_segment_id_bad_values_are_refused(tmp_path: Path) -> None:
    """A segment id is re-read by every node on each poll: an oversized or unprintable one
    is a one-line error; the id file must be a small regular file (a FIFO would hang)."""
    import os

    with pytest.raises(ValueError, match="at most 128 printable"):
        rdzv_node.segment_id({"RELAUNCH_SEGMENT_ID": "x" * 129})
    with pytest.raises(ValueError, match="at most 128 printable"):
        rdzv_node.segment_id({"RELAUNCH_SEGMENT_ID": "a\x1bb"})
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        rdzv_node.segment_id({"RELAUNCH_SEGMENT_ID_FILE": str(fifo)})
    big = tmp_path / "big"
    big.write_text("y" * 200 + "\n")
    with pytest.raises(ValueError, match="RELAUNCH_SEGMENT_ID_FILE=.*at most 128"):
        rdzv_node.segment_id({"RELAUNCH_SEGMENT_ID_FILE": str(big)})
    assert rdzv_node.segment_id({"RELAUNCH_SEGMENT_ID": " rack-7 "}) == (
        "rack-7",
        "RELAUNCH_SEGMENT_ID",
    )


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("short\n", "the job secret must be at least 16 bytes"),
        (None, "No such file or directory"),
    ],
)
def test_bad_job_secret_file(tmp_path: Path, content: str | None, says: str) -> None:
    path = tmp_path / "secret"
    if content is not None:
        path.write_text(content)
    line = _usage_error(tmp_path, ["--nnodes", "2", "--ft-job-secret-file", str(path), *MULTI])
    assert line.endswith(says) and f"--ft-job-secret-file {path}" in line, line


def test_multi_node_job_without_a_secret_is_refused(tmp_path: Path) -> None:
    """No --ft-job-secret-file and no RELAUNCH_JOB_SECRET: one line saying how to give one."""
    line = _usage_error(tmp_path, ["--nnodes", "2", *MULTI], env={"RELAUNCH_JOB_SECRET": ""})
    assert "a multi-node job needs a job secret" in line, line
    assert "--ft-job-secret-file PATH or RELAUNCH_JOB_SECRET" in line, line
    assert "--ft-insecure-store" in line, line


def test_job_secret_from_the_environment_must_be_long_enough(tmp_path: Path) -> None:
    line = _usage_error(tmp_path, ["--nnodes", "2", *MULTI], env={"RELAUNCH_JOB_SECRET": "x"})
    assert "RELAUNCH_JOB_SECRET: the job secret must be at least 16 bytes" in line, line
