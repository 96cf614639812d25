"""Audit artifacts: written for every verdict, complete, and re-checkable by `relaunch audit`.

The artifacts come from the real engine with a real SQLite history (and from the real
service); `relaunch audit` runs as a subprocess and must report identical recomputations
with exit 0, and any changed input or recorded field with exit 1.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._service_helpers import REPO_ROOT, cli_env, require_restart_agent, service_factory  # noqa: F401

require_restart_agent()

import storage  # noqa: E402
from attribution.audit import SCHEMA, AuditWriter, artifact_path, recheck  # noqa: E402
from attribution.engine import AttributionEngine  # noqa: E402
from restart_agent.model import PolicyConfig  # noqa: E402

FAIL = [
    "[rank0]: iteration 100/1000 | lm loss 2.1",
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/w/train.py", line 5, in <module>',
    "[rank1]: ModuleNotFoundError: No module named 'mymodel'",
    "[rank0]: [E ProcessGroupGloo] Watchdog caught collective operation timeout",
]


def audit_cli(*files: str | Path, fmt: str = "text") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relaunch_cli", "audit", *map(str, files), "--format", fmt],
        cwd=str(REPO_ROOT),
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def engine(tmp_path: Path):
    repo = storage.open_repository(f"sqlite:///{tmp_path / 'h.db'}")
    policy = PolicyConfig(same_root_no_progress_retries=2)
    eng = AttributionEngine(repo, policy=policy, audit_dir=tmp_path / "audit")
    eng.add_listener(AuditWriter(repo=repo, policy=policy))
    yield eng
    eng.close()
    repo.close()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_artifact_records_everything_and_rechecks(engine, tmp_path: Path):
    logs = [write(tmp_path / f"cycle_{i}.log", FAIL) for i in range(3)]
    verdicts = [engine.analyze_cycle("job", i, log) for i, log in enumerate(logs)]
    assert engine.drain(30)
    art = artifact_path(tmp_path / "audit", "job", 2)
    doc = json.loads(art.read_text())
    assert doc["schema"] == SCHEMA and doc["schema_version"] == 1
    assert doc["job_id"] == "job" and doc["cycle"] == 2
    data = logs[2].read_bytes()
    assert doc["inputs"]["log"] == {
        "path": str(logs[2]),
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert [h["cycle"] for h in doc["inputs"]["history"]] == [0, 1]
    assert doc["inputs"]["policy"]["same_root_no_progress_retries"] == 2
    v = verdicts[2]
    assert doc["verdict"] == v
    assert doc["decision"] == v["decision"] and doc["rule"] == v["rule"]
    assert doc["fingerprint"] == (v["primary"] or {}).get("fingerprint")
    assert doc["evidence"] == v["evidence"] and doc["progress"] == v["progress"]
    assert doc["history_counts"] == v["history"] and doc["budgets"] == v["budgets"]
    assert doc["timings"]["analysis_ms"] > 0 and doc["software"]["relaunch"]
    rec = engine.repo.get_cycle("job", 2)
    assert rec.audit_path == str(art)
    # re-check needs no database: everything is in the artifact
    engine.repo.delete_job("job")
    result = recheck(art)
    assert result.ok and result.input_ok and result.differences == []
    proc = audit_cli(art)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("OK ") and v["decision"] in proc.stdout


def test_changed_input_or_tampered_record_is_a_difference(engine, tmp_path: Path):
    log = write(tmp_path / "cycle_0.log", FAIL)
    engine.analyze_cycle("job", 0, log)
    assert engine.drain(30)
    art = artifact_path(tmp_path / "audit", "job", 0)
    doc = json.loads(art.read_text())
    tampered = tmp_path / "tampered.json"
    doc["verdict"]["decision"] = "RESTART" if doc["decision"] == "STOP" else "STOP"
    doc["verdict"]["rule"] = "made_up_rule"
    tampered.write_text(json.dumps(doc))
    proc = audit_cli(tampered, fmt="json")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["ok"] is False and out["input_ok"] is True
    assert {d["field"] for d in out["differences"]} >= {"verdict.decision", "verdict.rule"}
    # the log changed after the verdict: reported as a changed input
    with open(log, "a") as fh:
        fh.write("[rank0]: iteration 101/1000 | lm loss 2.0\n")
    proc = audit_cli(art)
    assert proc.returncode == 1
    assert proc.stdout.startswith("DIFFERENT") and "inputs.log.sha256" in proc.stdout
    log.unlink()
    proc = audit_cli(art)
    assert proc.returncode == 1 and "inputs.log" in proc.stdout


def test_bad_artifacts_get_a_one_line_error(tmp_path: Path):
    notjson = tmp_path / "x.json"
    notjson.write_bytes(b"\xff{{")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "relaunch.audit/99", "inputs": {}, "verdict": {}}))
    plain = tmp_path / "plain.json"
    plain.write_text("[1, 2]")
    for f, needle in [
        (notjson, "not a JSON audit artifact"),
        (other, "unsupported audit schema"),
        (plain, "not a relaunch audit artifact"),
        (tmp_path / "missing.json", "no such file"),
        (tmp_path, "is a directory"),
    ]:
        proc = audit_cli(f)
        assert proc.returncode == 2, (f, proc.stderr)
        assert proc.stderr.startswith("relaunch audit: error: ") and needle in proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_service_writes_artifacts(service_factory):  # noqa: F811
    svc = service_factory()
    log = write(svc.root / "c0.log", FAIL)
    with svc.client() as c:
        c.post(
            "/logs",
            json={
                "log_path": str(log),
                "job_id": "sv",
                "cycle_id": 0,
                "analysis_intent": "terminal",
            },
        )
        assert c.get("/logs", params={"log_path": str(log)}).json()["status"] == "completed"
        deadline = time.monotonic() + 20
        while not (rec := c.get("/v1/jobs/sv/cycles/0").json())["audit_path"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    art = Path(rec["audit_path"])
    assert art.parent.parent == svc.audit_dir
    assert audit_cli(art).returncode == 0


def test_artifact_records_the_policy_and_history_the_engine_used(tmp_path: Path):
    """The writer's own policy (default) and a re-read of the stored history would both
    be wrong here: the engine decided with its policy and saw only the last cycle."""
    repo = storage.open_repository(f"sqlite:///{tmp_path / 'h.db'}")
    policy = PolicyConfig(same_root_no_progress_retries=5)
    eng = AttributionEngine(repo, policy=policy, audit_dir=tmp_path / "audit", history_limit=1)
    eng.add_listener(AuditWriter(repo=repo))  # no policy given: must not record the default
    try:
        logs = [write(tmp_path / f"cycle_{i}.log", FAIL) for i in range(3)]
        for i, log in enumerate(logs):
            eng.analyze_cycle("job", i, log)
        assert eng.drain(30)
        doc = json.loads(artifact_path(tmp_path / "audit", "job", 2).read_text())
        assert doc["inputs"]["policy"]["same_root_no_progress_retries"] == 5
        assert [h["cycle"] for h in doc["inputs"]["history"]] == [1]
        assert recheck(artifact_path(tmp_path / "audit", "job", 2)).ok
    finally:
        eng.close()
        repo.close()
