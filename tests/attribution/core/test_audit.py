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

from tests._service_helpers import REPO_ROOT, cli_env, require_restart_agent

require_restart_agent()

from relaunch import storage  # noqa: E402
from relaunch.attribution.core.audit import SCHEMA, AuditWriter, artifact_path, recheck  # noqa: E402
from relaunch.attribution.core.engine import AttributionEngine  # noqa: E402
from relaunch.restart_agent.model import PolicyConfig  # noqa: E402

FAIL = [
    "[rank0]: iteration 100/1000 | lm loss 2.1",
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/w/train.py", line 5, in <module>',
    "[rank1]: ModuleNotFoundError: No module named 'mymodel'",
    "[rank0]: [E ProcessGroupGloo] Watchdog caught collective operation timeout",
]


def audit_cli(*files: str | Path, fmt: str = "text") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relaunch.cli", "audit", *map(str, files), "--format", fmt],
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
    verdicts = [engine.analyze_cycle("job", i, log).to_dict() for i, log in enumerate(logs)]
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
def test_service_writes_artifacts(service_factory, tmp_path: Path):
    key = tmp_path / "audit.key"
    key.write_text("service-audit-key\n")
    svc = service_factory(extra_args=["--audit-hmac-key-file", str(key)])
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
    signed = audit_cli(art, "--hmac-key-file", key)  # the service signed it with the key
    assert signed.returncode == 0 and "HMAC verified" in signed.stdout


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


# --- integrity: digest, HMAC, malformed artifacts (issue 12, item 6) ----------------------


def _artifact(engine, tmp_path: Path) -> tuple[Path, dict]:
    log = write(tmp_path / "cycle_0.log", FAIL)
    engine.analyze_cycle("job", 0, log)
    assert engine.drain(30)
    art = artifact_path(tmp_path / "audit", "job", 0)
    return art, json.loads(art.read_text())


def _flip(v: object) -> object:
    return "RESTART" if v == "STOP" else "STOP"


TAMPERS = {
    "decision": lambda d: d.__setitem__("decision", _flip(d["decision"])),
    "rule": lambda d: d.__setitem__("rule", "made_up"),
    "basis": lambda d: d.__setitem__("basis", "because I said so"),
    "fingerprint": lambda d: d.__setitem__("fingerprint", "0" * 16),
    "failure_class": lambda d: d.__setitem__("failure_class", "hardware_xid"),
    "evidence": lambda d: d["evidence"].pop(),
    "verdict.decision deleted": lambda d: d["verdict"].pop("decision"),
    "history_counts": lambda d: d.__setitem__("history_counts", {}),
    "policy": lambda d: d["inputs"]["policy"].__setitem__("same_root_no_progress_retries", 9),
    "llm": lambda d: d.__setitem__("llm", {"contributed": True}),
    "digest removed": lambda d: d.pop("integrity"),
}


@pytest.mark.parametrize("what", sorted(TAMPERS))
def test_every_tampered_field_is_reported(engine, tmp_path: Path, what):
    art, doc = _artifact(engine, tmp_path)
    assert audit_cli(art).returncode == 0
    TAMPERS[what](doc)
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(doc, indent=2))
    proc = audit_cli(bad, fmt="json")
    assert proc.returncode == 1, (what, proc.stdout, proc.stderr)
    out = json.loads(proc.stdout)
    assert out["ok"] is False and "Traceback" not in proc.stderr
    assert any(d["field"].startswith("integrity") for d in out["differences"]), out
    text = audit_cli(bad)
    assert text.returncode == 1 and text.stdout.startswith("DIFFERENT")


def _resign_without_key(doc: dict) -> None:
    """What an attacker without the key can do: recompute the plain digest."""
    from relaunch.attribution.core.audit import digest_of

    doc["integrity"]["digest"] = digest_of(doc)


def test_hmac_key_authenticates_the_artifact(tmp_path: Path, monkeypatch):
    key = tmp_path / "audit.key"
    key.write_text("s3cret-audit-key\n")
    monkeypatch.setenv("RELAUNCH_AUDIT_HMAC_KEY_FILE", str(key))  # as `relaunch run` reads it
    repo = storage.open_repository(f"sqlite:///{tmp_path / 'h.db'}")
    eng = AttributionEngine(repo, audit_dir=tmp_path / "audit")
    eng.add_listener(AuditWriter(repo=repo))
    try:
        art, doc = _artifact(eng, tmp_path)
    finally:
        eng.close()
        repo.close()
    assert doc["integrity"]["hmac"].startswith("hmac-sha256:")
    ok = audit_cli(art, "--hmac-key-file", key)
    assert ok.returncode == 0 and ok.stdout.startswith("OK ") and "HMAC verified" in ok.stdout
    unchecked = audit_cli(art)
    assert unchecked.returncode == 0 and "HMAC not checked" in unchecked.stdout
    wrong = tmp_path / "wrong.key"
    wrong.write_text("another key")
    assert audit_cli(art, "--hmac-key-file", wrong).returncode == 1
    doc["decision"] = _flip(doc["decision"])
    doc["verdict"]["decision"] = doc["decision"]
    _resign_without_key(doc)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(doc))
    proc = audit_cli(forged, "--hmac-key-file", key, fmt="json")
    assert proc.returncode == 1
    assert "integrity.hmac" in {d["field"] for d in json.loads(proc.stdout)["differences"]}


def test_unsigned_artifact_with_a_key_is_a_difference(engine, tmp_path: Path):
    art, _ = _artifact(engine, tmp_path)
    key = tmp_path / "k"
    key.write_text("k" * 32)
    proc = audit_cli(art, "--hmac-key-file", key)
    assert proc.returncode == 1 and "integrity.hmac" in proc.stdout


def _malformed(doc: dict, tmp_path: Path) -> dict[str, object]:
    def w(**kv: object) -> dict:
        d = json.loads(json.dumps(doc))
        for path, value in kv.items():
            target = d
            keys = path.split("__")
            for k in keys[:-1]:
                target = target[k]
            target[keys[-1]] = value
        return d

    deep = '{"schema": "relaunch.audit/1", "inputs": ' + "[" * 100_000 + "]" * 100_000 + "}"
    return {
        "inputs_not_dict": w(inputs=[1]),
        "log_not_dict": w(inputs__log="x"),
        "log_path_int": w(inputs__log__path=5),
        "history_not_list": w(inputs__history="abc"),
        "history_item_not_dict": w(inputs__history=[1, 2]),
        "history_bad_types": w(inputs__history=[{"cycle": "x", "decision": 5}]),
        "policy_string_budget": w(inputs__policy={"same_root_no_progress_retries": "three"}),
        "policy_huge_budget": w(inputs__policy={"job_no_progress_ceiling": 10**400}),
        "fr_ranks_bad": w(inputs__fr_culprit_ranks="0,1"),
        "node_health_bad": w(inputs__node_health=[{"node": 5}]),
        "verdict_scan_not_dict": w(verdict__scan=[1]),
        "size_string": w(inputs__log__size="big"),
        "deep_json": deep,
        "nan": "NaN",
    }


def test_malformed_artifacts_are_one_line_errors(engine, tmp_path: Path):
    art, doc = _artifact(engine, tmp_path)
    for name, bad in _malformed(doc, tmp_path).items():
        f = tmp_path / f"{name}.json"
        f.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        proc = audit_cli(f)
        assert proc.returncode == 2, (name, proc.returncode, proc.stdout, proc.stderr[-800:])
        assert "Traceback" not in proc.stderr, (name, proc.stderr[-800:])
        assert proc.stderr.startswith("relaunch audit: error: "), (name, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, (name, proc.stderr)


def test_fifo_log_or_fifo_artifact_does_not_hang(engine, tmp_path: Path):
    import os

    art, doc = _artifact(engine, tmp_path)
    log = Path(doc["inputs"]["log"]["path"])
    log.unlink()
    os.mkfifo(log)
    proc = audit_cli(art)  # the subprocess timeout is the hang detector
    assert proc.returncode == 1 and "not a regular file" in proc.stdout
    fifo_art = tmp_path / "art.json"
    os.mkfifo(fifo_art)
    proc = audit_cli(fifo_art)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr


def test_audit_text_output_escapes_control_characters(engine, tmp_path: Path):
    art, doc = _artifact(engine, tmp_path)
    doc["verdict"]["basis"] = "\x1b]0;pwned\x07\x1b[2J"
    bad = tmp_path / "evil\x1b]0;title\x07.json"  # the file name is printed too
    bad.write_text(json.dumps(doc))
    proc = audit_cli(bad)
    assert proc.returncode == 1 and "pwned" in proc.stdout
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "evil\\x1b]0;title\\x07.json" in proc.stdout


def test_serve_refuses_an_unusable_audit_key_file(tmp_path: Path):
    import os

    os.mkfifo(tmp_path / "fifo.key")
    (tmp_path / "empty.key").write_text("\n")
    for key, needle in [
        (tmp_path / "missing.key", "No such file"),
        (tmp_path / "fifo.key", "not a regular file"),
        (tmp_path / "empty.key", "is empty"),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "relaunch.cli", "serve", "--port", "0"]
            + ["--db", f"sqlite:///{tmp_path / 's.db'}", "--audit-hmac-key-file", str(key)],
            cwd=str(REPO_ROOT),
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("relaunch serve: error: ") and needle in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
