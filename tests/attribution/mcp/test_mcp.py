"""`relaunch mcp` driven by the mcp SDK's real client: stdio and streamable HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters

from relaunch import storage
from tests._web_helpers import REPO_ROOT, free_port, seed_history

EXPECTED_TOOLS = {
    "list_jobs",
    "get_job_verdicts",
    "explain_cycle",
    "analyze_log",
    "search_history",
    "analyze_fr_dumps",
    "stragglers",
}
FP = "nccl_network_error:Got completion with error N"


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("mcp")
    url = f"sqlite:///{tmp / 'relaunch.db'}"
    repo = storage.open_repository(url)
    seed_history(repo)
    repo.save_node_health("train-llama", 1, {"node": "node2", "healthy": False, "reason": "xid 79"})
    repo.close()
    root = tmp / "root"
    root.mkdir()
    (tmp / "secret.log").write_text("SyntaxError: outside the root\n")
    (root / "escape.log").symlink_to(tmp / "secret.log")
    return {"url": url, "root": root, "tmp": tmp}


def stdio_params(world: dict[str, Any], *extra: str) -> StdioServerParameters:
    args = ["-m", "relaunch.cli", "mcp", "--db", world["url"], "--allowed-root", str(world["root"])]
    return StdioServerParameters(
        command=sys.executable,
        args=args + ["--dashboard-url", "http://dash:8000", *extra],
        env=env(),
        cwd=str(REPO_ROOT),
    )


@asynccontextmanager
async def stdio_client(world: dict[str, Any]) -> AsyncIterator[Client]:
    async with Client(stdio_params(world), read_timeout_seconds=60) as client:
        yield client


def call(world: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Run tool calls in one stdio session; return the CallToolResults."""

    async def go() -> list[Any]:
        async with stdio_client(world) as c:
            return [await c.call_tool(name, args) for name, args in calls]

    return anyio.run(go)


def error_text(result: Any) -> str:
    assert result.is_error, result
    return result.content[0].text


def test_tools_have_input_and_output_schemas(world: dict[str, Any]) -> None:
    async def go() -> Any:
        async with stdio_client(world) as c:
            return await c.list_tools()

    tools = {t.name: t for t in anyio.run(go).tools}
    assert set(tools) == EXPECTED_TOOLS
    for t in tools.values():
        assert t.description and t.input_schema["type"] == "object"
        assert t.output_schema and t.output_schema.get("properties"), t.name
    assert tools["explain_cycle"].input_schema["required"] == ["job_id", "cycle"]
    assert tools["explain_cycle"].input_schema["properties"]["cycle"]["minimum"] == 0
    assert "next_step" in tools["explain_cycle"].output_schema["properties"]
    assert tools["analyze_fr_dumps"].input_schema["properties"]["paths"]["type"] == "array"


def test_history_tools_return_structured_results(world: dict[str, Any]) -> None:
    jobs, verdicts, explain, search = call(
        world,
        [
            ("list_jobs", {}),
            ("get_job_verdicts", {"job_id": "train-llama"}),
            ("explain_cycle", {"job_id": "train-llama", "cycle": 0}),
            ("search_history", {"fingerprint": FP}),
        ],
    )
    j = {x["job_id"]: x for x in jobs.structured_content["jobs"]}
    assert j["train-llama"]["last_decision"] == "STOP" and j["train-llama"]["state"] == "stopped"
    assert j["train-llama"]["dashboard_url"] == "http://dash:8000/jobs/train-llama"
    assert j["job-running"]["state"] == "running"

    v = verdicts.structured_content
    assert [c["decision"] for c in v["cycles"]] == ["RESTART", "RESTART", "RESTART", "STOP"]
    assert v["stop_cycles"] == [3]
    assert [c["last_iteration"] for c in v["cycles"]] == [100, 250, 250, None]

    e = explain.structured_content
    assert e["decision"] == "RESTART" and e["rule"] == "infra_restart"
    assert e["primary"]["line"] == 120 and e["primary"]["fingerprint"] == FP
    assert e["evidence"][0]["text"].startswith("NCCL WARN NET/IB")
    assert e["cascades"][0]["failure_class"] == "nccl_watchdog_timeout"
    assert e["budgets"]["same_root_no_progress_retries"] == 3
    assert e["fr_findings"]["culprit_ranks"] == [5]
    assert "Restarting is expected to help" in e["next_step"]
    assert e["dashboard_url"] == "http://dash:8000/jobs/train-llama/cycles/0"

    s = search.structured_content
    assert s["count"] == 2 and sorted(c["cycle"] for c in s["cycles"]) == [0, 1]


def test_explain_cycle_includes_node_health_reports(world: dict[str, Any]) -> None:
    with_report, without = call(
        world,
        [
            ("explain_cycle", {"job_id": "train-llama", "cycle": 1}),
            ("explain_cycle", {"job_id": "train-llama", "cycle": 0}),
        ],
    )
    assert with_report.structured_content["node_health"] == [
        {"node": "node2", "healthy": False, "reason": "xid 79"}
    ]
    assert without.structured_content["node_health"] == []


def test_stop_cycle_says_do_not_restart(world: dict[str, Any]) -> None:
    [r] = call(world, [("explain_cycle", {"job_id": "train-llama", "cycle": 3})])
    e = r.structured_content
    assert e["decision"] == "STOP" and e["rule"] == "workload_certain_stop"
    assert e["next_step"].startswith("Do not restart: fix python_syntax_error (log line 3)")


def test_bad_arguments_are_tool_errors(world: dict[str, Any]) -> None:
    results = call(
        world,
        [
            ("explain_cycle", {"job_id": "nope", "cycle": 0}),
            ("explain_cycle", {"job_id": "train-llama", "cycle": 99}),
            ("explain_cycle", {"job_id": "train-llama", "cycle": -1}),
            ("search_history", {}),
            ("search_history", {"failure_class": "cuda_oom", "decision": "MAYBE"}),
            ("list_jobs", {"limit": 0}),
            ("analyze_log", {"path": "relative.log"}),
            ("analyze_log", {"path": str(world["tmp"] / "secret.log")}),
            ("analyze_log", {"path": str(world["root"] / ".." / "secret.log")}),
            ("analyze_log", {"path": str(world["root"] / "escape.log")}),
            ("analyze_log", {"path": str(world["root"] / "missing.log")}),
            ("analyze_fr_dumps", {"paths": []}),
            ("analyze_fr_dumps", {"paths": [str(world["tmp"])]}),
            ("explain_cycle", {"job_id": "train-llama", "cycle": 2**63}),
            ("analyze_log", {"path": str(world["root"] / "x.log"), "job_id": "../../x"}),
            ("analyze_log", {"path": str(world["root"] / "x.log"), "cycle": 2**31}),
        ],
    )
    texts = [error_text(r) for r in results]
    assert "no job 'nope' in the history" in texts[0]
    assert "has no cycle 99" in texts[1]
    assert "cycle" in texts[2] and "greater than or equal to 0" in texts[2]
    assert "give a fingerprint or a failure_class" in texts[3]
    assert "decision" in texts[4]
    assert "limit" in texts[5]
    assert "must be absolute" in texts[6]
    assert "outside the allowed roots" in texts[7]
    assert "must not contain '..'" in texts[8]
    assert "symlink (refused)" in texts[9]  # any symlink below the root (issue 26)
    assert "no such file" in texts[10]
    assert "paths" in texts[11]
    assert "outside the allowed roots" in texts[12]
    # bounds of the service's /v1 (a stored cycle or job must be reachable there)
    assert "cycle" in texts[13] and "less than or equal to 2147483647" in texts[13]
    assert "job_id" in texts[14] and "pattern" in texts[14]
    assert "cycle" in texts[15] and "less than or equal to 2147483647" in texts[15]


def test_analyze_fr_dumps_names_the_culprit(world: dict[str, Any]) -> None:
    from tests._fr_helpers import stalled_allreduce_job, write_dumps

    dumps = world["root"] / "fr"
    write_dumps(stalled_allreduce_job(4, culprits=[2]), dumps)
    outside = world["tmp"] / "outside_dump_0"
    outside.write_bytes((dumps / "_dump_0").read_bytes())
    sneaky = world["root"] / "fr_sneaky"
    sneaky.mkdir()
    (sneaky / "_dump_0").symlink_to(outside)
    by_dir, by_file, escape = call(
        world,
        [
            ("analyze_fr_dumps", {"paths": [str(dumps)]}),
            ("analyze_fr_dumps", {"paths": [str(p) for p in sorted(dumps.iterdir())]}),
            ("analyze_fr_dumps", {"paths": [str(sneaky)]}),
        ],
    )
    assert by_dir.structured_content["culprit_ranks"] == [2]
    assert by_dir.structured_content["files"] == 4
    assert by_file.structured_content["culprit_ranks"] == [2]
    assert "symlink (refused)" in error_text(escape)


def test_analyze_log_uses_history_and_saves_only_when_asked(world: dict[str, Any]) -> None:
    log = world["root"] / "cycle_9.log"
    log.write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "train.py", line 88\n'
        "[rank0]: SyntaxError: invalid syntax\n"
    )
    plain, with_history, saved, verdicts = call(
        world,
        [
            ("analyze_log", {"path": str(log)}),
            ("analyze_log", {"path": str(log), "job_id": "train-llama", "cycle": 9}),
            ("analyze_log", {"path": str(log), "job_id": "mcp-job", "cycle": 0, "save": True}),
            ("get_job_verdicts", {"job_id": "mcp-job"}),
        ],
    )
    p = plain.structured_content
    assert p["saved"] is False and p["prior_cycles_considered"] == 0
    assert p["verdict"]["decision"] in ("STOP", "RESTART")
    assert p["verdict"]["primary"]["failure_class"] == "python_syntax_error"
    assert p["verdict"]["primary"]["line"] == 3
    assert with_history.structured_content["prior_cycles_considered"] == 4
    assert saved.structured_content["saved"] is True
    assert [c["cycle"] for c in verdicts.structured_content["cycles"]] == [0]


def test_cli_rejects_bad_flags_with_one_line_errors(world: dict[str, Any]) -> None:
    base = [sys.executable, "-m", "relaunch.cli", "mcp"]
    cases = [
        (["--allowed-root", str(world["tmp"] / "nope")], "is not a directory"),
        (["--http", "--port", "70000"], "argument --port: must be between 1 and 65535"),
        (["--http", "--host", "0.0.0.0"], "not loopback, without --token-file"),
        (["--token-file", str(world["tmp"] / "secret.log")], "--token-file needs --http"),
        (["--http", "--token-file", str(world["tmp"] / "none")], "cannot read --token-file"),
        (["--http", "--token-file", "/dev/zero"], "is not a regular file"),
        (["--db", "notadb://x"], "unsupported database URL scheme"),
    ]
    for extra, message in cases:
        r = subprocess.run(
            base + extra, env=env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 2, r.stderr
        assert message in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_streamable_http_serves_the_same_tools(world: dict[str, Any], tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "relaunch.cli", "mcp", "--db", world["url"], "--http"]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    out = open(tmp_path / "mcp-http.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(argv, env=env(), cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "mcp-http.log").read_text()
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

        async def go() -> tuple[Any, Any]:
            async with Client(url, read_timeout_seconds=60) as c:
                tools = await c.list_tools()
                r = await c.call_tool("explain_cycle", {"job_id": "train-llama", "cycle": 3})
                return tools, r

        tools, result = anyio.run(go)
        assert {t.name for t in tools.tools} == EXPECTED_TOOLS
        assert result.structured_content["decision"] == "STOP"
        assert result.structured_content["primary"]["failure_class"] == "python_syntax_error"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        out.close()


def _start_http(world: dict[str, Any], tmp_path: Path, *extra: str) -> tuple[Any, str]:
    port = free_port()
    argv = [sys.executable, "-m", "relaunch.cli", "mcp", "--db", world["url"], "--http"]
    argv += ["--host", "127.0.0.1", "--port", str(port), *extra]
    out = open(tmp_path / "mcp-http.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(argv, env=env(), cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, (tmp_path / "mcp-http.log").read_text()
        try:
            httpx.get(url, timeout=1)
            return proc, url
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_streamable_http_with_a_token_file_needs_the_bearer_token(
    world: dict[str, Any], tmp_path: Path
) -> None:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    token = "tok-" + "x" * 40
    (tmp_path / "token").write_text(token + "\n")
    proc, url = _start_http(world, tmp_path, "--token-file", str(tmp_path / "token"))
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    try:
        for auth in (None, "Bearer wrong", "Basic " + token, "Bearer " + token[:-1]):
            h = dict(headers, **({"Authorization": auth} if auth else {}))
            r = httpx.post(url, json=init, headers=h, timeout=30)
            assert r.status_code == 401, (auth, r.status_code)
            assert r.json()["error"] == "unauthorized" and r.headers["www-authenticate"] == "Bearer"

        async def without() -> None:
            async with Client(url, read_timeout_seconds=30) as c:
                await c.list_tools()

        with pytest.raises(BaseException):  # noqa: B017 - the SDK wraps the 401 differently by version
            anyio.run(without)

        async def with_token() -> Any:
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, read_timeout_seconds=60) as c:
                tools = await c.list_tools()
                r = await c.call_tool("explain_cycle", {"job_id": "train-llama", "cycle": 3})
            await http.aclose()
            return tools, r

        tools, result = anyio.run(with_token)
        assert {t.name for t in tools.tools} == EXPECTED_TOOLS
        assert result.structured_content["decision"] == "STOP"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
