"""A Flight Recorder dump on a collective timeout, not only on a heartbeat-declared hang
(issue 23). gloo in torch 2.13 dumps nothing on a timeout (NCCL's watchdog alone has
dump-on-timeout): the worker client's exception hook (`launcher.fr_worker`) dumps the rank
whose collective timed out, and the launcher then asks the surviving ranks for theirs before
it stops them.

Real launcher, 2 real gloo workers: rank 1 stops calling the collectives after the first
all-reduce on a group with a 3 s timeout (it sleeps, as a rank stuck elsewhere); rank 0's
next all-reduce on it times out (the heartbeat timeouts are 600 s: only the collective's
timeout can end the cycle)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relaunch.launcher import fr_worker
from tests._launcher_helpers import engine_available, job_args, run_relaunch

TIMEOUT_WORKER = """
import datetime, os, time
import torch, torch.distributed as dist
import relaunch.client  # the launcher's client: heartbeats, dumps on request or timeout
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")  # the default (long) timeout: start-up skew never counts
t = torch.ones(4)
dist.all_reduce(t)  # every rank is up
short = dist.new_group(timeout=datetime.timedelta(seconds=3))
dist.all_reduce(t, group=short)
if rank == 1:
    time.sleep(600)  # never enters the next collective
dist.all_reduce(t, group=short)  # gloo: "Timed out waiting 3000ms for recv operation"
"""


def test_gloo_timeout_message_is_a_timeout() -> None:
    gloo = RuntimeError(
        "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
        "Timed out waiting 3000ms for recv operation to complete"
    )
    assert fr_worker.is_timeout(gloo)
    try:
        try:
            raise gloo
        except RuntimeError as exc:
            raise ValueError("step failed") from exc
    except ValueError as wrapped:
        assert fr_worker.is_timeout(wrapped)  # found through the cause chain
    assert not fr_worker.is_timeout(ValueError("bad config value for layer 7"))


def test_collective_timeout_dumps_every_rank_and_names_the_missing_one(tmp_path: Path) -> None:
    if why := engine_available():
        pytest.skip(why)
    script = tmp_path / "timeout.py"
    script.write_text(TIMEOUT_WORKER)
    args = job_args(
        tmp_path, "to", "--ft-attribution-endpoint", "off", "--max-restarts", "0",
        "--ft-heartbeat-timeout", "600", "--ft-initial-heartbeat-timeout", "600",
    )  # fmt: skip
    r = run_relaunch(tmp_path, [*args, str(script)], timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    where = tmp_path / "logs" / "to" / "fr" / "cycle_0"
    assert sorted(p.name for p in where.iterdir()) == ["rank_0", "rank_1", "request"]
    log = next((tmp_path / "logs" / "to").glob("cycle_0*.log")).read_text()
    assert "rank(s) 0 dumped on a collective timeout; dumps of ranks 0,1" in log, log
    from relaunch.attribution.fr import analyze_paths

    found = analyze_paths([where / "rank_0", where / "rank_1"], workers=1)
    assert found["culprit_ranks"] == [1], found


def test_a_single_node_job_sends_its_dumps_to_the_service(tmp_path: Path) -> None:
    """A single-node job reporting to `relaunch serve` uploads its cycle's dumps before it asks
    for the verdict (the service may run on another host and read no dump folder of this
    one): the cycle's one analysis names the rank that never entered the collective."""
    if why := engine_available():
        pytest.skip(why)
    from tests._service_helpers import running_service

    script = tmp_path / "timeout.py"
    script.write_text(TIMEOUT_WORKER)
    with running_service(tmp_path) as svc:
        args = job_args(
            tmp_path, "to", "--ft-attribution-endpoint", svc.endpoint, "--max-restarts", "0",
            "--ft-heartbeat-timeout", "600", "--ft-initial-heartbeat-timeout", "600",
        )  # fmt: skip
        r = run_relaunch(tmp_path, [*args, str(script)], timeout=300)
        assert r.returncode == 1, r.stdout + r.stderr
        with svc.client() as c:
            evidence = c.get("/v1/jobs/to/cycles/0/evidence").json()
            verdict = c.get("/v1/jobs/to/cycles/0/verdict").json()["verdict"]
    uploads = list((svc.workdir / "data" / "fr" / "to" / "cycle_0").glob("upload-*"))
    assert len(uploads) == 1, uploads  # sent by the launcher, once
    assert sorted(p.name for p in uploads[0].iterdir()) == ["rank_0", "rank_1"]
    assert evidence["fr"]["culprit_ranks"] == [1], evidence.get("fr")
    assert verdict["fr"] == {"culprit_ranks": [1]}, json.dumps(verdict)[:3000]
    # rank 0's timeout is a cascade; rank 1 has no line of its own: the dumps name it
    assert verdict["primary"]["rank"] == 1, json.dumps(verdict)[:3000]
    assert verdict["primary"]["rank_source"] == "flight_recorder"
    assert "Blamed rank 1 (from the Flight Recorder dumps" in verdict["basis"]
    assert verdict["fr"] == {"culprit_ranks": [1]}, verdict.get("fr")
