"""Multi-node cycles in a real `relaunch serve` (attribution/service/gather.py), driven over
HTTP with node logs written here: analysed once when every node is in; a node that never
reports is named after --node-wait and a late one re-decides the cycle, the earlier
decision kept; a node's stored log is never replaced (409); bad input gets one clear error
and changes nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from tests._service_helpers import require_restart_agent, running_service


def _node_log(path: Path, node: int, ranks: list[int], lines: list[str]) -> None:
    fact = {"fact": "cycle_start", "cycle": 0, "job": "mn", "node": node, "ranks": ranks,
            "world_size": 6, "t": 1_796_283_413.0 + node}  # fmt: skip
    body = ["[relaunch] fact: " + json.dumps(fact, separators=(",", ":"))]
    body += [f"[rank{r}]: step 1 loss 2.0" for r in ranks] + lines
    path.write_text("\n".join(body) + "\n")


BUG = [
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "/app/train.py", line 9, in <module>',
    "[rank3]: ValueError: bad config value for layer 7",
]


def _wait_done(c: httpx.Client, n: int = 0, nodes: int | None = None) -> dict[str, Any]:
    """The cycle's answer once it is completed (and, with `nodes`, over that many logs)."""
    deadline = time.monotonic() + 60
    while True:
        data = c.get(f"/v1/jobs/mn/cycles/{n}/nodes").json()
        done = data["status"] in ("completed", "failed")
        if done and nodes is not None:
            done = len(data["verdict"]["cycle_nodes"]["analysed"]) == nodes
        if done or time.monotonic() > deadline:
            return data
        time.sleep(0.05)


def _register(c: httpx.Client, root: Path, node: int, nodes: int) -> httpx.Response:
    return c.post(
        f"/v1/jobs/mn/cycles/0/nodes/node{node}",
        json={"log_path": str(root / f"cycle_0.node{node}.log"), "nodes": nodes,
              "group_rank": node},
    )  # fmt: skip


def test_all_nodes_in_one_verdict_over_every_log(tmp_path: Path) -> None:
    require_restart_agent()
    with running_service(tmp_path, extra_args=("--node-wait", "600")) as svc:
        root = svc.root
        for k in range(3):
            _node_log(root / f"cycle_0.node{k}.log", k, [2 * k, 2 * k + 1], BUG if k == 1 else [])
        with svc.client() as c:
            for k in range(3):
                assert _register(c, root, k, 3).status_code == 200
            for k in range(2):
                r = c.post(f"/v1/jobs/mn/cycles/0/nodes/node{k}/end", json={"outcome": "failed"})
                assert r.json()["status"] == "waiting"  # not all nodes are in
            c.post("/v1/jobs/mn/cycles/0/nodes/node2/end", json={"outcome": "stopped"})
            data = _wait_done(c)
        v = data["verdict"]
        assert data["status"] == "completed"
        assert v["primary"]["rank"] == 3 and v["primary"]["node"] == "node1"
        assert v["fan_out"]["ranks_seen"] == 6
        assert [e["node"] for e in v["cycle_nodes"]["analysed"]] == ["node0", "node1", "node2"]
        assert v["cycle_nodes"]["missing"] == []
        assert all(len(r["sha256"]) == 64 for r in data["logs"])


def test_node_that_never_reports_is_named_and_a_late_one_redecides(tmp_path: Path) -> None:
    require_restart_agent()
    with running_service(tmp_path, extra_args=("--node-wait", "0.5")) as svc:
        root = svc.root
        for k in range(3):
            _node_log(root / f"cycle_0.node{k}.log", k, [2 * k, 2 * k + 1], BUG if k == 1 else [])
        with svc.client() as c:
            for k in range(3):
                _register(c, root, k, 3)
            c.post("/v1/jobs/mn/cycles/0/nodes/node0/end", json={"outcome": "failed"})
            first = _wait_done(c)["verdict"]
            assert first["cycle_nodes"]["missing"] == ["node1", "node2"]
            assert "node(s) node1, node2 did not report" in first["basis"]
            assert first["fan_out"]["ranks_seen"] == 2
            c.post("/v1/jobs/mn/cycles/0/nodes/node1/end", json={"outcome": "failed"})
            second = _wait_done(c, nodes=2)["verdict"]
        assert second["primary"]["rank"] == 3  # the late log holds the root failure
        assert second["cycle_nodes"]["missing"] == ["node2"]
        assert second["cycle_nodes"]["previous"]["decision"] == first["decision"]
        assert second["cycle_nodes"]["previous"]["nodes"] == ["node0"]


def test_stored_node_log_is_never_replaced_and_bad_input_is_refused(tmp_path: Path) -> None:
    require_restart_agent()
    with running_service(tmp_path) as svc:
        root = svc.root
        with svc.client() as c:
            assert _register(c, root, 0, 2).status_code == 200
            other = {"log_path": str(root / "elsewhere.log"), "nodes": 2, "group_rank": 0}
            r = c.post("/v1/jobs/mn/cycles/0/nodes/node0", json=other)
            assert r.status_code == 409 and r.json()["error_code"] == "conflict"
            assert "append-only" in r.json()["message"]
            bad = [
                ({"log_path": "relative.log"}, 400),  # not absolute
                ({"log_path": "/etc/passwd"}, 403),  # outside the allowed roots
                ({"log_path": str(root / "a.log"), "nodes": 0}, 400),
                ({"log_path": str(root / "a.log"), "nodes": True}, 400),
                ({"nodes": 2}, 422),  # no path
            ]
            for body, status in bad:
                r = c.post("/v1/jobs/mn/cycles/0/nodes/node1", json=body)
                assert r.status_code == status, (body, r.text)
            r = c.post("/v1/jobs/mn/cycles/0/nodes/node9/end", json={"outcome": "failed"})
            assert r.status_code == 404  # never registered
            r = c.post("/v1/jobs/mn/lease", json={"node": ""})
            assert r.status_code in (400, 422)
            data = c.get("/v1/jobs/mn/cycles/0/nodes").json()
        assert [(x["node"], Path(x["log_path"]).name) for x in data["logs"]] == [
            ("node0", "cycle_0.node0.log")
        ]


def test_cycle_no_node_asked_about_is_not_analysed(tmp_path: Path) -> None:
    """A cycle every node ended without asking for a verdict (stopped by an earlier STOP,
    or succeeded) gets none: a later RESTART could otherwise undo the job's `stopped`."""
    require_restart_agent()
    with running_service(tmp_path, extra_args=("--node-wait", "0.2")) as svc:
        root = svc.root
        for k in range(2):
            _node_log(root / f"cycle_0.node{k}.log", k, [2 * k, 2 * k + 1], [])
        with svc.client() as c:
            for k in range(2):
                _register(c, root, k, 2)
                r = c.post(
                    f"/v1/jobs/mn/cycles/0/nodes/node{k}/end",
                    json={"outcome": "stopped", "analyse": False},
                )
                assert r.status_code == 200
            data = c.get("/v1/jobs/mn/cycles/0/nodes").json()
            cycle = c.get("/v1/jobs/mn/cycles/0").json()
        assert data["status"] == "waiting" and data["verdict"] is None
        assert all(x["ended_at"] and x["outcome"] == "stopped" for x in data["logs"])
        assert cycle.get("verdict") is None
