"""Flight Recorder dumps flow by themselves (issue 23): a real 2-node gloo job (2 workers
per node) whose global rank 2 stops calling the collectives (it sleeps, without a
heartbeat) while the other ranks wait in an all-reduce. The launchers declare the hang, ask
every node's workers for their dumps through the store before stopping anything, and
`relaunch serve` analyses the dumps of both nodes with the cycle's logs: the stored verdict
names rank 2 from the dumps, with no hand step. Each launcher has its own --log-dir (no log
dir shared by the nodes): each uploads its own dumps to the service before it reports its
node's end, and the one analysis over both nodes joins them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests._launcher_helpers import engine_available
from tests._rdzv_helpers import free_port, start_nodes, stop_all
from tests._service_helpers import running_service

NODE_LOG_URL = "/v1/jobs/up/cycles/0/nodes/node1"

HANG = """
import os, time
import torch, torch.distributed as dist
from relaunch.client import heartbeat
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
t = torch.ones(4)
for it in range(1000):
    if rank == 2 and it == 5:
        # never enters the next all-reduce; its last heartbeat came before the others' last
        # (they heart-beat once more, then wait in the all-reduce): it is silent longest
        time.sleep(600)
    heartbeat()
    dist.all_reduce(t)
    time.sleep(0.05)
"""


def test_hang_in_collective_verdict_names_rank_from_dumps(tmp_path: Path) -> None:
    if why := engine_available():
        pytest.skip(why)
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    port = free_port()
    nodes: list = []
    with running_service(tmp_path, extra_args=("--node-wait", "60")) as svc:
        try:
            start_nodes(
                nodes, tmp_path, port, "2", 2, worker=script, job="hang",
                log_dir=lambda i: tmp_path / "logs" / f"n{i}",  # a log dir of its own
                extra=(
                    "--nproc-per-node", "2", "--max-restarts", "0",
                    "--ft-attribution-endpoint", svc.endpoint,
                    "--ft-heartbeat-timeout", "4",
                    "--ft-initial-heartbeat-timeout", "120",
                ),
            )  # fmt: skip
            codes = [n.wait(timeout=400) for n in nodes]
        finally:
            stop_all(nodes)
        texts = [n.text() for n in nodes]
        assert codes == [1, 1], "\n-----\n".join(texts)
        for i, ranks in enumerate((["rank_0", "rank_1"], ["rank_2", "rank_3"])):
            where = tmp_path / "logs" / f"n{i}" / "hang" / "fr" / "cycle_0"
            assert sorted(p.name for p in where.iterdir()) == [*ranks, "request"]
        # what reached the service: each node's own dumps, uploaded by its launcher
        uploads = svc.workdir / "data" / "fr" / "hang" / "cycle_0" / "nodes"
        sent = {
            d.name.split("-")[0]: sorted(p.name for p in d.iterdir()) for d in uploads.iterdir()
        }
        assert sent == {"node0": ["rank_0", "rank_1"], "node1": ["rank_2", "rank_3"]}, sent
        with svc.client() as c:
            data = c.get("/v1/jobs/hang/cycles/0/nodes").json()
            cycle = c.get("/v1/jobs/hang/cycles/0/evidence").json()
        assert data["status"] == "completed", data
        verdict = data["verdict"]
        assert verdict["flight_recorder"]["culprit_ranks"] == [2], verdict.get("flight_recorder")
        assert verdict["flight_recorder"]["source"] == "launcher"
        assert cycle["fr"]["culprit_ranks"] == [2]
        assert [r["node"] for r in data["logs"]] == ["node0", "node1"]
        assert verdict["fan_out"]["ranks_seen"] == 4
        # the launchers' hang facts of both nodes are in the one verdict, rank 2 among them
        hung = {h["rank"] for h in verdict["fan_out"]["launcher"].get("hangs", [])}
        assert hung, verdict["fan_out"]["launcher"]
        # the dumps' culprit picks, among the hang lines of both nodes, node1's on rank 2
        assert verdict["primary"]["rank"] == 2 and verdict["primary"]["node"] == "node1"
        assert verdict["flight_recorder"]["primary_is_culprit"] is True
        assert all(e["rank"] == 2 for e in verdict["flight_recorder"]["evidence"])


def test_node_dump_upload_bad_inputs(tmp_path: Path) -> None:
    """What each bad upload of a node's dumps gets (real service): a node that registered no
    log 404, no file 422, a part named like a path is stored under a plain name inside the
    upload's own fresh folder; nothing is analysed on arrival."""
    log = tmp_path / "logs" / "up" / "cycle_0.node1.log"
    log.parent.mkdir(parents=True)
    log.write_text("[relaunch] cycle 0 started\n")
    with running_service(tmp_path) as svc, svc.client() as c:
        dump = {"files": ("rank_2", b"not a pickle", "application/octet-stream")}
        r = c.post(NODE_LOG_URL + "/fr", files=dump)
        assert r.status_code == 404 and r.json()["error_code"] == "not_found", r.text
        r = c.post(NODE_LOG_URL, json={"log_path": str(log), "nodes": 2, "group_rank": 1})
        assert r.status_code == 200, r.text
        r = c.post(NODE_LOG_URL + "/fr", data={"x": "1"})
        assert r.status_code == 422 and r.json()["error_code"] == "malformed_request", r.text
        parts = [
            ("files", ("../../evil", b"x", "application/octet-stream")),
            ("files", ("rank_2", b"not a pickle", "application/octet-stream")),
        ]
        r = c.post(NODE_LOG_URL + "/fr", files=parts)
        assert r.status_code == 200, r.text
        assert r.json()["files"] == ["evil", "rank_2"]
        (folder,) = (svc.workdir / "data" / "fr" / "up" / "cycle_0" / "nodes").iterdir()
        assert folder.name.startswith("node1-")
        assert sorted(p.name for p in folder.iterdir()) == ["evil", "rank_2"]
        assert c.get("/v1/jobs/up/cycles/0/nodes").json()["status"] == "waiting"


def test_a_dump_upload_that_cannot_reach_the_service_is_one_warning(tmp_path: Path) -> None:
    """The launcher's side: dumps that cannot be sent (nothing listens) give one warning and
    no exception, so the node's end is still reported after it."""
    from relaunch.launcher.attribution_client import HttpClient

    where = tmp_path / "fr"
    where.mkdir()
    (where / "rank_0").write_bytes(b"dump")
    (where / "request").touch()
    warnings: list[str] = []
    client = HttpClient(
        lambda _v: None, warnings.append, endpoint=f"http://127.0.0.1:{free_port()}"
    )
    try:
        client._fr_dirs[("j", 0)] = str(where)
        client._upload_dumps("j", 0, "node0")
    finally:
        client.close()
    assert len(warnings) == 1 and "flight recorder dumps of cycle 0 not sent" in warnings[0]


TIMEOUT_2N = """
import datetime, os, time
import torch, torch.distributed as dist
import relaunch.client
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
short = dist.new_group(timeout=datetime.timedelta(seconds=3))
dist.all_reduce(t, group=short)
if rank >= 2:
    time.sleep(600)  # node1's ranks never enter the next collective (and are in none)
dist.all_reduce(t, group=short)  # node0's ranks time out after 3 s
"""


def test_collective_timeout_on_one_node_collects_dumps_of_every_node(tmp_path: Path) -> None:
    """A gloo collective timeout (not a heartbeat hang) on a 2-node job: node0's ranks
    time out and dump themselves (the worker client's exception hook); node0's launcher,
    before it closes anything, asks every node through the store; node1's launcher has its
    ranks 2 and 3 (which never entered the collective) dump. Each launcher uploads its own
    dumps (a log dir each) and the cycle's verdict names ranks 2 and 3 from them.

    node1's workers never fail: it learns the job's end (node0's budget is 0) from the
    closed rendezvous while node0, the store host, waits for its acknowledgement, stops its
    workers and exits 1 as node0 does (one outcome on every node, not 6 for a lost store);
    node0's verdict may be decided without node1 after `--node-wait 5`, and node1's end
    (with its dumps) decides the cycle again: the test reads that stored re-decision."""
    if why := engine_available():
        pytest.skip(why)
    script = tmp_path / "timeout.py"
    script.write_text(TIMEOUT_2N)
    port = free_port()
    nodes: list = []
    with running_service(tmp_path, extra_args=("--node-wait", "5")) as svc:
        try:
            start_nodes(
                nodes, tmp_path, port, "2", 2, worker=script, job="to2",
                log_dir=lambda i: tmp_path / "logs" / f"n{i}",
                extra=(
                    "--nproc-per-node", "2", "--max-restarts", "0",
                    "--ft-attribution-endpoint", svc.endpoint,
                    "--ft-heartbeat-timeout", "600",
                    "--ft-initial-heartbeat-timeout", "600",
                ),
            )  # fmt: skip
            codes = [n.wait(timeout=400) for n in nodes]
        finally:
            stop_all(nodes)
        texts = [n.text() for n in nodes]
        assert codes == [1, 1], "\n-----\n".join(texts)
        assert "the rendezvous was closed by another node" in texts[1], texts[1]
        far = tmp_path / "logs" / "n1" / "to2" / "fr" / "cycle_0"
        assert sorted(p.name for p in far.iterdir()) == ["rank_2", "rank_3", "request"]
        near = tmp_path / "logs" / "n0" / "to2"
        assert "dumped on a collective timeout" in (near / "cycle_0.node0.log").read_text()
        with svc.client() as c:  # node1's end re-decides the cycle (an event, bounded)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                data = c.get("/v1/jobs/to2/cycles/0/nodes").json()
                verdict = data.get("verdict") or {}
                if data["status"] == "completed" and verdict["cycle_nodes"]["missing"] == []:
                    break
                time.sleep(0.2)
        assert verdict["cycle_nodes"]["missing"] == [], data
        fr = verdict["flight_recorder"]
        assert fr["culprit_ranks"] == [2, 3] and fr["source"] == "launcher", fr
