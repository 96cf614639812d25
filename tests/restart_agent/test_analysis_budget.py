"""The per-analysis budget (issue 26 item 7): past it the verdict is made on what was read.

- A log far larger than a tiny budget: a verdict comes back (no exception, no hang), marked
  `scan.budget` with the limit reached and how far the scan got, its basis says so, and it
  is exactly the verdict of the log's first `bytes_read` bytes scanned without a budget.
- A normal log under the default budget is not marked.
- `relaunch analyze` (a file and `-`): the flags and the environment set the budget, a
  warning says the rest was not read, a variable that is not a number is a one-line error.
- The real service (`relaunch serve --budget-kept-lines`) returns the marked verdict, and
  its audit artifact re-checks (`relaunch audit`) without a difference.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relaunch.restart_agent import decide
from relaunch.restart_agent.budget import (
    DEFAULT_MAX_KEPT,
    STEP,
    AnalysisBudget,
    budget_note,
)
from relaunch.restart_agent.lines import MAX_CASCADE_EVIDENCE, MAX_DIAGNOSTICS, MAX_ROOTS
from relaunch.restart_agent.scanner import LogScanner, scan_file
from tests._agent_helpers import LOGS, ROOT
from tests._service_helpers import REPO_ROOT, cli_env

SIZE = 4 * STEP  # the budget is checked once per STEP bytes: four chances to stop


def _distinct_log(path: Path, size: int = SIZE) -> Path:
    """The benchmark's `distinct` shape: every line a distinct error line."""
    spec = importlib.util.spec_from_file_location("log_shapes", ROOT / "bench" / "log_shapes.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.write_distinct(path, size, ranks=64, seed=5)
    return path


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _distinct_log(tmp_path_factory.mktemp("budget") / "distinct.log")


def _prefix_verdict(path: Path, n: int) -> dict:
    scanner = LogScanner(budget=AnalysisBudget.unlimited())
    scanner.feed(path.read_bytes()[:n])
    return decide(scanner.finish(), ()).to_dict()


@pytest.mark.parametrize(
    ("budget", "limit"),
    [
        (AnalysisBudget(cpu_seconds=None, max_kept=5), "max_kept"),
        (AnalysisBudget(cpu_seconds=1e-9, max_kept=None), "cpu_seconds"),
    ],
)
def test_tiny_budget_gives_a_verdict_on_what_was_read(
    big_log: Path, budget: AnalysisBudget, limit: str
) -> None:
    size = big_log.stat().st_size
    evidence = scan_file(big_log, budget=budget)
    assert evidence.budget is not None and evidence.budget["reached"] == limit
    read = evidence.budget["bytes_read"]
    assert read == STEP < size  # stopped at the first check: the rest was not read
    assert evidence.bytes == read
    v = decide(evidence, ()).to_dict()
    assert v["decision"] in ("RESTART", "STOP") and v["primary"] is not None
    assert v["scan"]["budget"] == evidence.budget
    assert v["basis"].endswith(budget_note(evidence.budget))
    assert "Analysis budget reached" in v["basis"] and f"first {read} bytes" in v["basis"]
    # exactly the verdict of the bytes read, scanned without a budget (what audit re-checks)
    want = _prefix_verdict(big_log, read)
    assert {k: x for k, x in v.items() if k != "basis"} == {
        **{k: x for k, x in want.items() if k != "basis"},
        "scan": {**want["scan"], "budget": evidence.budget},
    }


def test_one_huge_chunk_is_checked_piece_by_piece(big_log: Path) -> None:
    scanner = LogScanner(budget=AnalysisBudget(cpu_seconds=None, max_kept=1))
    scanner.feed(big_log.read_bytes())  # one feed of 4 MiB: stops after its first MiB
    assert scanner.budget_reached is not None and scanner.bytes_read == STEP
    scanner.feed(b"[rank0]: RuntimeError: later\n")  # ignored once the budget is reached
    assert scanner.finish().bytes == STEP


def test_normal_logs_are_not_marked(big_log: Path) -> None:
    for log in [big_log, *sorted(LOGS.glob("*.log"))[:5]]:
        v = decide(scan_file(log), ()).to_dict()
        assert "budget" not in v["scan"] and "budget reached" not in v["basis"], log


def test_defaults_and_the_environment() -> None:
    assert DEFAULT_MAX_KEPT == MAX_ROOTS + MAX_CASCADE_EVIDENCE + MAX_DIAGNOSTICS
    assert AnalysisBudget.from_env({}) == AnalysisBudget()
    env = {"RELAUNCH_ANALYSIS_CPU_SECONDS": "2.5", "RELAUNCH_ANALYSIS_MAX_KEPT": "0"}
    assert AnalysisBudget.from_env(env) == AnalysisBudget(2.5, None)  # 0: no limit
    for bad in ("abc", "-1", "nan"):
        with pytest.raises(ValueError, match="RELAUNCH_ANALYSIS_CPU_SECONDS"):
            AnalysisBudget.from_env({"RELAUNCH_ANALYSIS_CPU_SECONDS": bad})
    with pytest.raises(ValueError, match="max_kept must be positive"):
        AnalysisBudget(1.0, 0)


def _analyze(*args: str, stdin: Path | None = None, env: dict[str, str] | None = None):
    with open(stdin, "rb") if stdin else open("/dev/null", "rb") as inp:
        return subprocess.run(
            [sys.executable, "-m", "relaunch.cli", "analyze", *args],
            cwd=str(REPO_ROOT),
            env={**cli_env(), **(env or {})},
            stdin=inp,
            capture_output=True,
            timeout=300,
        )


def test_cli_flags_environment_and_stdin(big_log: Path) -> None:
    for args, stdin in (([str(big_log)], None), (["-"], big_log)):
        proc = _analyze(*args, "--budget-kept-lines", "3", "--format", "json", stdin=stdin)
        assert proc.returncode == 0, proc.stderr
        v = json.loads(proc.stdout)
        assert v["scan"]["budget"]["reached"] == "max_kept", args
        assert v["scan"]["budget"]["bytes_read"] == STEP
        err = proc.stderr.decode()
        assert "analysis budget reached (max_kept 3)" in err and "the rest was not read" in err
    env = {"RELAUNCH_ANALYSIS_MAX_KEPT": "3"}
    proc = _analyze(str(big_log), "--format", "json", env=env)
    assert json.loads(proc.stdout)["scan"]["budget"]["limit"] == 3
    proc = _analyze(str(big_log), "--format", "json", "--budget-kept-lines", "0", env=env)
    assert "budget" not in json.loads(proc.stdout)["scan"]  # the flag's 0: no limit
    proc = _analyze(str(big_log), env={"RELAUNCH_ANALYSIS_CPU_SECONDS": "soon"})
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.decode().strip().splitlines() == [
        "relaunch analyze: error: $RELAUNCH_ANALYSIS_CPU_SECONDS is not a number: 'soon'"
    ]
    proc = _analyze(str(big_log), "--budget-cpu-seconds", "-1")
    assert proc.returncode == 2 and b"--budget-cpu-seconds" in proc.stderr


def test_service_verdict_is_marked_and_its_audit_rechecks(service_factory) -> None:
    svc = service_factory(extra_args=["--budget-kept-lines", "3"])
    log = _distinct_log(svc.root / "c0.log", 2 * STEP)
    with svc.client() as c:
        c.post(
            "/logs",
            json={
                "log_path": str(log),
                "job_id": "bj",
                "cycle_id": 0,
                "analysis_intent": "terminal",
            },
        )
        got = c.get("/logs", params={"log_path": str(log)}).json()
        assert got["status"] == "completed"
        v = got["result"]
        assert v["scan"]["budget"]["reached"] == "max_kept" and v["scan"]["budget"]["limit"] == 3
        assert v["scan"]["budget"]["bytes_read"] == STEP and "Analysis budget reached" in v["basis"]
        deadline = time.monotonic() + 60
        while not (rec := c.get("/v1/jobs/bj/cycles/0").json())["audit_path"]:
            assert time.monotonic() < deadline, "no audit artifact was recorded"
            time.sleep(0.05)
    art = Path(rec["audit_path"])
    doc = json.loads(art.read_text())
    assert doc["verdict"]["scan"]["budget"] == v["scan"]["budget"]
    assert doc["inputs"]["log"]["size"] == STEP  # the identity is of the bytes analysed
    proc = subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "audit", str(art)],
        cwd=str(REPO_ROOT),
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_endless_stdin_is_cut_at_the_byte_limit() -> None:
    """`analyze -` on a stream without end: the verdict is made on the first
    $RELAUNCH_ANALYZE_MAX_BYTES bytes and a warning says the rest was not read."""
    limit = 3 * STEP + 17
    env = {**cli_env(), "RELAUNCH_ANALYZE_MAX_BYTES": str(limit)}
    proc = subprocess.run(
        "yes '[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered'"
        f" | {sys.executable} -m relaunch.cli analyze - --format json",
        shell=True,
        cwd=str(REPO_ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    v = json.loads(proc.stdout)
    assert v["scan"]["bytes"] == limit and v["primary"]["rank"] == 3
    assert f"input longer than {limit} bytes ($RELAUNCH_ANALYZE_MAX_BYTES)" in proc.stderr


def test_fr_set_beyond_its_limits_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from relaunch.attribution.fr import reader
    from relaunch.cli.main import main

    read: list[str] = []
    monkeypatch.setattr(reader, "_read_regular", lambda path: read.append(path) or b"")
    for r in range(5):
        (tmp_path / f"dump_{r}").write_bytes(b"x" * 100)
    monkeypatch.setattr(reader, "MAX_DUMP_FILES", 4)
    assert main(["fr", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["relaunch fr: error: more than 4 dump files; analyse one job's dumps at a time"]
    monkeypatch.setattr(reader, "MAX_DUMP_FILES", 10)
    monkeypatch.setattr(reader, "MAX_SET_BYTES", 450)
    assert main(["fr", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hold more than 450 bytes together" in err[0]
    assert read == []  # refused before any dump was read
    monkeypatch.setattr(reader, "MAX_SET_BYTES", 500)  # within both limits: every dump is read
    main(["fr", str(tmp_path)])
    assert len(read) == 5


def test_a_multi_node_cycle_is_scanned_under_one_budget(big_log: Path, tmp_path: Path) -> None:
    """The service's one scan over every node's log takes the service's budget (`serve
    --budget-*`), one budget for the whole cycle, not each log's own."""
    from relaunch.attribution.core.engine import NodeLog, scan_nodes

    second = tmp_path / "node1.log"
    second.write_bytes(big_log.read_bytes())
    logs = [NodeLog("node0", str(big_log), 0), NodeLog("node1", str(second), 1)]
    evidence, _ = scan_nodes(logs, budget=AnalysisBudget(cpu_seconds=None, max_kept=5))
    assert evidence.budget is not None and evidence.budget["reached"] == "max_kept"
    assert evidence.budget["bytes_read"] == STEP  # node0's first MiB; node1 never scanned
    evidence, _ = scan_nodes(logs[:1], budget=AnalysisBudget.unlimited())
    assert evidence.budget is None
