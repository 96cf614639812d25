"""The MCP `stragglers` tool through the mcp SDK's real client over stdio (`relaunch mcp`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from relaunch import storage
from tests.attribution.mcp.test_mcp import stdio_params

SCORES = {
    "named": [{"rank": 3, "node": "node1", "section": "fwd", "relative": 0.31, "reports": 4}],
    "persistent": [3],
    "scores": [
        {"node": "node1", "threshold": 0.7, "reports": 6, "ranks": {"3": {"relative": 0.3}}}
    ],
    "suspect_rank": 3,
    "min_reports": 2,
}


def _world(tmp_path: Path) -> dict[str, Any]:
    url = f"sqlite:///{tmp_path / 'relaunch.db'}"
    repo = storage.open_repository(url)
    verdict = {"decision": "RESTART", "rule": "restart.cascade_only", "basis": "b"}
    repo.save_verdict("slow-job", 0, {**verdict, "stragglers": SCORES})
    repo.save_verdict("slow-job", 1, verdict)
    repo.save_verdict("calm-job", 0, verdict)
    repo.close()
    root = tmp_path / "root"
    root.mkdir()
    return {"url": url, "root": root}


def test_stragglers_tool_reports_named_ranks_per_cycle_and_refuses_bad_input(
    tmp_path: Path,
) -> None:
    world = _world(tmp_path)
    calls = [
        ("stragglers", {"job_id": "slow-job"}),
        ("stragglers", {"job_id": "slow-job", "cycle": 1}),
        ("stragglers", {"job_id": "calm-job"}),
        ("stragglers", {"job_id": "nope"}),
        ("stragglers", {"job_id": "slow-job", "cycle": -1}),
    ]

    async def go() -> list[Any]:
        async with Client(stdio_params(world), read_timeout_seconds=60) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert tools["stragglers"].output_schema["properties"]["named_ranks"]
            return [await c.call_tool(name, args) for name, args in calls]

    slow, slow_c1, calm, unknown, bad = anyio.run(go)
    s = slow.structured_content
    assert s["named_ranks"] == [3]
    assert [c["cycle"] for c in s["cycles"]] == [0]
    assert s["cycles"][0]["suspect_rank"] == 3 and s["cycles"][0]["named"][0]["relative"] == 0.31
    assert slow_c1.structured_content["cycles"] == []
    assert calm.structured_content == {"job_id": "calm-job", "cycles": [], "named_ranks": []}
    assert unknown.is_error and "no job 'nope'" in unknown.content[0].text
    assert bad.is_error
